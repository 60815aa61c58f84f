package registry_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/anthropic"
	"github.com/camproxy/camproxy/protocol/bedrock"
	"github.com/camproxy/camproxy/protocol/gemini"
	"github.com/camproxy/camproxy/protocol/jsontext"
	"github.com/camproxy/camproxy/protocol/openai"
	"github.com/camproxy/camproxy/protocol/registry"
	"github.com/camproxy/camproxy/protocol/responses"
)

// TestParseErrorsAgree: the same bad body gets the same error class from every
// adapter, and from Detect: not valid JSON is ErrInvalidJSON; JSON that is not an
// object, or an object without its API's conversation member, is
// ErrMissingMessages. The proxy answers both 400 with the error's text.
func TestParseErrorsAgree(t *testing.T) {
	rules := protocol.DefaultTaskRules()
	adapters := []struct {
		name  string
		field string // the member holding the conversation
		// optional: a body without field is a call (a Responses continuation
		// may send no input), so the rows about it expect no error.
		optional bool
		parse    func([]byte) error
	}{
		{name: "openai", field: "messages", parse: func(b []byte) error { _, err := openai.Parse(b, rules); return err }},
		{name: "anthropic", field: "messages", parse: func(b []byte) error { _, err := anthropic.Parse(b, rules); return err }},
		{name: "anthropic body", field: "messages", parse: func(b []byte) error { _, err := anthropic.ParseBody(b, rules, "m", false); return err }},
		{name: "responses", field: "input", optional: true, parse: func(b []byte) error { _, err := responses.Parse(b, rules); return err }},
		{name: "gemini", field: "contents", parse: func(b []byte) error { _, err := gemini.Parse(b, rules, "m", gemini.FrameJSON); return err }},
		{name: "bedrock converse", field: "messages", parse: func(b []byte) error { _, err := bedrock.Parse(bedrock.Converse, "m", b, rules); return err }},
		{name: "bedrock claude", field: "messages", parse: func(b []byte) error {
			_, err := bedrock.Parse(bedrock.Invoke, "anthropic.claude-3-5-sonnet", b, rules)
			return err
		}},
		{name: "bedrock nova", field: "messages", parse: func(b []byte) error { _, err := bedrock.Parse(bedrock.Invoke, "amazon.nova-pro", b, rules); return err }},
		{name: "bedrock llama", field: "prompt", parse: func(b []byte) error { _, err := bedrock.Parse(bedrock.Invoke, "meta.llama3-70b", b, rules); return err }},
		{name: "detect", field: "", optional: true, parse: func(b []byte) error { _, err := registry.Detect(b); return err }},
	}
	deep := strings.Repeat("[", jsontext.MaxDepth+1) + strings.Repeat("]", jsontext.MaxDepth+1)
	rows := []struct {
		name    string
		body    string // FIELD stands for the adapter's member
		want    error
		byField bool // a row about the member: none expected where it is optional
	}{
		{"empty", ``, protocol.ErrInvalidJSON, false},
		{"blank", " \n\t", protocol.ErrInvalidJSON, false},
		{"truncated", `{"FIELD":[`, protocol.ErrInvalidJSON, false},
		{"trailing garbage", `{"FIELD":[]} x`, protocol.ErrInvalidJSON, false},
		{"bad escape", `{"FIELD":"\x"}`, protocol.ErrInvalidJSON, false},
		{"not UTF-8", "{\"FIELD\":\"\xff\"}", protocol.ErrInvalidJSON, false},
		{"too deep", `{"a":` + deep + `,"FIELD":[]}`, protocol.ErrInvalidJSON, false},
		{"top-level array", `[{"role":"user","content":"x"}]`, protocol.ErrMissingMessages, false},
		{"top-level string", `"FIELD"`, protocol.ErrMissingMessages, false},
		{"top-level number", `1`, protocol.ErrMissingMessages, false},
		{"top-level null", ` null `, protocol.ErrMissingMessages, false},
		{"empty object", `{}`, protocol.ErrMissingMessages, true},
		{"member only nested", `{"x":{"FIELD":[]}}`, protocol.ErrMissingMessages, true},
		{"member null", `{"FIELD":null}`, protocol.ErrMissingMessages, true},
		{"member an object", `{"FIELD":{"role":"user"}}`, protocol.ErrMissingMessages, true},
		{"member a number", `{"FIELD":1}`, protocol.ErrMissingMessages, true},
	}
	for _, row := range rows {
		for _, a := range adapters {
			field := a.field
			if field == "" {
				field = "messages"
			}
			err := a.parse([]byte(strings.ReplaceAll(row.body, "FIELD", field)))
			want := row.want
			if row.byField && a.optional {
				want = nil
			}
			if !errors.Is(err, want) {
				t.Errorf("%s, %s: err %v; want %v", row.name, a.name, err, want)
			}
		}
	}
}
