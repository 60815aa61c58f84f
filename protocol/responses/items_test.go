package responses

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
)

// TestItemTypes: every input item type of the Responses API has a place in the
// chat-shaped messages — as a message, a tool call, a tool message, or verbatim in
// the raw list of the assistant run it sits in — and none is dropped but the items
// that carry configuration or state (stateItems), which are in no message and split
// no assistant run.
func TestItemTypes(t *testing.T) {
	raw := func(s ...string) []protocol.RawJSON {
		out := make([]protocol.RawJSON, len(s))
		for i, r := range s {
			out[i] = protocol.RawJSON(r)
		}
		return out
	}
	const (
		reasoning = `{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"thinking"}],"encrypted_content":"gAAAA"}`
		webSearch = `{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"fares"}}`
		fileSrch  = `{"type":"file_search_call","id":"fs_1","status":"completed","queries":["policy"],"results":null}`
		computer  = `{"type":"computer_call","id":"cu_1","call_id":"call_c","action":{"type":"click","x":1,"y":2},"pending_safety_checks":[],"status":"completed"}`
		shellOut  = `{"type":"local_shell_call_output","id":"lso_1","call_id":"call_sh","output":"total 0"}`
		approval  = `{"type":"mcp_approval_response","approval_request_id":"mcpr_1","approve":true}`
		future    = `{"type":"hologram_call","id":"h_1","beam":[1,2]}`
	)
	tests := []struct {
		name  string
		items string
		want  []protocol.Message
	}{
		{"message parts", `{"role":"user","content":[{"type":"input_text","text":"what is this?"},` +
			`{"type":"input_image","image_url":"data:image/png;base64,aGVsbG8=","detail":"low"},` +
			`{"type":"input_image","image_url":"https://example.com/a.png"},{"type":"input_image","file_id":"file-img"},` +
			`{"type":"input_file","filename":"a.pdf","file_data":"data:application/pdf;base64,JVBERi0="},` +
			`{"type":"input_file","file_url":"https://example.com/b.pdf"},` +
			`{"type":"input_audio","input_audio":{"data":"UklGRg==","format":"wav"}},{"type":"input_video","video_url":"v"}]}`,
			[]protocol.Message{{Role: "user", Content: "what is this?", Parts: []protocol.Part{
				{Type: "text", Text: "what is this?"},
				{Type: "image_url", Media: &protocol.Media{MediaType: "image/png", Data: "aGVsbG8=", Detail: "low"}},
				{Type: "image_url", Media: &protocol.Media{URL: "https://example.com/a.png"}},
				{Type: "image_url", Media: &protocol.Media{FileID: "file-img"}},
				{Type: "file", Media: &protocol.Media{Filename: "a.pdf", MediaType: "application/pdf", Data: "JVBERi0="}},
				{Type: "file", Media: &protocol.Media{URL: "https://example.com/b.pdf"}},
				{Type: "input_audio", Media: &protocol.Media{Data: "UklGRg==", Format: "wav", MediaType: "audio/wav"}},
				{Type: "input_video", Raw: `{"type":"input_video","video_url":"v"}`},
			}}}},
		{"text parts stay a string", `{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]}`,
			[]protocol.Message{{Role: "user", Content: "a\nb"}}},
		{"function call and output", `{"type":"function_call","call_id":"call_1","name":"lookup","arguments":"{\"q\":1}"},` +
			`{"type":"function_call_output","call_id":"call_1","output":[{"type":"input_text","text":"seen"},{"type":"input_image","image_url":"https://x/y.png"}]}`,
			[]protocol.Message{
				{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: "call_1", Type: "function", Name: "lookup", Arguments: `{"q":1}`}}},
				{Role: "tool", ToolCallID: "call_1", Content: "seen", Parts: []protocol.Part{{Type: "text", Text: "seen"},
					{Type: "image_url", Media: &protocol.Media{URL: "https://x/y.png"}}}},
			}},
		{"custom call and output", `{"type":"custom_tool_call","id":"ctc_1","status":"completed","call_id":"call_p","name":"apply_patch","input":"*** Begin Patch\n*** End Patch\n"},` +
			`{"type":"custom_tool_call_output","call_id":"call_p","output":"Success."}`,
			[]protocol.Message{
				{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: "call_p", Type: "custom", Name: "apply_patch", Arguments: "*** Begin Patch\n*** End Patch\n"}}},
				{Role: "tool", ToolCallID: "call_p", Content: "Success."},
			}},
		{"model-side items join the run", reasoning + `,` + webSearch + `,` + fileSrch + `,{"role":"assistant","content":"Found it."},` + future,
			[]protocol.Message{{Role: "assistant", Content: "Found it.", Raw: raw(reasoning, webSearch, fileSrch, future)}}},
		{"computer call and screenshot", computer + `,{"type":"computer_call_output","call_id":"call_c","output":{"type":"computer_screenshot","image_url":"data:image/png;base64,aGVsbG8="}}`,
			[]protocol.Message{
				{Role: "assistant", Raw: raw(computer)},
				{Role: "tool", ToolCallID: "call_c", Parts: []protocol.Part{{Type: "image_url", Media: &protocol.Media{MediaType: "image/png", Data: "aGVsbG8="}}}},
			}},
		{"an item of another type with a role is a message of that role",
			`{"type":"additional_tools","id":"at_1","role":"developer","tools":[]},{"role":"user","content":"go"}`,
			[]protocol.Message{
				{Role: "developer", Raw: raw(`{"type":"additional_tools","id":"at_1","role":"developer","tools":[]}`)},
				{Role: "user", Content: "go"},
			}},
		{"a configuration_update is in no message", `{"role":"user","content":"go"},{"type":"configuration_update","reasoning":{"effort":"low"}}`,
			[]protocol.Message{{Role: "user", Content: "go"}}},
		{"state items split no run", reasoning + `,{"type":"configuration_update","id":"cu_1","reasoning":{"effort":"high"}},` +
			`{"role":"assistant","content":"Found it."},{"type":"compaction_trigger"}`,
			[]protocol.Message{{Role: "assistant", Content: "Found it.", Raw: raw(reasoning)}}},
		{"client-side items of other tools end the run", `{"type":"local_shell_call","id":"ls_1","call_id":"call_sh","action":{"type":"exec","command":["ls"]}},` +
			shellOut + `,` + approval,
			[]protocol.Message{
				{Role: "assistant", Raw: raw(`{"type":"local_shell_call","id":"ls_1","call_id":"call_sh","action":{"type":"exec","command":["ls"]}}`)},
				{Role: "tool", ToolCallID: "call_sh", Content: "total 0", Raw: raw(shellOut)},
				{Role: "tool", ToolCallID: "mcpr_1", Raw: raw(approval)},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse([]byte(`{"input":[`+tt.items+`]}`), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.Messages, tt.want) {
				got, _ := json.Marshal(r.Messages)
				want, _ := json.Marshal(tt.want)
				t.Fatalf("\n got %s\nwant %s\n%#v", got, want, r.Messages)
			}
			// The same items as a response's output are the one assistant answer.
			if tt.want[0].Role == "assistant" && len(tt.want) == 1 {
				_, msg, _, ok := DecodeResponse([]byte(`{"id":"resp_1","output":[` + tt.items + `]}`))
				if !ok || !reflect.DeepEqual(msg, tt.want[0]) {
					t.Fatalf("as output: %#v", msg)
				}
			}
		})
	}
}

// readCapture reads a request body a real client sent (protocol/testdata/harness).
func readCapture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../testdata/harness/" + name)
	if err != nil {
		t.Skipf("capture %s: %v", name, err)
	}
	return b
}

// customCallItem is the custom_tool_call that Codex sent back in its second call.
func customCallItem(t *testing.T, second []byte) string {
	t.Helper()
	for _, it := range gjson.GetBytes(second, "input").Array() {
		if it.Get("type").Str == "custom_tool_call" {
			return it.Raw
		}
	}
	t.Fatal("the capture has no custom_tool_call")
	return ""
}

// customCallStream is the SSE stream of an answer made of a reasoning item and the
// custom tool call; finalOutput is what response.completed carries as its output.
func customCallStream(callItem, finalOutput string) string {
	call := gjson.Parse(callItem)
	input := call.Get("input").Str
	added := fmt.Sprintf(`{"type":"custom_tool_call","id":%q,"status":"in_progress","call_id":%q,"name":%q,"input":""}`,
		call.Get("id").Str, call.Get("call_id").Str, call.Get("name").Str)
	var b strings.Builder
	ev := func(typ, data string) { fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", typ, data) }
	ev("response.created", `{"type":"response.created","response":{"id":"resp_p1","output":[]}}`)
	ev("response.output_item.added", `{"type":"response.output_item.added","output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[]}}`)
	ev("response.output_item.done", `{"type":"response.output_item.done","output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}}`)
	ev("response.output_item.added", `{"type":"response.output_item.added","output_index":1,"item":`+added+`}`)
	for i := 0; i < len(input); i += 9 {
		d, _ := json.Marshal(input[i:min(i+9, len(input))])
		ev("response.custom_tool_call_input.delta", `{"type":"response.custom_tool_call_input.delta","output_index":1,"item_id":"x","delta":`+string(d)+`}`)
	}
	in, _ := json.Marshal(input)
	ev("response.custom_tool_call_input.done", `{"type":"response.custom_tool_call_input.done","output_index":1,"item_id":"x","input":`+string(in)+`}`)
	ev("response.output_item.done", `{"type":"response.output_item.done","output_index":1,"item":`+callItem+`}`)
	ev("response.completed", `{"type":"response.completed","response":{"id":"resp_p1","status":"completed","output":`+finalOutput+`,"usage":{"input_tokens":9,"output_tokens":3}}}`)
	return b.String()
}

// TestCodexApplyPatchStitches: Codex CLI's apply_patch turn — the model answers a
// custom_tool_call, Codex sends it back with its custom_tool_call_output — continues
// the episode: the second call's history, up to the answer, hashes to the first
// call's tip. The answer is read whole, streamed, streamed without the final output,
// and cut short after the call's item was done.
func TestCodexApplyPatchStitches(t *testing.T) {
	first, second := readCapture(t, "codex/apply-patch-1.json"), readCapture(t, "codex/apply-patch-2.json")
	callItem := customCallItem(t, second)
	reasoning := `{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}`
	stream := customCallStream(callItem, "["+reasoning+","+callItem+"]")
	answers := map[string]func() protocol.Message{
		"json": func() protocol.Message {
			_, m, _, ok := DecodeResponse([]byte(`{"id":"resp_p1","output":[` + reasoning + `,` + callItem + `]}`))
			if !ok {
				t.Fatal("not decoded")
			}
			return m
		},
		"stream": func() protocol.Message { return decodeStream(t, stream, true) },
		"stream, empty final output": func() protocol.Message {
			return decodeStream(t, customCallStream(callItem, "[]"), true)
		},
		"stream cut after the call": func() protocol.Message {
			return decodeStream(t, stream[:strings.Index(stream, "event: response.completed")], false)
		},
		"stream cut mid-input": func() protocol.Message {
			return decodeStream(t, stream[:strings.Index(stream, "event: response.custom_tool_call_input.done")], false)
		},
	}
	r1, err := Parse(first, protocol.DefaultTaskRules())
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Parse(second, protocol.DefaultTaskRules())
	if err != nil {
		t.Fatal(err)
	}
	patch := gjson.Parse(callItem).Get("input").Str
	n := len(r1.Messages)
	if len(r2.Messages) != n+2 {
		t.Fatalf("second call: %d messages, want the first call's %d, the answer and the tool output", len(r2.Messages), n)
	}
	if out := r2.Messages[n+1]; out.Role != "tool" || out.ToolCallID != "call_patch_1" || !strings.Contains(out.Content, "Success.") {
		t.Errorf("the custom_tool_call_output: %+v", out)
	}
	chain1, chain2 := episode.Chain(r1.Messages), episode.Chain(r2.Messages)
	for name, decode := range answers {
		t.Run(name, func(t *testing.T) {
			ans := decode()
			if len(ans.ToolCalls) != 1 || ans.ToolCalls[0] != (protocol.ToolCall{ID: "call_patch_1", Type: "custom", Name: "apply_patch", Arguments: patch}) {
				t.Fatalf("answer %+v", ans)
			}
			if tip := episode.Extend(chain1[n-1], &ans); tip != chain2[n] {
				t.Fatalf("the second call does not continue the first: answer %+v, echo %+v", ans, r2.Messages[n])
			}
		})
	}
}

// decodeStream feeds a stream in small chunks and returns the answer.
func decodeStream(t *testing.T, s string, finished bool) protocol.Message {
	t.Helper()
	d := &StreamDecoder{}
	for i := 0; i < len(s); i += 17 {
		_, _ = d.Write([]byte(s[i:min(i+17, len(s))]))
	}
	if d.Finished() != finished {
		t.Fatalf("finished %v, want %v", d.Finished(), finished)
	}
	return d.Message()
}

// TestCodexConfigurationUpdateStitches: on its default model Codex puts a
// configuration_update item after each prompt and sends it again, in place, on every
// later call of the session (captures default-exec-1/-2 and default-resume). Such an
// item carries configuration, not conversation: it is in no message, so each call
// continues the previous one (its history up to the answer hashes to the previous
// call's tip) and the task is the prompt.
func TestCodexConfigurationUpdateStitches(t *testing.T) {
	bodies := [][]byte{readCapture(t, "codex/default-exec-1.json"), readCapture(t, "codex/default-exec-2.json"), readCapture(t, "codex/default-resume.json")}
	var reqs []*Request
	for i, b := range bodies {
		if !strings.Contains(string(b), `"type":"configuration_update"`) {
			t.Fatalf("capture %d holds no configuration_update", i)
		}
		r, err := Parse(b, protocol.DefaultTaskRules())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range r.Messages {
			for _, raw := range m.Raw {
				if gjson.Get(string(raw), "type").Str == "configuration_update" {
					t.Errorf("call %d: the configuration_update is in a %s message: %s", i, m.Role, raw)
				}
			}
		}
		reqs = append(reqs, r)
	}
	if reqs[0].Task != "Count the files with exec." || reqs[1].Task != reqs[0].Task {
		t.Errorf("tasks %q, %q; want the prompt", reqs[0].Task, reqs[1].Task)
	}
	// The model's answers, as the fake sent them: the exec call, then a text.
	call := gjson.Parse(customCallItem(t, bodies[1]))
	answers := []protocol.Message{
		{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: call.Get("call_id").Str, Type: "custom", Name: "exec", Arguments: call.Get("input").Str}}},
		{Role: "assistant", Content: "Added NOTES.md with the rate limits."},
	}
	for i, ans := range answers {
		prev, next := reqs[i].Messages, reqs[i+1].Messages
		n := len(prev)
		if len(next) <= n {
			t.Fatalf("call %d: %d messages, call %d had %d", i+1, len(next), i, n)
		}
		if tip, chain := episode.Extend(episode.Chain(prev)[n-1], &ans), episode.Chain(next); tip != chain[n] {
			t.Errorf("call %d does not continue call %d:\n answer %+v\n echo   %+v", i+1, i, ans, next[n])
		}
	}
	if n := len(reqs[0].Messages); len(reqs[1].Messages) != n+2 || reqs[1].Messages[n+1].Role != "tool" || reqs[1].Messages[n+1].ToolCallID != "call_exec_1" {
		t.Errorf("call 1 after call 0's %d messages: %+v; want the answer, then the exec output alone", n, reqs[1].Messages[n:])
	}
	if last := reqs[2].Messages[len(reqs[2].Messages)-1]; last.Role != "user" || last.Content != "Now explain what AGENTS.md asks of contributors." {
		t.Errorf("the resumed session ends with %+v, want the new prompt", last)
	}
}
