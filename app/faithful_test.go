package app

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/replay/lake"
)

// exportLines shuts camproxy down (flushing the recorder), reads its replay buffer
// and exports it as JSON Lines, one row an episode.
func exportLines(t *testing.T, e *env) []map[string]any {
	t.Helper()
	buf, _ := recordedBuffer(t, e)
	var out bytes.Buffer
	if err := lake.ExportJSONL(&out, buf); err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(out.String()), "\n") {
		var row map[string]any
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		rows = append(rows, row)
	}
	return rows
}

// postPath sends body to camproxy at path and returns the answer's bytes.
func (e *env) postPath(path string, body []byte) []byte {
	e.t.Helper()
	resp, err := http.Post(e.base+path, "application/json", bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		e.t.Fatalf("%s: status %d: %s", path, resp.StatusCode, b)
	}
	return b
}

// TestApplyPatchTurnsOneEpisode replays Codex CLI's own apply_patch turn (the two
// request bodies it sent, captured from the real client) through camproxy: the model
// answers the first call with a custom_tool_call, Codex sends it back with its
// custom_tool_call_output. The two calls are one episode, and the exported
// trajectory holds the patch as a custom tool call and its output as a tool message.
func TestApplyPatchTurnsOneEpisode(t *testing.T) {
	first, err1 := os.ReadFile("../protocol/testdata/harness/codex/apply-patch-1.json")
	second, err2 := os.ReadFile("../protocol/testdata/harness/codex/apply-patch-2.json")
	if err1 != nil || err2 != nil {
		t.Fatalf("captures: %v %v", err1, err2)
	}
	var call gjson.Result
	for _, it := range gjson.GetBytes(second, "input").Array() {
		if it.Get("type").Str == "custom_tool_call" {
			call = it
		}
	}
	patch := call.Get("input").Str
	if !strings.Contains(patch, "*** Begin Patch") {
		t.Fatalf("capture holds no patch: %s", call.Raw)
	}
	e := newEnv(t, func(c *config.Config) { c.Experiment.Arms = []config.Arm{{Name: "none", Weight: 1, Augmenter: "none"}} })
	e.up.Configure(func(u *testkit.Upstream) {
		u.RespondTo = func(_ gjson.Result, conv []gjson.Result) testkit.Reply {
			if conv[len(conv)-1].Get("type").Str == "custom_tool_call_output" {
				return testkit.Reply{Content: "Added NOTES.md."}
			}
			return testkit.Reply{ToolCalls: []testkit.ToolCall{{ID: call.Get("call_id").Str, Name: "apply_patch", Arguments: patch, Custom: true}}}
		}
	})
	e.postPath("/v1/responses", first)
	e.postPath("/v1/responses", second)

	rows := exportLines(t, e)
	if len(rows) != 1 {
		t.Fatalf("%d episodes, want the two calls in one", len(rows))
	}
	if turns := rows[0]["turns"]; turns != float64(2) {
		t.Errorf("turns %v, want 2", turns)
	}
	msgs := rows[0]["messages"].([]any)
	var calls, outputs int
	for _, m := range msgs {
		m := m.(map[string]any)
		for _, c := range asList(m["tool_calls"]) {
			want := map[string]any{"id": "call_patch_1", "type": "custom", "custom": map[string]any{"name": "apply_patch", "input": patch}}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("tool call %v\nwant %v", c, want)
			}
			calls++
		}
		if m["role"] == "tool" {
			if m["tool_call_id"] != "call_patch_1" || !strings.Contains(m["content"].(string), "Success.") {
				t.Errorf("tool message %v", m)
			}
			outputs++
		}
	}
	if calls != 1 || outputs != 1 {
		t.Errorf("%d patch calls and %d outputs in the trajectory, want 1 and 1:\n%v", calls, outputs, msgs)
	}
	if last := msgs[len(msgs)-1].(map[string]any); last["role"] != "assistant" || last["content"] != "Added NOTES.md." {
		t.Errorf("last message %v", last)
	}
}

// TestCodexDefaultModelTurnsOneEpisode replays Codex's default model's exec round trip
// (captured from the real client set up the documented way: each call carries a
// configuration_update item after the prompt) through camproxy: one episode of two
// turns, one CAM call, the context once in each call, the task the prompt, and the
// second step recorded with only what is new in it, the exec output.
func TestCodexDefaultModelTurnsOneEpisode(t *testing.T) {
	first, err1 := os.ReadFile("../protocol/testdata/harness/codex/default-exec-1.json")
	second, err2 := os.ReadFile("../protocol/testdata/harness/codex/default-exec-2.json")
	if err1 != nil || err2 != nil {
		t.Fatalf("captures: %v %v", err1, err2)
	}
	const task = "Count the files with exec."
	e := newEnv(t, nil)
	e.up.Configure(func(u *testkit.Upstream) { u.RespondTo = codexScript })
	e.postPath("/v1/responses", first)
	e.postPath("/v1/responses", second)
	steps := checkOneEpisode(t, e, task, 2)
	if m := steps[1].Messages; len(m) != 1 || m[0].Role != "tool" || m[0].ToolCallID != "call_exec_1" {
		t.Errorf("second step's messages %+v, want only the exec output", m)
	}
	if strings.Contains(string(mustMarshal(t, steps)), "configuration_update") {
		t.Error("a configuration_update item is recorded as conversation")
	}
}

// checkOneEpisode checks that the Responses calls camproxy forwarded for one session
// of task carry its context once each, that the CAM was asked once, and that the
// session was recorded as one episode of task with n steps and that context; it
// returns the steps.
func checkOneEpisode(t *testing.T, e *env, task string, n int) []*replay.StepEvent {
	t.Helper()
	for i, r := range modelCalls(e.up.Requests(), "/v1/responses") {
		if c := strings.Count(string(r), jsonText(guidance(task))); c != 1 {
			t.Errorf("call %d: the context appears %d times", i, c)
		}
	}
	if c := e.cam.Calls(); c != 1 {
		t.Errorf("CAM calls %d, want 1", c)
	}
	buf, steps := recordedBuffer(t, e)
	if len(buf.Episodes) != 1 {
		for _, ep := range buf.Episodes {
			t.Logf("episode %s task %q steps %d", ep.ID, ep.Task, ep.Steps)
		}
		t.Fatalf("%d episodes, want the session in one", len(buf.Episodes))
	}
	if ep := buf.Episodes[0]; ep.Task != task || ep.Steps != n || ep.Context != guidance(task) || len(steps) != n {
		t.Fatalf("episode: task %q, %d steps (%d recorded), context %q; want %q, %d steps", ep.Task, ep.Steps, len(steps), ep.Context, task, n)
	}
	return steps
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// TestExportToolCallsOpenAIShape: a tool-calling chat run, exported, has its tool
// calls exactly as OpenAI writes them: {"id","type":"function","function":{"name",
// "arguments"}}.
func TestExportToolCallsOpenAIShape(t *testing.T) {
	e := newEnv(t, nil)
	e.up.Reply = func(body gjson.Result) testkit.Reply {
		if n := len(body.Get("messages").Array()); n < 3 {
			return testkit.Reply{ToolCalls: []testkit.ToolCall{{ID: "call_1", Name: "lookup", Arguments: `{"flight":"UA12"}`}}}
		}
		return testkit.Reply{Content: "On time."}
	}
	a := newAgent("Is UA12 on time?", false)
	e.turn(a)
	e.turn(a)
	rows := exportLines(t, e)
	if len(rows) != 1 {
		t.Fatalf("%d episodes", len(rows))
	}
	var found bool
	for _, m := range rows[0]["messages"].([]any) {
		for _, c := range asList(m.(map[string]any)["tool_calls"]) {
			want := map[string]any{"id": "call_1", "type": "function", "function": map[string]any{"name": "lookup", "arguments": `{"flight":"UA12"}`}}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("tool call %v\nwant %v", c, want)
			}
			found = true
		}
	}
	if !found {
		t.Fatal("no tool call exported")
	}
}

// TestImagePartInExport: an image sent as a content part survives into the export:
// by URL as its URL, inline as its SHA-256 and media type — and the bytes are in no
// replay file — or, with replay.keep_media, as the data URL it was.
func TestImagePartInExport(t *testing.T) {
	const data = "aGVsbG8gd29ybGQ=" // "hello world"
	const sum = "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"What is in these pictures?"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + data + `"}},` +
		`{"type":"image_url","image_url":{"url":"https://example.com/cat.jpg","detail":"low"}}]}]}`
	for _, keep := range []bool{false, true} {
		e := newEnv(t, func(c *config.Config) { c.Replay.KeepMedia = keep })
		e.postPath("/v1/chat/completions", []byte(body))
		rows := exportLines(t, e)
		if len(rows) != 1 {
			t.Fatalf("%d episodes", len(rows))
		}
		user := rows[0]["messages"].([]any)[0].(map[string]any)
		parts, ok := user["content"].([]any)
		if !ok || len(parts) != 3 {
			t.Fatalf("keep_media %v: content %v", keep, user["content"])
		}
		inline := map[string]any{"type": "image_url", "image_url": map[string]any{"sha256": sum, "media_type": "image/png"}}
		if keep {
			inline = map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + data}}
		}
		want := []any{
			map[string]any{"type": "text", "text": "What is in these pictures?"},
			inline,
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "https://example.com/cat.jpg", "detail": "low"}},
		}
		if !reflect.DeepEqual(parts, want) {
			t.Errorf("keep_media %v: parts\n got %v\nwant %v", keep, parts, want)
		}
		if inReplay := replayHolds(t, e, data); inReplay != keep {
			t.Errorf("keep_media %v: the image's bytes in the replay files: %v", keep, inReplay)
		}
	}
}

// replayHolds reports whether any file of the replay sink holds s.
func replayHolds(t *testing.T, e *env, s string) bool {
	t.Helper()
	dir := strings.TrimPrefix(e.cfg.Replay.Sinks[0], "file://")
	found := false
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		found = found || bytes.Contains(b, []byte(s))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}
