package app

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// nodeScript runs a script of clients/node with env and returns its stdout. Without
// node_modules it skips (make test installs them) unless CAMPROXY_REQUIRE_NODE=1.
func nodeScript(t *testing.T, script string, env ...string) []byte {
	t.Helper()
	dir, _ := filepath.Abs("../clients/node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		if os.Getenv("CAMPROXY_REQUIRE_NODE") == "1" {
			t.Fatalf("clients/node/node_modules missing: run `npm ci` there (make test does)")
		}
		t.Skip("clients/node/node_modules missing; `make test` runs npm ci")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "NODE_NO_WARNINGS=1"), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, out)
	}
	return out
}

// TestNodeOpenAIClient: the npm openai client gets the same behaviour as openai-go.
func TestNodeOpenAIClient(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	e := newEnv(t, nil)
	const task = "Rebook passenger Mia Li onto the earliest flight to Boston (économie, \"no fees\")."
	out := gjson.ParseBytes(nodeScript(t, "openai-chat.mjs", "CAMPROXY_BASE_URL="+e.base+"/v1", "CAMPROXY_TASK="+task))

	if out.Get("toolCall.function.name").String() != "lookup" || out.Get("toolCall.function.arguments").String() != `{"query":"flight status","limit":3}` {
		t.Fatalf("tool call: %s", out.Get("toolCall").Raw)
	}
	if out.Get("content").String() != "Done after 4 messages." || out.Get("usage.prompt_tokens").Int() != 42 {
		t.Fatalf("streamed: %q usage %s", out.Get("content").String(), out.Get("usage").Raw)
	}
	if h := out.Get("headers").Array(); h[0].String() != "miss" || h[1].String() != "episode" {
		t.Fatalf("X-CAM-Context per turn: %s", out.Get("headers").Raw)
	}
	if ep := out.Get("episodes").Array(); ep[0].String() == "" || ep[0].String() != ep[1].String() {
		t.Fatalf("episodes: %s", out.Get("episodes").Raw)
	}
	reqs := e.up.Requests()
	sent := out.Get("sent").Array()
	if len(reqs) != 2 || len(sent) != 2 {
		t.Fatalf("%d upstream calls, %d client calls", len(reqs), len(sent))
	}
	wantCtx := "Guidance for: " + task + "\n- check the policy first."
	for i := range reqs {
		assertSpliced(t, []byte(sent[i].Get("body").String()), reqs[i].Body, task, wantCtx)
	}
	if e.cam.Calls() != 1 {
		t.Fatalf("CAM calls %d", e.cam.Calls())
	}
}
