package app

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
)

// TestCodexDocumentedSetup: Codex CLI set up only as its docs say — openai_base_url in
// a fresh CODEX_HOME's config.toml and OPENAI_API_KEY, no custom provider — through
// camproxy, against an upstream that serves the Responses WebSocket mode (as OpenAI)
// and one that refuses the upgrade 405 (as vLLM). Codex opens GET /v1/responses as a
// WebSocket first (camproxy answered 405, and Codex showed five transport errors
// before falling back to HTTP). For each upstream, the default model's exec round
// trip (code mode) and an apply_patch edit (gpt-5.5, the freeform tool): no transport
// error, the task done, one episode holding every turn (websocket), one CAM call, and
// the context in the conversation once, identical: every HTTP call carries it; over
// the upstream's socket the first turn carries it and the continuations build on it.
func TestCodexDocumentedSetup(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	tasks := []struct {
		name   string
		args   []string
		prompt string
	}{
		{"default model exec", []string{"-s", "read-only"}, "Count the files with exec."},
		{"apply_patch edit", []string{"-m", "gpt-5.5", "--dangerously-bypass-approvals-and-sandbox"}, "Add a NOTES.md that records the rate limits."},
	}
	for _, upstream := range []struct {
		name   string
		refuse int
	}{{"websocket upstream", 0}, {"http-only upstream", http.StatusMethodNotAllowed}} {
		for _, task := range tasks {
			t.Run(upstream.name+"/"+task.name, func(t *testing.T) {
				t.Parallel() // four Codex sessions, each with its own camproxy and fakes
				e := newEnv(t, nil)
				e.up.Configure(func(u *testkit.Upstream) {
					u.RespondTo = codexScript
					u.RefuseUpgrade = upstream.refuse
				})
				c := newCodexCLIWith(t, codexDocumentedTOML(e.base+"/v1"))
				stdout, stderr := c.exec(t, nil, append(task.args, task.prompt)...)
				for _, bad := range []string{"unexpected status", "Method Not Allowed", "Upgrade Required", "Reconnecting", "transport", "stream disconnected", "ERROR"} {
					if strings.Contains(stdout+stderr, bad) {
						t.Fatalf("Codex reported %q:\nstdout:\n%s\nstderr:\n%s", bad, stdout, stderr)
					}
				}
				if !strings.Contains(stdout, "Added NOTES.md") {
					t.Fatalf("Codex did not finish the task:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
				}
				if strings.Contains(task.name, "apply_patch") {
					if b, err := os.ReadFile(filepath.Join(c.work, "NOTES.md")); err != nil || !strings.Contains(string(b), "Rate limits") {
						t.Fatalf("the patch was not applied: %q %v", b, err)
					}
				}
				ctx := jsonText(guidance(task.prompt))
				calls := modelCalls(e.up.Requests(), "/v1/responses")
				turns := len(calls)
				if upstream.refuse == 0 {
					if len(calls) != 0 {
						t.Fatalf("%d HTTP calls to an upstream that serves the socket", len(calls))
					}
					socks := e.up.Sockets()
					if len(socks) != 1 {
						t.Fatalf("%d upstream sockets, want the session's one", len(socks))
					}
					turns = len(socks[0].Messages)
					for i, m := range socks[0].Messages {
						b := gjson.ParseBytes(m)
						want := 1 // the first turn, or one that re-sends the whole conversation
						if b.Get("previous_response_id").Exists() {
							want = 0 // built on the upstream's state, which holds it
						}
						if i == 0 && want != 1 || b.Get("generate").Type == gjson.False || b.Get("type").Str != "response.create" {
							t.Errorf("upstream message %d: %.300s", i, m)
						}
						if n := strings.Count(string(m), ctx); n != want {
							t.Errorf("upstream message %d: the context appears %d times, want %d", i, n, want)
						}
					}
				} else {
					for i, b := range calls {
						if n := strings.Count(string(b), ctx); n != 1 || strings.Contains(string(b), `"previous_response_id"`) || strings.Contains(string(b), `"generate":false`) {
							t.Errorf("upstream call %d: the context %d times, or a warm-up or continuation an HTTP upstream cannot serve: %.300s", i, n, b)
						}
					}
				}
				if turns < 2 {
					t.Fatalf("%d upstream turns, want the tool loop's two or more", turns)
				}
				if n := e.cam.Calls(); n != 1 {
					t.Fatalf("CAM calls %d, want 1", n)
				}
				buf, steps := recordedBuffer(t, e)
				if len(buf.Episodes) != 1 || len(steps) != turns || buf.Episodes[0].Context != guidance(task.prompt) {
					t.Fatalf("%d episodes, %d steps for %d turns; want one episode holding every turn with the task's context", len(buf.Episodes), len(steps), turns)
				}
				for _, s := range steps {
					if s.Transport != "websocket" || s.Status != 200 {
						t.Fatalf("step %d: transport %q status %d", s.Turn, s.Transport, s.Status)
					}
				}
			})
		}
	}
}
