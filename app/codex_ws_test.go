package app

import (
	"strings"
	"testing"
)

// TestCodexDefaultSetup: Codex CLI set up only as its docs say — openai_base_url in a
// fresh CODEX_HOME's config.toml and OPENAI_API_KEY, its default model, no custom
// provider — through camproxy to the HTTP-only fake. Codex opens GET /v1/responses
// as a WebSocket (camproxy answered 405, and Codex showed five transport errors
// before falling back to HTTP); now the socket is served, each turn going upstream
// as POST /v1/responses: no transport error in its output, every call a streamed
// Responses call, one episode holding every turn, one CAM call.
func TestCodexDefaultSetup(t *testing.T) {
	e := newEnv(t, nil)
	c := newCodexCLIWith(t, codexDocumentedTOML(e.base+"/v1"))
	stdout, stderr := c.exec(t, nil, "Is flight UA12 on time? Look it up.")
	for _, bad := range []string{"unexpected status", "405", "426", "Reconnecting", "transport", "stream disconnected"} {
		if strings.Contains(stdout+stderr, bad) {
			t.Fatalf("Codex reported %q:\nstdout:\n%s\nstderr:\n%s", bad, stdout, stderr)
		}
	}
	if !strings.Contains(stdout, "Done after") {
		t.Fatalf("Codex did not finish the task:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	reqs := e.up.Requests()
	if len(reqs) < 2 {
		t.Fatalf("%d upstream calls, want the tool loop's two or more", len(reqs))
	}
	for i, r := range reqs {
		if strings.Contains(string(r.Body), `"generate":false`) || strings.Contains(string(r.Body), `"previous_response_id"`) {
			t.Fatalf("upstream call %d is a warm-up or a continuation the HTTP upstream cannot serve: %.500s", i, r.Body)
		}
		if r.Method != "POST" || r.Path != "/v1/responses" {
			t.Fatalf("upstream call %d: %s %s", i, r.Method, r.Path)
		}
	}
	if n := e.cam.Calls(); n != 1 {
		t.Fatalf("CAM calls %d, want 1", n)
	}
	buf, steps := recordedBuffer(t, e)
	if len(buf.Episodes) != 1 || len(steps) != len(reqs) {
		t.Fatalf("%d episodes, %d steps for %d calls; want one episode holding every turn", len(buf.Episodes), len(steps), len(reqs))
	}
	for _, s := range steps {
		if s.Transport != "websocket" || s.Status != 200 {
			t.Fatalf("step %d: transport %q status %d", s.Turn, s.Transport, s.Status)
		}
	}
}
