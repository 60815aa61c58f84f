package openai

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
			name:   "string content",
			body:   `{"model":"gpt-4o","stream":true,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Book a flight"}]}`,
			rules:  firstUser,
			model:  "gpt-4o",
			stream: true,
			messages: []protocol.Message{
				{Role: "system", Content: "Be brief."},
				{Role: "user", Content: "Book a flight"},
			},
			task: "Book a flight",
		},
		{
			name:  "content parts: text joined, media kept as parts",
			body:  `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Look:"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"text","text":"what is it?"},{"type":"input_audio","input_audio":{"data":"x","format":"wav"}}]}]}`,
			rules: firstUser,
			model: "m",
			messages: []protocol.Message{
				{Role: "user", Content: "Look:\nwhat is it?", Parts: []protocol.Part{
					{Type: "text", Text: "Look:"},
					{Type: "image_url", Media: &protocol.Media{MediaType: "image/png", Data: "AAAA"}},
					{Type: "text", Text: "what is it?"},
					{Type: "input_audio", Media: &protocol.Media{Data: "x", Format: "wav", MediaType: "audio/wav"}},
				}},
			},
			task: "Look:\nwhat is it?",
		},
		{
			name:  "tool calls, tool message and null content",
			body:  `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_user","arguments":"{\"id\":\"u1\"}"}},{"id":"call_2","function":{"name":"noop","arguments":{"a":1}}}]},{"role":"tool","tool_call_id":"call_1","name":"get_user","content":"{\"name\":\"Mia\"}"}]}`,
			rules: firstUser,
			messages: []protocol.Message{
				{Role: "user", Content: "hi"},
				{Role: "assistant", ToolCalls: []protocol.ToolCall{
					{ID: "call_1", Type: "function", Name: "get_user", Arguments: `{"id":"u1"}`},
					{ID: "call_2", Type: "function", Name: "noop", Arguments: `{"a":1}`},
				}},
				{Role: "tool", Content: `{"name":"Mia"}`, ToolCallID: "call_1", Name: "get_user"},
			},
			task: "hi",
		},
		{
			name:  "legacy function_call and function message",
			body:  `{"messages":[{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}},{"role":"function","name":"f","content":"42"}]}`,
			rules: firstUser,
			messages: []protocol.Message{
				{Role: "assistant", ToolCalls: []protocol.ToolCall{{Type: "function", Name: "f", Arguments: "{}"}}},
				{Role: "function", Name: "f", Content: "42"},
			},
		},
		{
			name:  "nested unknown fields, odd key order, developer role, escapes",
			body:  " \n{\"x\":{\"y\":[1,{\"messages\":3}]},\"messages\" : [ {\"content\":\"r\\u00e9gle \\/ \\\"q\\\"\",\"extra\":{\"role\":\"user\"},\"role\":\"developer\"} , {\"meta\":[null,true],\"content\":[{\"text\":\"caf\\u00e9\",\"cache_control\":{\"type\":\"ephemeral\"},\"type\":\"text\"}],\"role\":\"user\"}],\"model\":\"gpt\",\"stream\":false,\"tools\":[]}\n",
			rules: firstUser,
			model: "gpt",
			messages: []protocol.Message{
				{Role: "developer", Content: `régle / "q"`},
				{Role: "user", Content: "café"},
			},
			task: "café",
		},
		{
			name:  "duplicate keys: the last one wins",
			body:  `{"model":"a","model":"b","messages":[{"role":"user","content":"old"}],"messages":[{"role":"system","role":"user","content":"new"}]}`,
			rules: firstUser,
			model: "b",
			messages: []protocol.Message{
				{Role: "user", Content: "new"},
			},
			task: "new",
		},
		{
			name:     "empty messages, no task",
			body:     `{"model":"m","messages":[]}`,
			rules:    firstUser,
			model:    "m",
			messages: nil,
		},
		{
			name:  "non-object message and odd content types",
			body:  `{"messages":["x",{"role":"user","content":7},{"role":"user","content":{"text":"no"}}]}`,
			rules: firstUser,
			messages: []protocol.Message{
				{},
				{Role: "user"},
				{Role: "user"},
			},
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
			name:  "no rules, no task",
			body:  `{"messages":[{"role":"user","content":"t"}]}`,
			rules: nil,
			messages: []protocol.Message{
				{Role: "user", Content: "t"},
			},
		},
		{
			name:  "regex in the system message wins over the first user message",
			body:  `{"messages":[{"role":"system","content":"Policy.\nTask: cancel order #12\n"},{"role":"user","content":"hello"}]}`,
			rules: []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}, {FirstUserMessage: true}},
			messages: []protocol.Message{
				{Role: "system", Content: "Policy.\nTask: cancel order #12\n"},
				{Role: "user", Content: "hello"},
			},
			task: "cancel order #12",
		},
		{
			name:  "regex in a content part",
			body:  `{"messages":[{"role":"user","content":[{"type":"text","text":"context"},{"type":"text","text":"Task: fly to SEA"}]}]}`,
			rules: []protocol.TaskRule{{Regex: regexp.MustCompile(`^Task: (.+)$`)}},
			messages: []protocol.Message{
				{Role: "user", Content: "context\nTask: fly to SEA"},
			},
			task: "fly to SEA",
		},
		{
			name:  "regex without a match falls through to the next rule",
			body:  `{"messages":[{"role":"user","content":"book"}]}`,
			rules: []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}, {FirstUserMessage: true}},
			messages: []protocol.Message{
				{Role: "user", Content: "book"},
			},
			task: "book",
		},
		{
			name:  "regex skips assistant and tool messages and empty captures",
			body:  `{"messages":[{"role":"assistant","content":"Task: a"},{"role":"tool","content":"Task: b"},{"role":"user","content":"Task: "},{"role":"user","content":"Task: c"}]}`,
			rules: []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.*)`)}},
			messages: []protocol.Message{
				{Role: "assistant", Content: "Task: a"},
				{Role: "tool", Content: "Task: b"},
				{Role: "user", Content: "Task: "},
				{Role: "user", Content: "Task: c"},
			},
			task: "c",
		},
		{
			name:  "regex without a group takes the whole match",
			body:  `{"messages":[{"role":"user","content":"go to #42 now"}]}`,
			rules: []protocol.TaskRule{{Regex: regexp.MustCompile(`#\d+`)}},
			messages: []protocol.Message{
				{Role: "user", Content: "go to #42 now"},
			},
			task: "#42",
		},
		{
			// An empty user message (or one only of envelopes) is passed over, as in
			// every adapter: the task is the first user text there is.
			name:  "first user message empty: the next one",
			body:  `{"messages":[{"role":"user","content":""},{"role":"user","content":"later"}]}`,
			rules: firstUser,
			task:  "later",
			messages: []protocol.Message{
				{Role: "user", Content: ""},
				{Role: "user", Content: "later"},
			},
		},
		{
			name:  "first user message with only an image: no task",
			body:  `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]}`,
			rules: firstUser,
			messages: []protocol.Message{
				{Role: "user", Parts: []protocol.Part{{Type: "image_url", Media: &protocol.Media{URL: "u"}}}},
			},
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
		})
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
		{"no messages", `{"model":"gpt-4o"}`, protocol.ErrMissingMessages},
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
	// Deep nesting under the limit is still valid JSON and must parse.
	body := `{"a":` + strings.Repeat("[", jsontext.MaxDepth-1) + strings.Repeat("]", jsontext.MaxDepth-1) + `,"s":"[[[[{{{\"\\","messages":[{"role":"user","content":"x"}]}`
	r, err := Parse([]byte(body), protocol.DefaultTaskRules())
	if err != nil || r.Task != "x" {
		t.Fatalf("Parse = %+v, %v", r, err)
	}
}

func TestParseDoesNotAliasBody(t *testing.T) {
	body := []byte(`{"model":"gpt","messages":[{"role":"user","content":"task"}]}`)
	r, err := Parse(body, protocol.DefaultTaskRules())
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'x'
	}
	if r.Model != "gpt" || r.Task != "task" || r.Messages[0].Content != "task" {
		t.Fatalf("view changed with the body: %+v", r)
	}
}
