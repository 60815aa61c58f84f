package app

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/camproxy/camproxy/internal/testkit"
)

// -capture (with -run captureRun) reruns the real agent harnesses against the fakes
// and rewrites protocol/testdata/harness with the request bodies they sent: the
// captures the task rules and `camproxy task explain` golden files are built on, taken
// from the clients, not written by hand. They are kept raw (volatile dates, paths and ids included):
// those are exactly what task identity must see through.
var captureHarness = flag.Bool("capture", false, "rerun the real agent harnesses against the fakes and rewrite protocol/testdata/harness")

const harnessDir = "../protocol/testdata/harness"

// captureRun is the -run pattern of the tests that capture: TestCaptureHarness, the
// framework tests that capture what their client sent through camproxy, and
// TestGeminiCLI, which keeps what Gemini CLI sent through a tap in front of camproxy.
const captureRun = "TestCaptureHarness|TestOpenAIAgents|TestFramework|TestGeminiCLI"

// captured is one request body a harness sent, and the file it goes to.
type captured struct {
	file string
	body []byte
}

// writeCaptures writes the bodies under harnessDir/client; with -capture off it only
// checks that a new run still has the shape of the committed capture (bodyShape: same
// top-level keys and the same sequence of item types and roles, or of Gemini contents'
// roles and part kinds), so that a client update that changes what it sends is noticed.
func writeCaptures(t *testing.T, client string, caps []captured) {
	t.Helper()
	dir := filepath.Join(harnessDir, client)
	if *captureHarness {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range caps {
		if !gjson.ValidBytes(c.body) {
			t.Fatalf("%s/%s: not JSON: %.200s", client, c.file, c.body)
		}
		p := filepath.Join(dir, c.file)
		if *captureHarness {
			if err := os.WriteFile(p, c.body, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		old, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%s: %v (go test ./app -run %q -capture writes it)", p, err, captureRun)
		}
		if got, want := bodyShape(c.body), bodyShape(old); got != want {
			t.Errorf("%s: the client now sends another shape (rerun with -capture and review the diff):\n got %s\nwant %s", p, got, want)
		}
	}
}

// bodyShape is a body's top-level keys and its conversation: type/role per item
// (input, messages) with its content parts' types, or (Gemini's contents) role per
// content with its parts' kinds.
func bodyShape(b []byte) string {
	r := gjson.ParseBytes(b)
	keys := objectKeys(r)
	var items []string
	for _, field := range []string{"input", "messages"} {
		for _, it := range r.Get(field).Array() {
			s := it.Get("type").String() + "/" + it.Get("role").String()
			if c := it.Get("content"); c.IsArray() {
				var parts []string
				for _, p := range c.Array() {
					parts = append(parts, p.Get("type").String())
				}
				s += "[" + strings.Join(parts, ",") + "]"
			}
			items = append(items, s)
		}
	}
	for _, c := range r.Get("contents").Array() {
		var parts []string
		// A part's kind is its keys in order: "text", "text+thought" (a thought
		// summary), "functionCall+thoughtSignature" (a signed call), "functionResponse"…
		for _, p := range c.Get("parts").Array() {
			parts = append(parts, strings.Join(objectKeys(p), "+"))
		}
		items = append(items, c.Get("role").String()+"["+strings.Join(parts, ",")+"]")
	}
	return strings.Join(keys, ",") + " | " + strings.Join(items, " ")
}

// objectKeys is a JSON object's keys in order.
func objectKeys(r gjson.Result) []string {
	var keys []string
	r.ForEach(func(k, _ gjson.Result) bool { keys = append(keys, k.String()); return true })
	return keys
}

// TestBodyShapeGemini: the shape check reads Gemini's contents (role and part kinds
// of each), so that Gemini CLI sending another conversation shape is noticed, as a
// change of keys alone would not show: the committed tool round trip with its call's
// thought signature dropped, a thought part added, the response as text, or another
// role each has another shape; another text does not.
func TestBodyShapeGemini(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(harnessDir, "gemini-cli", "tool-result.json"))
	if err != nil {
		t.Fatal(err)
	}
	const want = "contents,systemInstruction,tools,generationConfig | user[text,text] model[functionCall+thoughtSignature] user[functionResponse]"
	if got := bodyShape(b); got != want {
		t.Fatalf("shape %s, want %s", got, want)
	}
	for _, c := range []struct {
		name string
		edit func([]byte) ([]byte, error)
		same bool
	}{
		{"no signature", func(b []byte) ([]byte, error) { return sjson.DeleteBytes(b, "contents.1.parts.0.thoughtSignature") }, false},
		{"thought part", func(b []byte) ([]byte, error) {
			return sjson.SetRawBytes(b, "contents.1.parts.-1", []byte(`{"text":"Listing.","thought":true}`))
		}, false},
		{"response as text", func(b []byte) ([]byte, error) {
			return sjson.SetRawBytes(b, "contents.2.parts.0", []byte(`{"text":"alpha.txt beta.go"}`))
		}, false},
		{"role", func(b []byte) ([]byte, error) { return sjson.SetBytes(b, "contents.2.role", "function") }, false},
		{"other prompt", func(b []byte) ([]byte, error) { return sjson.SetBytes(b, "contents.0.parts.1.text", "Something else.") }, true},
	} {
		e, err := c.edit(b)
		if err != nil {
			t.Fatal(err)
		}
		if got := bodyShape(e); (got == want) != c.same {
			t.Errorf("%s: shape %s (same %v)", c.name, got, c.same)
		}
	}
}

// modelCalls keeps the bodies of the fake's model calls (POST to the given path).
func modelCalls(reqs []testkit.Captured, path string) [][]byte {
	var out [][]byte
	for _, r := range reqs {
		if r.Method == "POST" && strings.HasPrefix(r.Path, path) {
			out = append(out, r.Body)
		}
	}
	return out
}

func TestCaptureHarness(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	// The harnesses at once: each has its own fake, home and work folders (and tmux
	// session) and writes its own capture files, and each mostly waits, on node
	// starting an agent or on a terminal UI's screen; one after the other they were
	// the package's longest test. t.Run from goroutines rather than t.Parallel, which
	// -parallel (GOMAXPROCS: 2 on CI) would hold to two at a time.
	var wg sync.WaitGroup
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"codex", captureCodex},
		{"codex-default", captureCodexDefault},
		{"claude-code", captureClaudeCode},
		{"frameworks", captureFrameworks},
		{"side-calls", captureSideCalls},
	} {
		wg.Go(func() { t.Run(c.name, c.run) })
	}
	wg.Wait()
}

// captureFrameworks: the first two model calls (the task, then the turn with the tool
// result) of the Strands agent in clients/node, run against the fakes directly. The
// other frameworks' two calls are taken where their tests run them through camproxy
// (TestOpenAIAgents, TestFrameworkLangChain, TestFrameworkAISDK,
// TestFrameworkLangGraph: captureSent): the same conversation, so the bodies the
// client reports sending are byte for byte those it sends a fake directly, and one run
// of each client serves both.
func captureFrameworks(t *testing.T) {
	for _, f := range []struct{ client, script, path string }{
		{"strands", "strands-agent.mjs", "/v1/chat/completions"},
	} {
		t.Run(f.client, func(t *testing.T) {
			up := testkit.NewUpstream()
			defer up.Close()
			nodeScript(t, f.script, "CAMPROXY_BASE_URL="+up.URL+"/v1", "CAMPROXY_MODEL_KIND=openai",
				"CAMPROXY_TASK="+frameworkTask, "CAMPROXY_FOLLOWUP="+frameworkFollowup)
			calls := modelCalls(up.Requests(), f.path)
			if len(calls) < 2 {
				t.Fatalf("%s: %d model calls", f.script, len(calls))
			}
			writeCaptures(t, f.client, []captured{{"first.json", calls[0]}, {"tool-result.json", calls[1]}})
		})
	}
}

// captureSent writes (with -capture) or checks the first two bodies a framework
// script reports it sent ("sent"), as the capture files first.json and
// tool-result.json of client.
func captureSent(t *testing.T, client string, out gjson.Result) {
	t.Helper()
	sent := out.Get("sent").Array()
	if len(sent) < 2 {
		t.Fatalf("%s: %d bodies sent, want the task's and the tool result's: %s", client, len(sent), out.Raw)
	}
	writeCaptures(t, client, []captured{{"first.json", []byte(sent[0].String())}, {"tool-result.json", []byte(sent[1].String())}})
}

// captureCodex: the Codex CLI's default model (code mode: one freeform `exec` tool)
// on two tasks in one folder and on a "different day" (the same instant seen from
// UTC+14 and UTC-11 gives two dates), then gpt-5.5 (a top-level freeform apply_patch
// tool) editing a file: the custom_tool_call and Codex's custom_tool_call_output.
func captureCodex(t *testing.T) {
	up := testkit.NewUpstream()
	defer up.Close()
	up.Configure(func(u *testkit.Upstream) { u.RespondTo = codexScript })
	c := newCodexCLI(t, up.URL+"/v1")

	run := func(env []string, args ...string) []byte {
		t.Helper()
		before := len(up.Requests())
		c.exec(t, env, args...)
		calls := modelCalls(up.Requests()[before:], "/v1/responses")
		if len(calls) == 0 {
			t.Fatalf("codex %v sent no /v1/responses call", args)
		}
		return calls[0]
	}
	east, west := []string{"TZ=Pacific/Kiritimati"}, []string{"TZ=Pacific/Pago_Pago"}
	caps := []captured{
		{"first.json", run(east, "-s", "read-only", "List the files in this repository.")},
		{"second-task.json", run(east, "-s", "read-only", "Explain what AGENTS.md asks of contributors.")},
		{"first-other-day.json", run(west, "-s", "read-only", "List the files in this repository.")},
	}
	// Code mode: the model calls the freeform exec tool; Codex runs the script and
	// answers with a custom_tool_call_output.
	before := len(up.Requests())
	c.exec(t, east, "-s", "read-only", "Count the files with exec.")
	calls := modelCalls(up.Requests()[before:], "/v1/responses")
	if len(calls) != 2 {
		t.Fatalf("exec run: %d model calls, want 2", len(calls))
	}
	caps = append(caps, captured{"code-mode-exec-1.json", calls[0]}, captured{"code-mode-exec-2.json", calls[1]})

	before = len(up.Requests())
	out, _ := c.exec(t, east, "-m", "gpt-5.5", "--dangerously-bypass-approvals-and-sandbox", "Add a NOTES.md that records the rate limits.")
	calls = modelCalls(up.Requests()[before:], "/v1/responses")
	if len(calls) != 2 {
		t.Fatalf("apply_patch run: %d model calls, want 2; stdout %s", len(calls), out)
	}
	if b, err := os.ReadFile(filepath.Join(c.work, "NOTES.md")); err != nil || !strings.Contains(string(b), "60 requests a minute") {
		t.Fatalf("Codex did not apply the patch: %q %v", b, err)
	}
	caps = append(caps, captured{"apply-patch-1.json", calls[0]}, captured{"apply-patch-2.json", calls[1]})
	writeCaptures(t, "codex", caps)
	logHarness(t, "codex", up.Requests())
}

// captureCodexDefault: Codex on its default model set up the documented way (only
// openai_base_url: the built-in provider, which opens a Responses WebSocket first and
// falls back to HTTP when the server has none): the code-mode exec round trip, then
// `codex exec resume --last` with a second prompt in the same session. On this model
// Codex puts a configuration_update item (the reasoning effort) after each prompt and
// re-sends it in place on every later call: the items task identity and stitching
// must see through. Its own subtest, so that -capture rewrites only these files.
func captureCodexDefault(t *testing.T) {
	up := testkit.NewUpstream()
	defer up.Close()
	up.Configure(func(u *testkit.Upstream) {
		u.RespondTo = codexScript
		u.RefuseUpgrade = http.StatusMethodNotAllowed // the captures are of HTTP bodies
	})
	c := newCodexCLIWith(t, codexDocumentedTOML(up.URL+"/v1"))
	east := []string{"TZ=Pacific/Kiritimati"}
	c.exec(t, east, "-s", "read-only", "Count the files with exec.")
	calls := modelCalls(up.Requests(), "/v1/responses")
	if len(calls) != 2 {
		t.Fatalf("exec run: %d model calls, want 2", len(calls))
	}
	before := len(up.Requests())
	c.exec(t, east, "resume", "--last", "Now explain what AGENTS.md asks of contributors.")
	resumed := modelCalls(up.Requests()[before:], "/v1/responses")
	if len(resumed) != 1 {
		t.Fatalf("resume: %d model calls, want 1", len(resumed))
	}
	writeCaptures(t, "codex", []captured{{"default-exec-1.json", calls[0]}, {"default-exec-2.json", calls[1]}, {"default-resume.json", resumed[0]}})
	logHarness(t, "codex-default", up.Requests())
}

// captureClaudeCode: Claude Code's `-p` run, the same prompt on a "different day",
// and a `--continue` of the first session.
func captureClaudeCode(t *testing.T) {
	an := testkit.NewAnthropic()
	defer an.Close()
	an.Configure(func(a *testkit.Anthropic) {
		a.ReplyFn = func(body gjson.Result) testkit.Reply {
			return testkit.Reply{Content: "The repository has CLAUDE.md and README.md."}
		}
	})
	c := newClaudeCode(t, an.URL)
	run := func(env []string, args ...string) [][]byte {
		t.Helper()
		before := len(an.Requests())
		c.run(t, env, args...)
		calls := modelCalls(an.Requests()[before:], "/v1/messages")
		if len(calls) == 0 {
			t.Fatalf("claude %v sent no /v1/messages call", args)
		}
		return calls
	}
	east, west := []string{"TZ=Pacific/Kiritimati"}, []string{"TZ=Pacific/Pago_Pago"}
	var caps []captured
	add := func(name string, calls [][]byte) {
		for i, b := range calls {
			file := name + ".json" // the first call; later ones of the same run are name-2.json, …
			if i > 0 {
				file = fmt.Sprintf("%s-%d.json", name, i+1)
			}
			caps = append(caps, captured{file, b})
		}
	}
	add("first", run(east, "-p", "List the files in this repository."))
	add("continue", run(east, "--continue", "-p", "Now explain what CLAUDE.md asks of contributors."))
	add("first-other-day", run(west, "-p", "List the files in this repository."))
	// A tool turn: the model reads README.md (Read needs no permission in -p mode) and
	// Claude Code answers with its tool_result.
	readme := filepath.Join(c.work, "README.md")
	an.Configure(func(a *testkit.Anthropic) { a.ReplyFn = claudeScript(readme) })
	add("tool", run(east, "-p", "Summarise README.md in one line."))
	writeCaptures(t, "claude-code", caps)
	logHarness(t, "claude-code", an.Requests())
}

// claudeScript answers Claude Code: a Read of file to a prompt that names README.md,
// text otherwise and once the tool_result is in.
func claudeScript(file string) func(gjson.Result) testkit.Reply {
	return func(body gjson.Result) testkit.Reply {
		msgs := body.Get("messages").Array()
		var last gjson.Result
		for _, m := range msgs {
			if m.Get("role").String() == "user" {
				last = m
			}
		}
		text := ""
		for _, p := range last.Get("content").Array() {
			if p.Get("type").String() == "tool_result" {
				return testkit.Reply{Content: "README.md: a demo repository."}
			}
			text += p.Get("text").String()
		}
		if last.Get("content").Type == gjson.String {
			text = last.Get("content").String()
		}
		if strings.Contains(text, "README.md") {
			args, _ := json.Marshal(map[string]string{"file_path": file})
			return testkit.Reply{ToolCalls: []testkit.ToolCall{{ID: "toolu_read_1", Name: "Read", Arguments: string(args)}}}
		}
		return testkit.Reply{Content: "The repository has CLAUDE.md and README.md."}
	}
}

// logHarness prints every request a harness made (path, size, first user text), for
// the index in protocol/testdata/harness/README.md.
func logHarness(t *testing.T, client string, reqs []testkit.Captured) {
	for i, r := range reqs {
		var head struct {
			Model string `json:"model"`
		}
		_ = json.Unmarshal(r.Body, &head)
		t.Logf("%s #%d %s %s model=%s %d bytes ua=%q", client, i, r.Method, r.Path, head.Model, len(r.Body), r.Header.Get("User-Agent"))
	}
}
