package openai

import (
	"errors"
	"reflect"
	"testing"

	"github.com/camproxy/camproxy/protocol"
)

func TestDecodeResponse(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		msg   protocol.Message
		usage protocol.Usage
	}{
		{
			name:  "content",
			body:  `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hello \u00e9","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"completion_tokens_details":{"reasoning_tokens":0}},"system_fingerprint":"fp"}`,
			msg:   protocol.Message{Role: "assistant", Content: "Hello é"},
			usage: protocol.Usage{InputTokens: 19, OutputTokens: 10},
		},
		{
			name: "tool calls, choices[0] only",
			body: `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_user_details","arguments":"{\"user_id\":\"mia\"}"}}]},"finish_reason":"tool_calls"},{"index":1,"message":{"role":"assistant","content":"other"}}],"usage":{"prompt_tokens":5,"completion_tokens":7}}`,
			msg: protocol.Message{Role: "assistant", ToolCalls: []protocol.ToolCall{
				{ID: "call_1", Type: "function", Name: "get_user_details", Arguments: `{"user_id":"mia"}`},
			}},
			usage: protocol.Usage{InputTokens: 5, OutputTokens: 7},
		},
		{
			name: "no role, no usage",
			body: `{"choices":[{"message":{"content":"x"}}]}`,
			msg:  protocol.Message{Role: "assistant", Content: "x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, usage, err := DecodeResponse([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(msg, tt.msg) || usage != tt.usage {
				t.Fatalf("DecodeResponse = %#v, %+v; want %#v, %+v", msg, usage, tt.msg, tt.usage)
			}
		})
	}
}

func TestDecodeResponseErrors(t *testing.T) {
	if _, _, err := DecodeResponse([]byte(`{"choices":[`)); !errors.Is(err, protocol.ErrInvalidJSON) {
		t.Errorf("truncated: %v", err)
	}
	for _, body := range []string{
		`{"error":{"message":"rate limited","type":"requests"}}`,
		`{"choices":[]}`,
		`{"choices":[{"message":null}]}`,
		`[1]`,
	} {
		if _, _, err := DecodeResponse([]byte(body)); err == nil {
			t.Errorf("%s: no error", body)
		}
	}
	_, u, err := DecodeResponse([]byte(`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0}}`))
	if err == nil || u.InputTokens != 3 {
		t.Errorf("usage without a message = %+v, %v", u, err)
	}
}
