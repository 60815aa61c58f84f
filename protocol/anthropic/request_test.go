package anthropic

import (
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

func TestParse(t *testing.T) {
	firstUser := protocol.DefaultTaskRules()
	taskRule := []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}, {FirstUserMessage: true}}
	tests := []struct {
		name     string
		body     string
		rules    []protocol.TaskRule
		model    string
		stream   bool
		messages []protocol.Message
		task     string
	}{
		{
			name:   "string system and contents",
			body:   `{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,"system":"Be brief.","messages":[{"role":"user","content":"Book a flight"},{"role":"assistant","content":"Where to?"}]}`,
			rules:  firstUser,
			model:  "claude-sonnet-4-5",
			stream: true,
			messages: []protocol.Message{
				{Role: "system", Content: "Be brief."},
				{Role: "user", Content: "Book a flight"},
				{Role: "assistant", Content: "Where to?"},
			},
			task: "Book a flight",
		},
		{
			name:  "system blocks joined, images and documents as parts, thinking raw",
			body:  `{"model":"m","system":[{"type":"text","text":"Policy A."},{"type":"text","text":"Policy B.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}},{"type":"text","text":"Look:"},{"type":"document","source":{"type":"text","media_type":"text/plain","data":"doc"}},{"type":"text","text":"what is it?"}]},{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"sig"},{"type":"redacted_thinking","data":"x"},{"type":"text","text":"A cat."}]}]}`,
			rules: firstUser,
			model: "m",
			messages: []protocol.Message{
				{Role: "system", Content: "Policy A.\nPolicy B."},
				{Role: "user", Content: "Look:\nwhat is it?", Parts: []protocol.Part{
					{Type: "image_url", Media: &protocol.Media{MediaType: "image/png", Data: "AAAA"}},
					{Type: "text", Text: "Look:"},
					{Type: "file", Media: &protocol.Media{MediaType: "text/plain", Data: "ZG9j"}}, // "doc"
					{Type: "text", Text: "what is it?"},
				}},
				{Role: "assistant", Content: "A cat.", Raw: []protocol.RawJSON{
					`{"type":"thinking","thinking":"hmm","signature":"sig"}`, `{"type":"redacted_thinking","data":"x"}`}},
			},
			task: "Look:\nwhat is it?",
		},
		{
			name: "tool_use, tool_result with string, blocks and error, text after them",
			body: `{"messages":[{"role":"user","content":"hi"},` +
				`{"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"get_user","input":{ "id" : "u1", "n": [1, 2] }},{"type":"tool_use","id":"toolu_2","name":"noop","input":{}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"{\"name\":\"Mia\"}"},{"type":"text","text":"and also"},{"type":"tool_result","tool_use_id":"toolu_2","is_error":true,"content":[{"type":"text","text":"boom"},{"type":"image","source":{}},{"type":"text","text":"again"}]},{"type":"text","text":"thanks"}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_3"}]}]}`,
			rules: firstUser,
			messages: []protocol.Message{
				{Role: "user", Content: "hi"},
				{Role: "assistant", Content: "Checking.", ToolCalls: []protocol.ToolCall{
					{ID: "toolu_1", Type: "function", Name: "get_user", Arguments: `{"id":"u1","n":[1,2]}`},
					{ID: "toolu_2", Type: "function", Name: "noop", Arguments: `{}`},
				}},
				{Role: "tool", Content: `{"name":"Mia"}`, ToolCallID: "toolu_1"},
				{Role: "tool", Content: "boom\nagain", ToolCallID: "toolu_2", Parts: []protocol.Part{
					{Type: "text", Text: "boom"}, {Type: "image", Raw: `{"type":"image","source":{}}`}, {Type: "text", Text: "again"}}},
				{Role: "user", Content: "and also\nthanks"},
				{Role: "tool", ToolCallID: "toolu_3"},
			},
			task: "hi",
		},
		{
			name:  "first user message with text: tool results and images skipped",
			body:  `{"messages":[{"role":"user","content":[{"type":"image","source":{}}]},{"role":"user","content":""},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"Task: not here"},{"type":"text","text":"real task"}]}]}`,
			rules: firstUser,
			messages: []protocol.Message{
				{Role: "user", Parts: []protocol.Part{{Type: "image", Raw: `{"type":"image","source":{}}`}}},
				{Role: "user"},
				{Role: "tool", Content: "Task: not here", ToolCallID: "t"},
				{Role: "user", Content: "real task"},
			},
			task: "real task",
		},
		{
			name:  "regex in the system prompt wins over the first user message",
			body:  `{"system":"Policy.\nTask: cancel order #12\n","messages":[{"role":"user","content":"hello"}]}`,
			rules: taskRule,
			messages: []protocol.Message{
				{Role: "system", Content: "Policy.\nTask: cancel order #12\n"},
				{Role: "user", Content: "hello"},
			},
			task: "cancel order #12",
		},
		{
			name:  "regex skips assistant texts and tool results",
			body:  `{"messages":[{"role":"assistant","content":"Task: a"},{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"Task: b"}]},{"role":"user","content":[{"type":"text","text":"Task: c"}]}]}`,
			rules: []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}},
			messages: []protocol.Message{
				{Role: "assistant", Content: "Task: a"},
				{Role: "tool", Content: "Task: b", ToolCallID: "x"},
				{Role: "user", Content: "Task: c"},
			},
			task: "c",
		},
		{
			name:  "escapes decoded, unknown fields at every level, odd key order",
			body:  " \n{\"x\":{\"messages\":3},\"messages\" : [ {\"content\":[{\"text\":\"caf\\u00e9 \\/ \\\"q\\\"\",\"cache_control\":{\"type\":\"ephemeral\"},\"type\":\"text\"}],\"meta\":[null],\"role\":\"user\"}],\"model\":\"c\",\"stream\":false,\"tools\":[]}\n",
			rules: firstUser,
			model: "c",
			messages: []protocol.Message{
				{Role: "user", Content: `café / "q"`},
			},
			task: `café / "q"`,
		},
		{
			name:  "duplicate keys: the last one wins",
			body:  `{"model":"a","model":"b","system":"s1","system":"s2","messages":[{"role":"user","content":"old"}],"messages":[{"role":"assistant","role":"user","content":"new"}]}`,
			rules: firstUser,
			model: "b",
			messages: []protocol.Message{
				{Role: "system", Content: "s2"},
				{Role: "user", Content: "new"},
			},
			task: "new",
		},
		{
			name:  "null system, non-object message, odd content and block types",
			body:  `{"system":null,"messages":["x",{"role":"user","content":7},{"role":"user","content":{"text":"no","b":{"type":"text","text":"not a block"}}},{"role":"user","content":[7,{"type":"text","text":3},{"text":"untyped"}]}]}`,
			rules: firstUser,
			messages: []protocol.Message{
				{},
				{Role: "user"},
				{Role: "user"},
				{Role: "user", Raw: []protocol.RawJSON{`{"type":"text","text":3}`, `{"text":"untyped"}`}},
			},
		},
		{
			name:     "empty messages and system array",
			body:     `{"system":[],"messages":[]}`,
			rules:    firstUser,
			messages: []protocol.Message{{Role: "system"}},
		},
		{
			name:  "stream not a bool, model not a string",
			body:  `{"model":4,"stream":"true","messages":[{"role":"user","content":"t"}]}`,
			rules: firstUser,
			messages: []protocol.Message{
				{Role: "user", Content: "t"},
			},
			task: "t",
		},
		{
			name:     "no rules, no task",
			body:     `{"messages":[{"role":"user","content":"t"}]}`,
			messages: []protocol.Message{{Role: "user", Content: "t"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse([]byte(tt.body), tt.rules)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if r.Model != tt.model || r.Stream != tt.stream || r.Task != tt.task {
				t.Errorf("model, stream, task = %q, %v, %q; want %q, %v, %q", r.Model, r.Stream, r.Task, tt.model, tt.stream, tt.task)
			}
			if !reflect.DeepEqual(r.Messages, tt.messages) {
				t.Errorf("messages:\n got %#v\nwant %#v", r.Messages, tt.messages)
			}
			if r.Parsed() != &r.View {
				t.Error("Parsed is not the embedded view")
			}
		})
	}
}

func TestParseBody(t *testing.T) {
	body := []byte(`{"anthropic_version":"bedrock-2023-05-31","max_tokens":512,"model":"ignored","stream":false,"messages":[{"role":"user","content":"go"}]}`)
	r, err := ParseBody(body, protocol.DefaultTaskRules(), "anthropic.claude-3-5-sonnet-20240620-v1:0", true)
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "anthropic.claude-3-5-sonnet-20240620-v1:0" || !r.Stream || r.Task != "go" {
		t.Fatalf("view = %+v", r.View)
	}
	if _, ok := r.Decoder().(*StreamDecoder); !ok {
		t.Fatalf("Decoder = %T; want *StreamDecoder", r.Decoder())
	}
	r, err = ParseBody(body, nil, "m", false)
	if err != nil || r.Stream || r.Model != "m" {
		t.Fatalf("ParseBody = %+v, %v", r, err)
	}
	if _, ok := r.Decoder().(*JSONDecoder); !ok {
		t.Fatalf("Decoder = %T; want *JSONDecoder", r.Decoder())
	}
	if _, err := ParseBody([]byte(`{"anthropic_version":"v"}`), nil, "m", false); !errors.Is(err, protocol.ErrMissingMessages) {
		t.Fatalf("ParseBody without messages: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		body string
		want error
	}{
		{"empty", ``, protocol.ErrInvalidJSON},
		{"truncated", `{"messages":[`, protocol.ErrInvalidJSON},
		{"trailing garbage", `{"messages":[]} x`, protocol.ErrInvalidJSON},
		{"control character in a string", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\tb\"}]}", protocol.ErrInvalidJSON},
		{"bad escape", `{"messages":[{"role":"user","content":"\x"}]}`, protocol.ErrInvalidJSON},
		{"too deep", `{"a":` + strings.Repeat("[", jsontext.MaxDepth+1) + strings.Repeat("]", jsontext.MaxDepth+1) + `,"messages":[]}`, protocol.ErrInvalidJSON},
		{"top-level array", `[{"role":"user","content":"x"}]`, protocol.ErrMissingMessages},
		{"top-level string", `"messages"`, protocol.ErrMissingMessages},
		{"no messages", `{"model":"claude","system":"s"}`, protocol.ErrMissingMessages},
		{"messages null", `{"messages":null}`, protocol.ErrMissingMessages},
		{"messages an object", `{"messages":{"role":"user"}}`, protocol.ErrMissingMessages},
		{"messages only nested", `{"x":{"messages":[]}}`, protocol.ErrMissingMessages},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse([]byte(tt.body), protocol.DefaultTaskRules())
			if !errors.Is(err, tt.want) || r != nil {
				t.Fatalf("Parse = %v, %v; want %v", r, err, tt.want)
			}
		})
	}
}

func TestParseDeepButAllowed(t *testing.T) {
	n := jsontext.MaxDepth - 1
	body := `{"a":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `,"s":"[[[[{{{\"\\","messages":[{"role":"user","content":"x"}]}`
	r, err := Parse([]byte(body), protocol.DefaultTaskRules())
	if err != nil || r.Task != "x" {
		t.Fatalf("Parse = %+v, %v", r, err)
	}
}

func TestParseDoesNotAliasBody(t *testing.T) {
	body := []byte(`{"model":"claude","system":"sys","messages":[{"role":"user","content":[{"type":"text","text":"task"}]}]}`)
	r, err := Parse(body, protocol.DefaultTaskRules())
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'x'
	}
	if r.Model != "claude" || r.Task != "task" || r.Messages[0].Content != "sys" || r.Messages[1].Content != "task" {
		t.Fatalf("view changed with the body: %+v", r.View)
	}
}
