package bedrock

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
)

// TestConverseBlockTypes: every Converse content block kind has a place in the
// chat-shaped messages and none is dropped.
func TestConverseBlockTypes(t *testing.T) {
	const (
		reasoning = `{"reasoningContent":{"reasoningText":{"text":"Think <first>.","signature":"c2ln"}}}`
		redacted  = `{"reasoningContent":{"redactedContent":"cmVk"}}`
		cache     = `{"cachePoint":{"type":"default"}}`
		guard     = `{"guardContent":{"text":{"text":"checked"}}}`
		future    = `{"hologram":{"beam":1}}`
	)
	tests := []struct {
		name string
		msgs string
		want []protocol.Message
	}{
		{"media", `{"role":"user","content":[{"text":"look"},` +
			`{"image":{"format":"jpg","source":{"bytes":"aGVsbG8="}}},` +
			`{"image":{"format":"png","source":{"s3Location":{"uri":"s3://b/k.png","bucketOwner":"1"}}}},` +
			`{"document":{"format":"pdf","name":"terms","source":{"bytes":"JVBERi0="}}},` +
			`{"document":{"format":"md","name":"notes","source":{"text":"# hi"}}},` +
			`{"video":{"format":"mp4","source":{"s3Location":{"uri":"s3://b/v.mp4"}}}},` +
			`{"document":{"format":"txt","name":"c","source":{"content":[{"text":"chunk"}]}}},` + cache + `]}`,
			[]protocol.Message{{Role: "user", Content: "look", Parts: []protocol.Part{
				{Type: "text", Text: "look"},
				{Type: "image_url", Media: &protocol.Media{MediaType: "image/jpeg", Data: "aGVsbG8="}},
				{Type: "image_url", Media: &protocol.Media{MediaType: "image/png", URL: "s3://b/k.png"}},
				{Type: "file", Media: &protocol.Media{MediaType: "application/pdf", Filename: "terms", Data: "JVBERi0="}},
				{Type: "file", Media: &protocol.Media{MediaType: "text/markdown", Filename: "notes", Data: "IyBoaQ=="}},
				{Type: "file", Media: &protocol.Media{MediaType: "video/mp4", URL: "s3://b/v.mp4"}},
				{Type: "document", Raw: `{"document":{"format":"txt","name":"c","source":{"content":[{"text":"chunk"}]}}}`},
			}, Raw: []protocol.RawJSON{cache}}}},
		{"reasoning and unknown blocks are raw", `{"role":"assistant","content":[` + reasoning + `,` + redacted + `,{"text":"Done."},` +
			guard + `,` + future + `,{"toolUse":{"toolUseId":"t1","name":"f","input":{}}}]}`,
			[]protocol.Message{{Role: "assistant", Content: "Done.", ToolCalls: []protocol.ToolCall{{ID: "t1", Type: "function", Name: "f", Arguments: "{}"}},
				Raw: []protocol.RawJSON{reasoning, redacted, guard, future}}}},
		{"tool result with an image", `{"role":"user","content":[{"toolResult":{"toolUseId":"t1","content":[{"json":{"ok":true}},` +
			`{"image":{"format":"png","source":{"bytes":"aGVsbG8="}}}],"status":"success"}}]}`,
			[]protocol.Message{{Role: "tool", ToolCallID: "t1", Content: `{"ok":true}`, Parts: []protocol.Part{
				{Type: "text", Text: `{"ok":true}`}, {Type: "image_url", Media: &protocol.Media{MediaType: "image/png", Data: "aGVsbG8="}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse(Converse, "m", []byte(`{"messages":[`+tt.msgs+`]}`), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Parsed().Messages; !reflect.DeepEqual(got, tt.want) {
				line, _ := json.Marshal(got)
				t.Fatalf("\n got %s\n%#v", line, got)
			}
		})
	}
}

// TestConverseReasoningStreamMatchesJSON: an answer with reasoning, streamed or
// not, is one message with the same raw block, and its echo in the next call
// continues the episode.
func TestConverseReasoningStreamMatchesJSON(t *testing.T) {
	var stream []byte
	for _, f := range [][2]string{
		{"messageStart", `{"role":"assistant"}`},
		{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"Think "}}}`},
		{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"<first>."}}}`},
		{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"reasoningContent":{"signature":"c2ln"}}}`},
		{"contentBlockStop", `{"contentBlockIndex":0}`},
		{"contentBlockDelta", `{"contentBlockIndex":1,"delta":{"reasoningContent":{"redactedContent":"cmVk"}}}`},
		{"contentBlockStop", `{"contentBlockIndex":1}`},
		{"contentBlockDelta", `{"contentBlockIndex":2,"delta":{"text":"Calling."}}`},
		{"contentBlockStart", `{"contentBlockIndex":3,"start":{"toolUse":{"toolUseId":"t1","name":"f"}}}`},
		{"contentBlockDelta", `{"contentBlockIndex":3,"delta":{"toolUse":{"input":"{\"a\": 1}"}}}`},
		{"contentBlockStop", `{"contentBlockIndex":3}`},
		{"messageStop", `{"stopReason":"tool_use"}`},
		{"metadata", `{"usage":{"inputTokens":5,"outputTokens":6}}`},
	} {
		stream = append(stream, event(t, f[0], f[1])...)
	}
	content := `[{"reasoningContent": {"reasoningText": {"text": "Think <first>.", "signature": "c2ln"}}},` +
		`{"reasoningContent": {"redactedContent": "cmVk"}}, {"text": "Calling."}, {"toolUse": {"toolUseId": "t1", "name": "f", "input": {"a": 1}}}]`
	msg, usage, ok := decodeConverseResponse([]byte(`{"output":{"message":{"role":"assistant","content":` + content + `}},"usage":{"inputTokens":5,"outputTokens":6}}`))
	if !ok {
		t.Fatal("not decoded")
	}
	want := protocol.Message{Role: "assistant", Content: "Calling.",
		ToolCalls: []protocol.ToolCall{{ID: "t1", Type: "function", Name: "f", Arguments: `{"a":1}`}},
		Raw: []protocol.RawJSON{`{"reasoningContent":{"reasoningText":{"text":"Think <first>.","signature":"c2ln"}}}`,
			`{"reasoningContent":{"redactedContent":"cmVk"}}`}}
	if !reflect.DeepEqual(msg, want) {
		t.Fatalf("JSON answer %#v", msg)
	}
	r, err := Parse(ConverseStream, "m", []byte(`{"messages":[{"role":"user","content":[{"text":"go"}]}]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	checkDecode(t, r.Decoder, stream, want, usage, true)

	// The agent sends the answer back (reasoning included) with the tool's result.
	next, err := Parse(Converse, "m", []byte(`{"messages":[{"role":"user","content":[{"text":"go"}]},{"role":"assistant","content":`+content+`},`+
		`{"role":"user","content":[{"toolResult":{"toolUseId":"t1","content":[{"text":"ok"}]}}]}]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := episode.Chain(r.Parsed().Messages), episode.Chain(next.Parsed().Messages)
	if episode.Extend(c1[0], &msg) != c2[1] {
		t.Fatalf("the echo does not continue the answer: %+v", next.Parsed().Messages[1])
	}
}
