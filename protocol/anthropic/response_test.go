package anthropic

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
)

// realisticResponse is a non-streamed answer with thinking, two text blocks and two
// tool calls, one with an indented input, and prompt-cache usage.
const realisticResponse = `{
  "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5-20250929",
  "content": [
    {"type": "thinking", "thinking": "The user wants", "signature": "EqQB"},
    {"type": "text", "text": "Let me check \"that\" — é."},
    {"type": "tool_use", "id": "toolu_a", "name": "get_user_details", "input": {"user_id": "mia_li_3668"}},
    {"type": "text", "text": "And flights."},
    {"type": "tool_use", "id": "toolu_b", "name": "search_direct_flight", "input": {
      "origin": "JFK",
      "destination": "SEA"
    }}
  ],
  "stop_reason": "tool_use",
  "stop_sequence": null,
  "usage": {"input_tokens": 34, "cache_creation_input_tokens": 1000, "cache_read_input_tokens": 200, "output_tokens": 56, "service_tier": "standard"}
}
`

var realisticMessage = protocol.Message{
	Role:    "assistant",
	Content: "Let me check \"that\" — é.\nAnd flights.",
	ToolCalls: []protocol.ToolCall{
		{ID: "toolu_a", Type: "function", Name: "get_user_details", Arguments: `{"user_id":"mia_li_3668"}`},
		{ID: "toolu_b", Type: "function", Name: "search_direct_flight", Arguments: `{"origin":"JFK","destination":"SEA"}`},
	},
	Raw: []protocol.RawJSON{`{"type":"thinking","thinking":"The user wants","signature":"EqQB"}`},
}

var realisticUsage = protocol.Usage{InputTokens: 1234, OutputTokens: 56}

func TestDecodeResponse(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		msg   protocol.Message
		usage protocol.Usage
		err   bool
	}{
		{name: "realistic", body: realisticResponse, msg: realisticMessage, usage: realisticUsage},
		{
			name:  "text only, no role, no cache fields",
			body:  `{"type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":3,"output_tokens":1}}`,
			msg:   protocol.Message{Role: "assistant", Content: "hi"},
			usage: protocol.Usage{InputTokens: 3, OutputTokens: 1},
		},
		{
			name:  "empty content",
			body:  `{"type":"message","role":"assistant","content":[],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":0}}`,
			msg:   protocol.Message{Role: "assistant"},
			usage: protocol.Usage{InputTokens: 3},
		},
		{
			name: "odd blocks kept raw, odd usage values ignored",
			body: `{"content":[7,{"type":"text","text":null},{"type":"server_tool_use","id":"s","name":"web_search","input":{}},{"type":"tool_use","id":"t","name":"f"}],"usage":{"input_tokens":"x","output_tokens":2}}`,
			msg: protocol.Message{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: "t", Type: "function", Name: "f"}},
				Raw: []protocol.RawJSON{`{"type":"text","text":null}`, `{"type":"server_tool_use","id":"s","name":"web_search","input":{}}`}},
			usage: protocol.Usage{OutputTokens: 2},
		},
		{name: "error body", body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, err: true},
		{name: "no content", body: `{"type":"message","usage":{"input_tokens":3,"output_tokens":1}}`, usage: protocol.Usage{InputTokens: 3, OutputTokens: 1}, err: true},
		{name: "not an object", body: `[1]`, err: true},
		{name: "invalid", body: `{"content":[`, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, usage, err := DecodeResponse([]byte(tt.body))
			if (err != nil) != tt.err {
				t.Fatalf("err = %v; want error %v", err, tt.err)
			}
			if !reflect.DeepEqual(msg, tt.msg) || usage != tt.usage {
				t.Fatalf("DecodeResponse =\n %#v %+v\nwant\n %#v %+v", msg, usage, tt.msg, tt.usage)
			}
		})
	}
	_, _, err := DecodeResponse([]byte("{"))
	if !errors.Is(err, protocol.ErrInvalidJSON) {
		t.Fatalf("invalid JSON: %v", err)
	}
	_, _, err = DecodeResponse([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	if err == nil || !strings.Contains(err.Error(), "overloaded_error: Overloaded") {
		t.Fatalf("error body: %v", err)
	}
}

func TestJSONDecoder(t *testing.T) {
	body := []byte(realisticResponse)
	for _, size := range []int{1, 7, 100, len(body)} {
		var d JSONDecoder
		whole := len(strings.TrimRight(realisticResponse, "\n"))
		for i := 0; i < len(body); i += size {
			if d.Finished() != (i >= whole) {
				t.Fatalf("size %d: finished after %d bytes", size, i)
			}
			if n, err := d.Write(body[i:min(i+size, len(body))]); err != nil || n != min(size, len(body)-i) {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		if !d.Finished() || !reflect.DeepEqual(d.Message(), realisticMessage) || d.Usage() != realisticUsage {
			t.Fatalf("size %d: %v %#v %+v", size, d.Finished(), d.Message(), d.Usage())
		}
		// More bytes after the answer change nothing.
		_, _ = d.Write([]byte("garbage"))
		if !d.Finished() || !reflect.DeepEqual(d.Message(), realisticMessage) {
			t.Fatal("bytes after the answer changed it")
		}
	}
}

func TestJSONDecoderUnfinished(t *testing.T) {
	for _, body := range []string{``, `{"content":[`, `{"type":"error","error":{"type":"x","message":"y"}}`, `{}`} {
		var d JSONDecoder
		_, _ = d.Write([]byte(body))
		if d.Finished() || !reflect.DeepEqual(d.Message(), protocol.Message{Role: "assistant"}) || d.Usage() != (protocol.Usage{}) {
			t.Errorf("%s: %v %#v %+v", body, d.Finished(), d.Message(), d.Usage())
		}
	}
	// Past maxBody the decoder gives up and frees its buffer.
	var d JSONDecoder
	_, _ = d.Write([]byte(`{"content":[],"x":"`))
	_, _ = d.Write(make([]byte, maxBody))
	_, _ = d.Write([]byte(`"}`))
	if d.Finished() || d.buf != nil {
		t.Fatalf("over maxBody: finished %v, buffer %d", d.Finished(), len(d.buf))
	}
}
