package openai

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
)

// TestChatItems: content parts, refusals, reasoning beside the content and custom
// (freeform) tool calls are kept in the chat shape, and none is dropped.
func TestChatItems(t *testing.T) {
	tests := []struct {
		name string
		msgs string
		want []protocol.Message
	}{
		{"parts", `{"role":"user","content":[{"type":"text","text":"see"},` +
			`{"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"high"}},` +
			`{"type":"image_url","image_url":{"url":"data:image/webp;base64,aGVsbG8="}},` +
			`{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,JVBERi0="}},` +
			`{"type":"file","file":{"file_id":"file-1"}},{"type":"video_url","video_url":{"url":"v"}}]}`,
			[]protocol.Message{{Role: "user", Content: "see", Parts: []protocol.Part{
				{Type: "text", Text: "see"},
				{Type: "image_url", Media: &protocol.Media{URL: "https://example.com/a.png", Detail: "high"}},
				{Type: "image_url", Media: &protocol.Media{MediaType: "image/webp", Data: "aGVsbG8="}},
				{Type: "file", Media: &protocol.Media{Filename: "a.pdf", MediaType: "application/pdf", Data: "JVBERi0="}},
				{Type: "file", Media: &protocol.Media{FileID: "file-1"}},
				{Type: "video_url", Raw: `{"type":"video_url","video_url":{"url":"v"}}`},
			}}}},
		{"refusal and reasoning", `{"role":"assistant","content":"Partly.","refusal":"Not that part.","reasoning_content":"The user <asks>."}`,
			[]protocol.Message{{Role: "assistant", Content: "Partly.",
				Parts: []protocol.Part{{Type: "text", Text: "Partly."}, {Type: "refusal", Text: "Not that part."}},
				Raw:   []protocol.RawJSON{`{"reasoning_content":"The user <asks>."}`}}}},
		{"custom tool call", `{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"custom","custom":{"name":"apply_patch","input":"*** Begin Patch\n"}},` +
			`{"id":"call_2","type":"function","function":{"name":"f","arguments":"{}"}}]}`,
			[]protocol.Message{{Role: "assistant", ToolCalls: []protocol.ToolCall{
				{ID: "call_1", Type: "custom", Name: "apply_patch", Arguments: "*** Begin Patch\n"},
				{ID: "call_2", Type: "function", Name: "f", Arguments: "{}"}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse([]byte(`{"messages":[`+tt.msgs+`]}`), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.Messages, tt.want) {
				line, _ := json.Marshal(r.Messages)
				t.Fatalf("\n got %s\n%#v", line, r.Messages)
			}
			if tt.want[0].Role == "assistant" {
				m, _, err := DecodeResponse([]byte(`{"choices":[{"message":` + tt.msgs + `}]}`))
				if err != nil || !reflect.DeepEqual(m, tt.want[0]) {
					t.Fatalf("as an answer: %#v %v", m, err)
				}
			}
		})
	}
}

// TestStreamCustomCallMatchesJSON: a streamed answer with a custom tool call, a
// refusal and reasoning deltas is the message of the same answer whole, and the
// agent's echo of it continues the episode.
func TestStreamCustomCallMatchesJSON(t *testing.T) {
	chunk := func(delta string) string {
		return `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}` + "\n\n"
	}
	stream := chunk(`{"role":"assistant","content":""}`) +
		chunk(`{"reasoning_content":"Patch "}`) + chunk(`{"reasoning_content":"it."}`) +
		chunk(`{"content":"Here."}`) +
		chunk(`{"tool_calls":[{"index":0,"id":"call_p","type":"custom","custom":{"name":"apply_patch","input":""}}]}`) +
		chunk(`{"tool_calls":[{"index":0,"custom":{"input":"*** Begin Patch\n"}}]}`) +
		chunk(`{"tool_calls":[{"index":0,"custom":{"input":"*** End Patch\n"}}]}`) +
		chunk(`{"refusal":"Not the rest."}`) +
		`data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n"
	var d StreamDecoder
	for i := 0; i < len(stream); i += 11 {
		_, _ = d.Write([]byte(stream[i:min(i+11, len(stream))]))
	}
	msg := `{"role":"assistant","content":"Here.","refusal":"Not the rest.","reasoning_content":"Patch it.",` +
		`"tool_calls":[{"id":"call_p","type":"custom","custom":{"name":"apply_patch","input":"*** Begin Patch\n*** End Patch\n"}}]}`
	want, _, err := DecodeResponse([]byte(`{"choices":[{"message":` + msg + `}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !d.Finished() || !reflect.DeepEqual(d.Message(), want) {
		t.Fatalf("stream\n got %#v\nwant %#v", d.Message(), want)
	}
	if c := want.ToolCalls; len(c) != 1 || c[0].Type != "custom" || !strings.Contains(c[0].Arguments, "End Patch") {
		t.Fatalf("custom call %+v", c)
	}
	r1, _ := Parse([]byte(`{"messages":[{"role":"user","content":"patch it"}]}`), nil)
	r2, _ := Parse([]byte(`{"messages":[{"role":"user","content":"patch it"},`+msg+`,{"role":"tool","tool_call_id":"call_p","content":"Done"}]}`), nil)
	c1, c2 := episode.Chain(r1.Messages), episode.Chain(r2.Messages)
	answer := d.Message()
	if episode.Extend(c1[0], &answer) != c2[1] {
		t.Fatal("the echo of a custom call does not continue the episode")
	}
}
