package testkit

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// The tap keeps the client's request as sent and passes it on unchanged (path,
// query, headers, body), and the target's SSE answer reaches the client whole.
func TestTapRecordsAndPassesOn(t *testing.T) {
	g := NewGemini()
	defer g.Close()
	g.Configure(func(g *Gemini) { g.APIKey = "k-1" })
	tap, err := NewTap(g.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	const body = `{"contents":[{"role":"user","parts":[{"text":"Hi"}]}]}`
	req, _ := http.NewRequest("POST", tap.URL+"/v1beta/models/m:streamGenerateContent?alt=sse", strings.NewReader(body))
	req.Header.Set("X-Goog-Api-Key", "k-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || err != nil || resp.Header.Get("Content-Type") != "text/event-stream" ||
		!strings.HasPrefix(string(got), "data: {") || !strings.Contains(string(got), `"finishReason":"STOP"`) {
		t.Fatalf("%d %v: %s", resp.StatusCode, err, got)
	}
	sent, passed := tap.Requests(), g.Requests()
	if len(sent) != 1 || len(passed) != 1 {
		t.Fatalf("%d recorded, %d passed on", len(sent), len(passed))
	}
	for _, c := range []Captured{sent[0], passed[0]} {
		if c.Method != "POST" || c.Path != "/v1beta/models/m:streamGenerateContent?alt=sse" || string(c.Body) != body || c.Header.Get("X-Goog-Api-Key") != "k-1" {
			t.Errorf("%+v", c)
		}
	}
}
