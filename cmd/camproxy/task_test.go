package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/app"
	"github.com/camproxy/camproxy/config"
	cobracli "github.com/camproxy/camproxy/internal/cli"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/proxy"
)

var updateGoldens = flag.Bool("update", false, "rewrite the golden files of task explain")

// harnessDir holds the request bodies real harnesses sent, captured by the suite
// (go test ./app -run TestCaptureHarness -capture).
const harnessDir = "../../protocol/testdata/harness"

// explain runs `camproxy task explain FILE --format json [more…]` and decodes it.
func explain(t *testing.T, file string, more ...string) proxy.Explanation {
	t.Helper()
	var out, errb bytes.Buffer
	args := append([]string{"task", "explain", file, "--format", "json"}, more...)
	if err := run(context.Background(), args, &out, &errb, noEnv); err != nil {
		t.Fatalf("task explain %s: %v\n%s", file, err, errb.String())
	}
	var ex proxy.Explanation
	if err := json.Unmarshal(out.Bytes(), &ex); err != nil {
		t.Fatalf("task explain %s printed no JSON: %v\n%s", file, err, out.String())
	}
	return ex
}

// writeBody writes a body to a temp file for task explain.
func writeBody(t *testing.T, body []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTaskExplainGoldens: for each harness's first request, what task explain prints
// (go test ./cmd/camproxy -run TestTaskExplainGoldens -update rewrites the goldens).
func TestTaskExplainGoldens(t *testing.T) {
	firsts, err := filepath.Glob(filepath.Join(harnessDir, "*", "first.json"))
	if err != nil || len(firsts) < 6 {
		t.Fatalf("harness captures: %v %v", firsts, err)
	}
	for _, path := range firsts {
		name := filepath.Base(filepath.Dir(path))
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if err := run(context.Background(), []string{"task", "explain", path, "--format", "json"}, &out, &errb, noEnv); err != nil {
				t.Fatalf("%v\n%s", err, errb.String())
			}
			golden := filepath.Join("testdata", "task-explain", name+".json")
			if *updateGoldens {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -run TestTaskExplainGoldens -update writes it)", err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Errorf("task explain %s:\n%s\nwant (%s):\n%s", path, out.String(), golden, want)
			}
			// Whatever the golden says, the task is a request a user typed: no envelope.
			var ex proxy.Explanation
			_ = json.Unmarshal(out.Bytes(), &ex)
			for _, marker := range []string{"<system-reminder>", "<environment_context>", "AGENTS.md instructions", "<INSTRUCTIONS>"} {
				if strings.Contains(ex.Task, marker) {
					t.Errorf("task %q holds the envelope %s", ex.Task, marker)
				}
			}
		})
	}
}

// TestTaskExplainCodex: Codex CLI's task is its prompt, not its environment_context;
// two prompts in one folder are two tasks; the same prompt on another day is one.
func TestTaskExplainCodex(t *testing.T) {
	first := explain(t, filepath.Join(harnessDir, "codex", "first.json"))
	if first.Task != "List the files in this repository." || first.Protocol != "responses" || first.Rule != "task.rules[0]: first_user_message" {
		t.Fatalf("codex first request: %+v", first)
	}
	second := explain(t, filepath.Join(harnessDir, "codex", "second-task.json"))
	if second.Task != "Explain what AGENTS.md asks of contributors." || second.TaskID == first.TaskID {
		t.Fatalf("a second task in the same folder: %+v (first %s)", second, first.TaskID)
	}
	otherDay := explain(t, filepath.Join(harnessDir, "codex", "first-other-day.json"))
	if otherDay.TaskID != first.TaskID || otherDay.Task != first.Task {
		t.Fatalf("the same prompt on another day: %+v, want task id %s", otherDay, first.TaskID)
	}
}

// TestTaskExplainClaudeCode: Claude Code's task is its prompt without the
// system-reminder around it, and its id is the same on two dates.
func TestTaskExplainClaudeCode(t *testing.T) {
	path := filepath.Join(harnessDir, "claude-code", "first.json")
	first := explain(t, path)
	if first.Task != "List the files in this repository." || first.Protocol != "anthropic" {
		t.Fatalf("claude code first request: %+v", first)
	}
	otherDay := explain(t, filepath.Join(harnessDir, "claude-code", "first-other-day.json"))
	if otherDay.TaskID != first.TaskID {
		t.Fatalf("captured on the day before: task id %s, want %s", otherDay.TaskID, first.TaskID)
	}
	// Another day, folder and session made by rewriting the capture: one task id.
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	date := gjson.GetBytes(body, "messages.0.content.0.text").Str
	if !strings.Contains(date, "Today's date is 2026-11-24.") {
		t.Fatalf("the capture's reminder has no date to rewrite: %q", date)
	}
	moved := strings.NewReplacer("2026-11-24", "2027-03-09", "/tmp/TestCaptureHarness", "/home/ann/src/TestCaptureHarness",
		"fa511ccb-cbf7-4445-aa5f-bd8434a64f50", "0b7e9d3c-1f55-4c1e-9a39-58f1e0d6c2aa").Replace(string(body))
	if moved == string(body) {
		t.Fatal("nothing rewritten")
	}
	if got := explain(t, writeBody(t, []byte(moved))); got.TaskID != first.TaskID || got.Task != first.Task {
		t.Fatalf("another day, folder and session: %+v, want task id %s", got, first.TaskID)
	}
	// A different request on the same day and in the same folder is another task.
	other := strings.Replace(string(body), "List the files in this repository.", "Delete the files in this repository.", 1)
	if got := explain(t, writeBody(t, []byte(other))); got.TaskID == first.TaskID {
		t.Fatalf("another request got the same task id %s", got.TaskID)
	}
}

func TestTaskExplainDetects(t *testing.T) {
	for _, tt := range []struct{ body, proto, task string }{
		{`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"Book a flight."}]}`, "openai", "Book a flight."},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Book a flight."},{"type":"image_url","image_url":{"url":"u"}}]}]}`, "openai", "Book a flight."},
		{`{"model":"m","input":"Book a flight."}`, "responses", "Book a flight."},
		{`{"model":"m","instructions":"s","input":[{"role":"user","content":[{"type":"input_text","text":"Book a flight."}]}]}`, "responses", "Book a flight."},
		{`{"model":"m","max_tokens":9,"system":"s","messages":[{"role":"user","content":"Book a flight."}]}`, "anthropic", "Book a flight."},
		{`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"},{"type":"text","text":"Book a flight."}]}]}`, "anthropic", "Book a flight."},
		{`{"messages":[{"role":"user","content":[{"text":"Book a flight."}]}],"inferenceConfig":{"maxTokens":9}}`, "bedrock", "Book a flight."},
		{`{"system":[{"text":"s"}],"messages":[{"role":"user","content":[{"text":"Book a flight."}]}]}`, "bedrock", "Book a flight."},
		{`{"messages":[{"role":"user","content":[{"text":"Book a flight."}]}]}`, "bedrock", "Book a flight."},
		{`{"anthropic_version":"bedrock-2023-05-31","max_tokens":9,"messages":[{"role":"user","content":"Book a flight."}]}`, "bedrock", "Book a flight."},
		{`{"prompt":"Book a flight.","max_gen_len":9}`, "bedrock", "Book a flight."},
	} {
		got := explain(t, writeBody(t, []byte(tt.body)))
		if got.Protocol != tt.proto || got.Task != tt.task {
			t.Errorf("%s:\n got %s %q, want %s %q", tt.body, got.Protocol, got.Task, tt.proto, tt.task)
		}
	}
	// --protocol overrides the shape.
	got := explain(t, writeBody(t, []byte(`{"messages":[{"role":"user","content":"x"}]}`)), "--protocol", "bedrock")
	if got.Protocol != "bedrock" {
		t.Errorf("--protocol bedrock: %+v", got)
	}
}

func TestTaskExplainText(t *testing.T) {
	var out, errb bytes.Buffer
	path := filepath.Join(harnessDir, "claude-code", "first.json")
	if err := run(context.Background(), []string{"task", "explain", path}, &out, &errb, noEnv); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	ex := explain(t, path)
	for _, want := range []string{"protocol:   anthropic\n", "experiment: default\n", "rule:       task.rules[0]: first_user_message\n", "task_id:    " + ex.TaskID + "\n",
		"task:\n  List the files in this repository.\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, out.String())
		}
	}
	// No task: said so, exit 0.
	out.Reset()
	if err := run(context.Background(), []string{"task", "explain", writeBody(t, []byte(`{"messages":[{"role":"system","content":"s"}]}`))}, &out, &errb, noEnv); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "none matched") {
		t.Errorf("no task:\n%s", out.String())
	}
}

func TestTaskExplainUsage(t *testing.T) {
	conf := writeConfig(t, "task: {rules: [{json_path: metadata.task}, {first_user_message: true}]}\n")
	body := writeBody(t, []byte(`{"metadata":{"task":"T-7: rebook"},"messages":[{"role":"user","content":"hi"}]}`))
	if got := explain(t, body, "--config", conf); got.Task != "T-7: rebook" || got.Rule != `task.rules[0]: json_path "metadata.task"` {
		t.Errorf("with --config's rules: %+v", got)
	}
	for _, args := range [][]string{
		{"task"}, {"task", "nope"}, {"task", "explain"}, {"task", "explain", body, body},
		{"task", "explain", body, "--protocol", "grpc"}, {"task", "explain", body, "--format", "yaml"},
		{"task", "explain", body, "--config", writeConfig(t, "task: {rules: [{strip: ['(']}]}\n")},
	} {
		err := run(context.Background(), args, io.Discard, io.Discard, noEnv)
		if code := cobracli.ExitCode(err, io.Discard); code != 2 {
			t.Errorf("%q: exit %d (%v), want 2", args, code, err)
		}
	}
	if err := run(context.Background(), []string{"task", "explain", writeBody(t, []byte(`{"messages":`))}, io.Discard, io.Discard, noEnv); cobracli.ExitCode(err, io.Discard) != 1 {
		t.Errorf("a body that is not JSON: %v, want exit 1", err)
	}
}

// TestTaskExplainIsTheProxys: the task id task explain prints is the one an
// in-process camproxy records for the same body; two Codex tasks in one folder are
// two CAM calls; a resumed Claude Code session continues its episode.
func TestTaskExplainIsTheProxys(t *testing.T) {
	up, anth, cam := testkit.NewUpstream(), testkit.NewAnthropic(), testkit.NewCAM()
	t.Cleanup(up.Close)
	t.Cleanup(anth.Close)
	t.Cleanup(cam.Close)
	// The answer Claude Code's resumed session carries in its history.
	anth.Configure(func(a *testkit.Anthropic) {
		a.ReplyFn = func(gjson.Result) testkit.Reply {
			return testkit.Reply{Content: "The repository has CLAUDE.md and README.md."}
		}
	})
	cfg := config.Default()
	cfg.Server.Listen, cfg.Server.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstreams["openai"].BaseURL = up.URL
	cfg.Upstreams["anthropic"].BaseURL = anth.URL
	ac := config.DefaultAugmenter()
	ac.Type, ac.BaseURL, ac.Timeout = "cam", cam.URL+"/v1", 2*time.Second
	cfg.Augmenters = map[string]config.Augmenter{"cam": ac}
	cfg.Experiment.Arms = []config.Arm{{Name: "cam", Weight: 1, Augmenter: "cam"}}
	dir := t.TempDir()
	cfg.Replay.Sinks = []string{"file://" + dir + "/replay"}
	cfg.Replay.SpoolDir = dir + "/spool"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a, err := app.New(cfg, app.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	})
	send := func(path, file string, header map[string]string) (episodeID, taskID string) {
		t.Helper()
		body, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("POST", "http://"+a.Addr()+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-test")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", file, resp.StatusCode)
		}
		id := resp.Header.Get("X-CAM-Episode-Id")
		er, err := http.Get("http://" + a.AdminAddr() + "/v1/episodes/" + id)
		if err != nil {
			t.Fatal(err)
		}
		defer er.Body.Close()
		var ep struct {
			TaskID string `json:"task_id"`
			Task   string `json:"task"`
		}
		if err := json.NewDecoder(er.Body).Decode(&ep); err != nil || ep.TaskID == "" {
			t.Fatalf("episode %s: %+v %v", id, ep, err)
		}
		if ex := explain(t, file); ex.TaskID != ep.TaskID || ex.Task != ep.Task {
			t.Fatalf("%s: task explain says %s %q, the proxy recorded %s %q", file, ex.TaskID, ex.Task, ep.TaskID, ep.Task)
		}
		return id, ep.TaskID
	}
	codex := filepath.Join(harnessDir, "codex")
	_, t1 := send("/v1/responses", filepath.Join(codex, "first.json"), nil)
	_, t2 := send("/v1/responses", filepath.Join(codex, "second-task.json"), nil)
	if t1 == t2 {
		t.Fatalf("two Codex tasks in one folder share the task id %s", t1)
	}
	if n := cam.Calls(); n != 2 {
		t.Fatalf("two Codex tasks made %d CAM calls, want 2", n)
	}
	claude := filepath.Join(harnessDir, "claude-code")
	anthHeader := map[string]string{"Anthropic-Version": "2023-06-01", "X-Api-Key": "sk-ant-test"}
	ep1, _ := send("/v1/messages?beta=true", filepath.Join(claude, "first.json"), anthHeader)
	// The resumed session: its system prompt differs from the first's in a line.
	ep2, _ := send("/v1/messages?beta=true", filepath.Join(claude, "continue.json"), anthHeader)
	if ep2 != ep1 {
		t.Fatalf("claude --continue started episode %s, want %s continued", ep2, ep1)
	}
}

// TestTaskExplainSetupPreamble: a harness that opens with its own environment text
// (the Gemini CLI 0.61.0's first user message: a setup preamble part, then the
// request part; captured in protocol/testdata/preamble and sent here over chat
// completions, the path camproxy augments) has the request as its task, task explain
// says the preamble was skipped and by which rule, and two requests in one folder are
// two tasks. Qwen Code 0.24.4 (a Gemini CLI fork on chat completions, captured) wraps
// the same preamble in a <system-reminder>: its task is its request too.
func TestTaskExplainSetupPreamble(t *testing.T) {
	b, err := os.ReadFile("../../protocol/testdata/preamble/gemini-cli-first.json")
	if err != nil {
		t.Fatal(err)
	}
	parts := gjson.GetBytes(b, "contents.0.parts.#.text").Array()
	if len(parts) != 2 {
		t.Fatalf("capture: %d parts", len(parts))
	}
	chat := func(request string) string {
		body, err := json.Marshal(map[string]any{"model": "gemini-2.5-pro", "stream": true, "messages": []any{
			map[string]any{"role": "system", "content": gjson.GetBytes(b, "systemInstruction.parts.0.text").Str},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "text", "text": parts[0].Str}, map[string]any{"type": "text", "text": request}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return writeBody(t, body)
	}
	const rule = "task.rules[0]: first_user_message; skipped setup preamble (working directory, date, OS, folder listing)"
	first := explain(t, chat(parts[1].Str))
	if first.Task != parts[1].Str || first.Rule != rule || first.Protocol != "openai" {
		t.Fatalf("gemini cli's first request over chat completions: %+v", first)
	}
	second := explain(t, chat("Explain what GEMINI.md asks of contributors."))
	if second.TaskID == first.TaskID || second.Rule != rule {
		t.Fatalf("a second task in the same folder: %+v (first %s)", second, first.TaskID)
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"task", "explain", chat(parts[1].Str)}, &out, &errb, noEnv); err != nil || !strings.Contains(out.String(), "skipped setup preamble (working directory, date, OS, folder listing)") {
		t.Fatalf("task explain's text does not say what it skipped: %v\n%s%s", err, out.String(), errb.String())
	}
	qwen := explain(t, "../../protocol/testdata/preamble/qwen-code-first.json")
	if qwen.Task != "List the files in this repository." || qwen.Protocol != "openai" {
		t.Fatalf("qwen code's first request: %+v", qwen)
	}
}
