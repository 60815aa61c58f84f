package app

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
)

// TestNetHTTPTransport: an upstream transport given in Options (or an HTTP proxy in
// the environment) sends the calls through net/http instead of camproxy's fasthttp
// client; answers, streams and episodes work the same on that path.
func TestNetHTTPTransport(t *testing.T) {
	e := newEnvWith(t, nil, Options{Logger: testLogger(t), Transport: &http.Transport{DisableCompression: true}})
	a := newAgent("Task: refund order #7 over net/http", false)
	resp, out := e.post(a.body(""), nil)
	if resp.StatusCode != 200 || !gjson.GetBytes(out, "choices.0.message").Exists() {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	if got := resp.Header.Get("X-CAM-Context"); got == "" || got == "fail-open" {
		t.Fatalf("X-CAM-Context %q", got)
	}
	conn, r := streamRequest(t, e.app.Addr(), newAgent("Task: stream over net/http", false).body(`,"stream":true`))
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(testkit.Patience(t)))
	if ev := readEvent(t, r); !strings.Contains(ev, "chat.completion.chunk") {
		t.Fatalf("first event %q", ev)
	}
	rest, err := io.ReadAll(r)
	if err != nil && !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("stream: %v %q", err, rest)
	}
	if !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("stream did not end with [DONE]: %q", rest)
	}
}
