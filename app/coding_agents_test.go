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

// The coding agents through camproxy (issue 16, item 6): the real Codex CLI and Claude
// Code (clients/node), run non-interactively as a user runs them, pointed at camproxy
// in front of the scripted upstreams. What a user of either must get: the task is the
// prompt typed (not the harness's envelope), one episode per session with one context,
// and the whole trajectory in the export, tool calls and their outputs included.

// guidance is what the scripted CAM answers for a task.
func guidance(task string) string { return "Guidance for: " + task + "\n- check the policy first." }

// TestCodexCLI: three `codex exec` sessions in one folder on one day: two different
// read-only tasks, then gpt-5.5 editing a file through the freeform apply_patch tool
// (a custom_tool_call answered by Codex's custom_tool_call_output).
func TestCodexCLI(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	e := newEnv(t, nil)
	e.up.Configure(func(u *testkit.Upstream) { u.RespondTo = codexScript })
	c := newCodexCLI(t, e.base+"/v1")
	tasks := []string{"List the files in this repository.", "Explain what AGENTS.md asks of contributors.", "Add a NOTES.md that records the rate limits."}
	for _, task := range tasks[:2] {
		if out, _ := c.exec(t, nil, "-s", "read-only", task); !strings.Contains(out, "AGENTS.md and README.md") {
			t.Fatalf("codex %q answered %q", task, out)
		}
	}
	if out, _ := c.exec(t, nil, "-m", "gpt-5.5", "--dangerously-bypass-approvals-and-sandbox", tasks[2]); !strings.Contains(out, "Added NOTES.md") {
		t.Fatalf("codex apply_patch run answered %q", out)
	}
	// The patch streamed through camproxy intact: Codex applied it.
	if b, err := os.ReadFile(filepath.Join(c.work, "NOTES.md")); err != nil || !strings.Contains(string(b), "60 requests a minute") {
		t.Fatalf("NOTES.md after the apply_patch run: %q %v", b, err)
	}
	reqs := modelCalls(e.up.Requests(), "/v1/responses")
	if len(reqs) != 4 {
		t.Fatalf("%d upstream calls, want 4 (1 + 1 + 2)", len(reqs))
	}
	// Each call carries its own task's context once: the second task got its own.
	for i, want := range []string{tasks[0], tasks[1], tasks[2], tasks[2]} {
		if n := strings.Count(string(reqs[i]), jsonText(guidance(want))); n != 1 {
			t.Errorf("call %d: the context for %q appears %d times", i, want, n)
		}
	}
	if n := e.cam.Calls(); n != 3 {
		t.Errorf("CAM calls %d, want 3 (one per task)", n)
	}

	buf, _ := recordedBuffer(t, e)
	if len(buf.Episodes) != 3 {
		t.Fatalf("%d episodes, want 3 (one per session)", len(buf.Episodes))
	}
	ids := map[string]bool{}
	for i, ep := range buf.Episodes {
		wantSteps := map[bool]int{true: 2, false: 1}[i == 2]
		if ep.Task != tasks[i] || ep.Context != guidance(tasks[i]) || ep.Steps != wantSteps || ep.Protocol != "openai" {
			t.Errorf("episode %d: task %q context %q steps %d protocol %q; want task %q, %d steps", i, ep.Task, ep.Context, ep.Steps, ep.Protocol, tasks[i], wantSteps)
		}
		ids[ep.TaskID] = true
	}
	if len(ids) != 3 {
		t.Errorf("three tasks share task ids: %v", ids)
	}
	rows := exportedRows(t, e)
	if len(rows) != 3 {
		t.Fatalf("export: %d rows", len(rows))
	}
	patch := rows[2]
	call, result := toolCallNamed(patch, "apply_patch")
	if !call.Exists() {
		t.Fatalf("the apply_patch call is not in the export: %s", patch.Get("messages").Raw)
	}
	if in := call.Get("custom.input").String() + call.Get("function.arguments").String(); in != codingAgentPatch {
		t.Errorf("apply_patch input %q, want the patch", in)
	}
	if !strings.Contains(result.Get("content").String(), "Success. Updated the following files") {
		t.Errorf("apply_patch output not in the export: %s", result.Raw)
	}
	roles := exportedRoles(t, patch)
	if !strings.HasSuffix(roles, "user,assistant+call,tool,assistant") {
		t.Errorf("apply_patch trajectory %s", roles)
	}
	last := patch.Get("messages").Array()
	if a := last[len(last)-1]; a.Get("content").String() != "Added NOTES.md with the rate limits." {
		t.Errorf("last message %s", a.Raw)
	}
}

// TestCodexCLIDefaultModel: Codex on its default model set up the documented way
// (openai_base_url only) through camproxy to an HTTP-only upstream: the exec round
// trip (two turns on one socket) and `codex exec resume --last` with a follow-up (a
// new socket, the history re-sent, stitched by its messages) are one episode of three
// steps, with one CAM call and the same context in every call. (Over a socket Codex
// sends no configuration_update; its HTTP fallback does, and TestCodexConfiguration*
// replays those captured calls.)
func TestCodexCLIDefaultModel(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	e := newEnv(t, nil)
	e.up.Configure(func(u *testkit.Upstream) {
		u.RespondTo = codexScript
		u.RefuseUpgrade = http.StatusMethodNotAllowed // each call whole over HTTP: what stitching reads
	})
	c := newCodexCLIWith(t, codexDocumentedTOML(e.base+"/v1"))
	const task, followup = "Count the files with exec.", "Now explain what AGENTS.md asks of contributors."
	if out, _ := c.exec(t, nil, "-s", "read-only", task); !strings.Contains(out, "Added NOTES.md") {
		t.Fatalf("codex answered %q", out)
	}
	if out, _ := c.exec(t, nil, "resume", "--last", followup); !strings.Contains(out, "AGENTS.md and README.md") {
		t.Fatalf("codex resume answered %q", out)
	}
	reqs := modelCalls(e.up.Requests(), "/v1/responses")
	if len(reqs) != 3 {
		t.Fatalf("%d upstream calls, want 3 (the exec round trip, the follow-up)", len(reqs))
	}
	steps := checkOneEpisode(t, e, task, 3)
	// Each step holds only what is new in its call: the exec output, then (the
	// answer's echo aside) the follow-up.
	if m := steps[1].Messages; len(m) != 1 || m[0].Role != "tool" {
		t.Errorf("step 2's messages %+v, want the exec output alone", m)
	}
	if m := steps[2].Messages; len(m) != 1 || m[0].Role != "user" || m[0].Content != followup {
		t.Errorf("step 3's messages %+v, want the follow-up alone", m)
	}
}

// TestClaudeCode: a `claude -p` session with a Read tool turn, its `--continue`, and
// the same prompt in a new session on another day (the same instant seen from UTC+14,
// then UTC-11).
func TestClaudeCode(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	e, an := newAnthropicEnv(t, nil)
	c := newClaudeCode(t, e.base)
	an.Configure(func(a *testkit.Anthropic) { a.ReplyFn = claudeScript(filepath.Join(c.work, "README.md")) })
	const task, followup = "Summarise README.md in one line.", "Now explain what CLAUDE.md asks of contributors."
	east, west := []string{"TZ=Pacific/Kiritimati"}, []string{"TZ=Pacific/Pago_Pago"}
	if out, _ := c.run(t, east, "-p", task); !strings.Contains(out, "a demo repository") {
		t.Fatalf("claude answered %q", out)
	}
	if out, _ := c.run(t, east, "--continue", "-p", followup); !strings.Contains(out, "CLAUDE.md and README.md") {
		t.Fatalf("claude --continue answered %q", out)
	}
	if out, _ := c.run(t, west, "-p", task); !strings.Contains(out, "a demo repository") {
		t.Fatalf("claude (another day) answered %q", out)
	}
	reqs := modelCalls(an.Requests(), "/v1/messages")
	if len(reqs) != 5 {
		t.Fatalf("%d upstream calls, want 5 (2 + 1 + 2)", len(reqs))
	}
	for i, r := range reqs {
		if n := strings.Count(string(r), jsonText(guidance(task))); n != 1 {
			t.Errorf("call %d: the context appears %d times", i, n)
		}
	}
	if n := e.cam.Calls(); n < 1 || n > 2 {
		t.Errorf("CAM calls %d, want one per session at most", n)
	}

	buf, _ := recordedBuffer(t, e)
	if len(buf.Episodes) != 2 {
		for _, ep := range buf.Episodes {
			t.Logf("episode %s task %q steps %d", ep.ID, ep.Task, ep.Steps)
		}
		t.Fatalf("%d episodes, want 2 (the first session with its --continue, the other day's)", len(buf.Episodes))
	}
	first, other := buf.Episodes[0], buf.Episodes[1]
	for i, ep := range buf.Episodes {
		if ep.Task != task || ep.Context != guidance(task) || ep.Protocol != "anthropic" {
			t.Errorf("episode %d: task %q context %q protocol %q", i, ep.Task, ep.Context, ep.Protocol)
		}
	}
	if first.Steps != 3 || other.Steps != 2 {
		t.Errorf("steps %d and %d, want 3 and 2", first.Steps, other.Steps)
	}
	if first.TaskID == "" || first.TaskID != other.TaskID {
		t.Errorf("task ids %q and %q: the same request on two dates must be one task", first.TaskID, other.TaskID)
	}
	rows := exportedRows(t, e)
	row := rows[0]
	call, result := toolCallNamed(row, "Read")
	if !call.Exists() || !strings.Contains(call.Get("function.arguments").String(), "README.md") || !strings.Contains(result.Get("content").String(), "A demo repository.") {
		t.Errorf("the Read call and its result are not in the export: %s", row.Get("messages").Raw)
	}
	if roles := exportedRoles(t, row); !strings.HasSuffix(roles, "assistant+call,tool,assistant,user,assistant") {
		t.Errorf("exported trajectory %s", roles)
	}
	if !strings.Contains(row.Get("messages").Raw, jsonText(followup)) {
		t.Errorf("the --continue prompt is not in the first session's trajectory")
	}
}

// TestFrameworkLangGraph: a LangGraph prebuilt ReAct agent (createReactAgent over
// ChatOpenAI, a system prompt, one tool, a MemorySaver thread) doing a task then a
// follow-up in the same thread: four calls, one episode, one context.
func TestFrameworkLangGraph(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	e := newEnv(t, nil)
	out := gjson.ParseBytes(nodeScript(t, "langgraph-agent.mjs", "CAMPROXY_BASE_URL="+e.base+"/v1",
		"CAMPROXY_TASK="+frameworkTask, "CAMPROXY_FOLLOWUP="+frameworkFollowup))
	if out.Get("toolCalls").Int() != 2 || len(out.Get("calls").Array()) != 4 {
		t.Fatalf("langgraph run: %s", out.Raw)
	}
	captureSent(t, "langgraph", out)
	for i, c := range out.Get("calls").Array() {
		if c.Get("status").Int() != 200 || c.Get("episode").String() != out.Get("calls.0.episode").String() {
			t.Fatalf("call %d: %s", i, c.Raw)
		}
	}
	if got := out.Get("calls.#.context").Raw; got != `["miss","episode","episode","episode"]` {
		t.Fatalf("X-CAM-Context per call: %s", got)
	}
	for i, r := range e.up.Requests() {
		if n := strings.Count(string(r.Body), jsonText(guidance(frameworkTask))); n != 1 {
			t.Fatalf("call %d: the context appears %d times", i, n)
		}
	}
	checkGoClientEpisode(t, e, frameworkTask, "openai")
}
