package app

import (
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
)

// TestUpstreamThroughHTTPProxy: with HTTP_PROXY set (Options.Env; the App reads the
// process environment otherwise), the upstream's calls go through the proxy's
// CONNECT tunnel to the upstream's host:port (named upstream.test, which resolves
// nowhere: only the proxy reaches it); answers, streams and the context work the
// same on that path.
func TestUpstreamThroughHTTPProxy(t *testing.T) {
	var cp *testkit.ConnectProxy
	var named string
	env := func(k string) string {
		if k == "HTTP_PROXY" {
			return cp.URL()
		}
		return ""
	}
	e := newEnvWith(t, func(cfg *config.Config) {
		u, err := url.Parse(cfg.Upstreams["openai"].BaseURL)
		if err != nil {
			t.Fatal(err)
		}
		named = "upstream.test:" + u.Port()
		cp = testkit.NewConnectProxy(t, map[string]string{named: u.Host})
		cfg.Upstreams["openai"].BaseURL = "http://" + named
	}, Options{Logger: testLogger(t), Env: env})
	a := newAgent("Task: refund order #7 through an HTTP proxy", false)
	resp, out := e.post(a.body(""), nil)
	if resp.StatusCode != 200 || !gjson.GetBytes(out, "choices.0.message").Exists() {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	if got := resp.Header.Get("X-CAM-Context"); got == "" || got == "fail-open" {
		t.Fatalf("X-CAM-Context %q", got)
	}
	conn, r := streamRequest(t, e.app.Addr(), newAgent("Task: stream through an HTTP proxy", false).body(`,"stream":true`))
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
	targets := cp.Targets()
	if len(targets) == 0 {
		t.Fatal("the proxy saw no CONNECT")
	}
	for _, got := range targets {
		if got != named {
			t.Fatalf("the proxy saw CONNECT %q, want only %s", targets, named)
		}
	}
	if n := len(e.up.Requests()); n < 2 {
		t.Fatalf("the upstream received %d calls", n)
	}
}
