package anthropic

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/internal/splicetest"
)

// Bodies for the golden tests. Each has unknown fields, odd whitespace and key
// order, and escapes the splice must leave as they are.
const (
	// bodyString: a string system prompt; the task is the first user message, a
	// string with escapes.
	bodyString = ` { "x-top" : {"a":[1,2]}, "system" : "You are an agent." , "messages" :[
  { "role" : "user" , "content" : "Fly to Montr\u00e9al \/ Qu\u00e9bec" , "extra": [ {"role":"system"} ] },
  {"role":"assistant","content":[{"type":"text","text":"Sure."}],"x":1}
] , "model":"claude-sonnet-4-5", "max_tokens":1024}
`
	// bodyBlocks: a system array whose last block is cached; the task sits
	// mid-string in the second text block of a user message, after escapes of every kind.
	bodyBlocks = `{"model":"m","system":[{"type":"text","text":"Rules."},{"type":"text","text":"More.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}},{"type":"text","text":"Policy \/ r\u00e8gles"},{"type":"text","text":"Task: r\u00e9server \"A\/B\" \ud83d\ude00 now\nEnd.","cache_control":{"type":"ephemeral"}}],"x":{}}],"n":1}`
	// bodyNoSystem: no system prompt; the user message holds a tool result and text.
	bodyNoSystem = "\n\t{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"ok\"},{\"type\":\"text\",\"text\":\"go on\"},{\"type\":\"text\",\"text\":\"please\"}]}],\"max_tokens\":5}"
	// bodyNullSystem: a null system prompt.
	bodyNullSystem = `{"system":null,"messages":[{"role":"user","content":"go"}] }`
	// bodyEmptySystem: an empty system string.
	bodyEmptySystem = `{"system":"","messages":[{"role":"user","content":"go"}]}`
	// bodyEmptyBlocks: an empty system array and no messages.
	bodyEmptyBlocks = `{"system":[ ],"messages":[ ]}`
	// bodySystemTask: the task is in the system prompt.
	bodySystemTask = `{"system":"Task: pay\n","messages":[{"role":"user","content":"hi"}]}`
)

// spliceText is a rendered template: leading blank lines, quotes, a non-ASCII
// letter and characters that HTML escaping would touch.
const spliceText = "\n\nHint: use \"YUL\" é/</> & go"

// spliceEscaped is spliceText as it must appear in the body.
const spliceEscaped = `\n\nHint: use \"YUL\" é/</> & go`

// spliceTrimmed is spliceText escaped without its leading whitespace.
const spliceTrimmed = `Hint: use \"YUL\" é/</> & go`

func TestSpliceGolden(t *testing.T) {
	regexRule := []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+?) now`)}}
	taskRule := []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}}
	firstUser := protocol.DefaultTaskRules()
	tests := []struct {
		name  string
		body  string
		rules []protocol.TaskRule
		p     protocol.Placement
		want  string
	}{
		{
			name: "string task, append", body: bodyString, rules: firstUser, p: protocol.AppendToTask,
			want: ` { "x-top" : {"a":[1,2]}, "system" : "You are an agent." , "messages" :[
  { "role" : "user" , "content" : "Fly to Montr\u00e9al \/ Qu\u00e9bec` + spliceEscaped + `" , "extra": [ {"role":"system"} ] },
  {"role":"assistant","content":[{"type":"text","text":"Sure."}],"x":1}
] , "model":"claude-sonnet-4-5", "max_tokens":1024}
`,
		},
		{
			name: "string system, system", body: bodyString, rules: firstUser, p: protocol.System,
			want: ` { "x-top" : {"a":[1,2]}, "system" : "You are an agent.` + spliceEscaped + `" , "messages" :[
  { "role" : "user" , "content" : "Fly to Montr\u00e9al \/ Qu\u00e9bec" , "extra": [ {"role":"system"} ] },
  {"role":"assistant","content":[{"type":"text","text":"Sure."}],"x":1}
] , "model":"claude-sonnet-4-5", "max_tokens":1024}
`,
		},
		{
			name: "string task, new message", body: bodyString, rules: firstUser, p: protocol.NewMessage,
			want: ` { "x-top" : {"a":[1,2]}, "system" : "You are an agent." , "messages" :[
  { "role" : "user" , "content" : "Fly to Montr\u00e9al \/ Qu\u00e9bec" , "extra": [ {"role":"system"} ] },{"role":"user","content":"` + spliceTrimmed + `"},
  {"role":"assistant","content":[{"type":"text","text":"Sure."}],"x":1}
] , "model":"claude-sonnet-4-5", "max_tokens":1024}
`,
		},
		{
			name: "regex ending mid-block after escapes, append", body: bodyBlocks, rules: regexRule, p: protocol.AppendToTask,
			want: `{"model":"m","system":[{"type":"text","text":"Rules."},{"type":"text","text":"More.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}},{"type":"text","text":"Policy \/ r\u00e8gles"},{"type":"text","text":"Task: r\u00e9server \"A\/B\" \ud83d\ude00` + spliceEscaped + ` now\nEnd.","cache_control":{"type":"ephemeral"}}],"x":{}}],"n":1}`,
		},
		{
			name: "system blocks: a new block after the cached one", body: bodyBlocks, rules: regexRule, p: protocol.System,
			want: `{"model":"m","system":[{"type":"text","text":"Rules."},{"type":"text","text":"More.","cache_control":{"type":"ephemeral"}},{"type":"text","text":"` + spliceTrimmed + `"}],"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}},{"type":"text","text":"Policy \/ r\u00e8gles"},{"type":"text","text":"Task: r\u00e9server \"A\/B\" \ud83d\ude00 now\nEnd.","cache_control":{"type":"ephemeral"}}],"x":{}}],"n":1}`,
		},
		{
			name: "blocks, new message", body: bodyBlocks, rules: regexRule, p: protocol.NewMessage,
			want: `{"model":"m","system":[{"type":"text","text":"Rules."},{"type":"text","text":"More.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}},{"type":"text","text":"Policy \/ r\u00e8gles"},{"type":"text","text":"Task: r\u00e9server \"A\/B\" \ud83d\ude00 now\nEnd.","cache_control":{"type":"ephemeral"}}],"x":{}},{"role":"user","content":"` + spliceTrimmed + `"}],"n":1}`,
		},
		{
			name: "first user message of blocks: after the last text block", body: bodyBlocks, rules: firstUser, p: protocol.AppendToTask,
			want: `{"model":"m","system":[{"type":"text","text":"Rules."},{"type":"text","text":"More.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}},{"type":"text","text":"Policy \/ r\u00e8gles"},{"type":"text","text":"Task: r\u00e9server \"A\/B\" \ud83d\ude00 now\nEnd.` + spliceEscaped + `","cache_control":{"type":"ephemeral"}}],"x":{}}],"n":1}`,
		},
		{
			name: "no system: a member after the opening brace", body: bodyNoSystem, rules: firstUser, p: protocol.System,
			want: "\n\t{\"system\":\"" + spliceTrimmed + "\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"ok\"},{\"type\":\"text\",\"text\":\"go on\"},{\"type\":\"text\",\"text\":\"please\"}]}],\"max_tokens\":5}",
		},
		{
			name: "tool result and texts: append after the last text", body: bodyNoSystem, rules: firstUser, p: protocol.AppendToTask,
			want: "\n\t{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"ok\"},{\"type\":\"text\",\"text\":\"go on\"},{\"type\":\"text\",\"text\":\"please" + spliceEscaped + "\"}]}],\"max_tokens\":5}",
		},
		{
			name: "null system: a second member last", body: bodyNullSystem, rules: firstUser, p: protocol.System,
			want: `{"system":null,"messages":[{"role":"user","content":"go"}] ,"system":"` + spliceTrimmed + `"}`,
		},
		{
			name: "empty system string: no leading blank lines", body: bodyEmptySystem, rules: firstUser, p: protocol.System,
			want: `{"system":"` + spliceTrimmed + `","messages":[{"role":"user","content":"go"}]}`,
		},
		{
			name: "empty system array: the first block", body: bodyEmptyBlocks, rules: firstUser, p: protocol.System,
			want: `{"system":[ {"type":"text","text":"` + spliceTrimmed + `"}],"messages":[ ]}`,
		},
		{
			name: "task in the system prompt, append", body: bodySystemTask, rules: taskRule, p: protocol.AppendToTask,
			want: `{"system":"Task: pay` + spliceEscaped + `\n","messages":[{"role":"user","content":"hi"}]}`,
		},
		{
			name: "task in the system prompt, new message first", body: bodySystemTask, rules: taskRule, p: protocol.NewMessage,
			want: `{"system":"Task: pay\n","messages":[{"role":"user","content":"` + spliceTrimmed + `"},{"role":"user","content":"hi"}]}`,
		},
		{
			name: "no task: append leaves the body alone", body: bodyEmptyBlocks, rules: firstUser, p: protocol.AppendToTask,
			want: bodyEmptyBlocks,
		},
		{
			name: "no task: new message leaves the body alone", body: bodyString, rules: regexRule, p: protocol.NewMessage,
			want: bodyString,
		},
		{
			name: "unknown placement leaves the body alone", body: bodyString, rules: firstUser, p: "elsewhere",
			want: bodyString,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.body)
			r, err := Parse(body, tt.rules)
			if err != nil {
				t.Fatal(err)
			}
			got := r.SpliceTo(nil, body, tt.p, spliceText)
			if string(got) != tt.want {
				t.Errorf("Splice:\n got %s\nwant %s", got, tt.want)
			}
			if string(body) != tt.body {
				t.Errorf("Splice modified its input")
			}
			if !json.Valid(got) {
				t.Errorf("output is not valid JSON")
			}
		})
	}
}

func TestSpliceTask(t *testing.T) {
	r, err := Parse([]byte(bodyBlocks), []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+?) now`)}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "réserver \"A/B\" \U0001F600"; r.Task != want {
		t.Fatalf("Task = %q; want %q", r.Task, want)
	}
}

func TestSpliceOtherBodyOrEmptyText(t *testing.T) {
	body := []byte(bodyString)
	r, err := Parse(body, protocol.DefaultTaskRules())
	if err != nil {
		t.Fatal(err)
	}
	other := []byte(`{"messages":[]}`)
	if got := r.SpliceTo(nil, other, protocol.AppendToTask, "x"); !bytes.Equal(got, other) {
		t.Errorf("Splice into another body = %s", got)
	}
	if got := r.SpliceTo(nil, body, protocol.AppendToTask, ""); !bytes.Equal(got, body) {
		t.Errorf("Splice of empty text = %s", got)
	}
	if got := r.SpliceTo(nil, body, protocol.NewMessage, " \n\t"); !bytes.Equal(got, body) {
		t.Errorf("Splice of a blank new message = %s", got)
	}
}

// propertyBodies are the bodies the splice property is checked on.
func propertyBodies(t testing.TB) map[string][]protocol.TaskRule {
	t.Helper()
	airline, err := os.ReadFile("testdata/airline.json")
	if err != nil {
		t.Fatal(err)
	}
	regex := []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+?) now`)}, {FirstUserMessage: true}}
	return map[string][]protocol.TaskRule{
		bodyString:      protocol.DefaultTaskRules(),
		bodyBlocks:      regex,
		bodyNoSystem:    protocol.DefaultTaskRules(),
		bodyNullSystem:  protocol.DefaultTaskRules(),
		bodyEmptySystem: protocol.DefaultTaskRules(),
		bodyEmptyBlocks: protocol.DefaultTaskRules(),
		bodySystemTask:  {{Regex: regexp.MustCompile(`Task: (.+)`)}},
		string(airline): {{Regex: regexp.MustCompile(`my user ID is (\w+)`)}},
		`{"messages":[{"role":"user","content":"` + strings.Repeat(`\u00e9\"\\`, 50) + `"}]}`: protocol.DefaultTaskRules(),
	}
}

// TestSpliceProperty checks, for every body and placement, that deleting the
// inserted bytes gives the input back and that the output reads as intended.
func TestSpliceProperty(t *testing.T) {
	texts := []string{spliceText, "x", "\u2028\x01\xff tab\t", "  lead"}
	for body, rules := range propertyBodies(t) {
		in := []byte(body)
		r, err := Parse(in, rules)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []protocol.Placement{protocol.AppendToTask, protocol.System, protocol.NewMessage} {
			for _, text := range texts {
				out := r.SpliceTo(nil, in, p, text)
				checkInsertion(t, r, in, out, p)
				checkReparse(t, r, out, rules, p, text)
			}
		}
	}
}

// checkInsertion fails unless out is in with one run of bytes inserted at the anchor
// of p, and valid JSON.
func checkInsertion(t testing.TB, r *Request, in, out []byte, p protocol.Placement) {
	t.Helper()
	a, ok := r.anchorFor(p)
	splicetest.CheckInsertion(t, a.At, ok, in, out, p)
}

// checkReparse fails unless out parses and holds text where p puts it.
func checkReparse(t *testing.T, r *Request, out []byte, rules []protocol.TaskRule, p protocol.Placement, text string) {
	t.Helper()
	r2, err := Parse(out, rules)
	if err != nil {
		t.Fatalf("%s: output does not parse: %v", p, err)
	}
	trimmed := strings.ToValidUTF8(strings.TrimLeftFunc(text, unicode.IsSpace), "\uFFFD")
	full := strings.ToValidUTF8(text, "\uFFFD")
	switch p {
	case protocol.AppendToTask:
		if r.Task == "" {
			return
		}
		if !splicetest.ContainsMessage(r2.Messages, r.Task+full) {
			t.Errorf("%s: no message holds task+text %q", p, r.Task+full)
		}
		if rules[0].FirstUserMessage && r2.Task != r.Task+full {
			t.Errorf("%s: task %q; want %q", p, r2.Task, r.Task+full)
		}
	case protocol.System:
		first := r2.Messages[0]
		if first.Role != "system" || !strings.Contains(first.Content, trimmed) {
			t.Errorf("%s: first message %+v lacks %q", p, first, trimmed)
		}
	case protocol.NewMessage:
		if r.Task == "" {
			return
		}
		if len(r2.Messages) != len(r.Messages)+1 {
			t.Errorf("%s: %d messages; want %d", p, len(r2.Messages), len(r.Messages)+1)
		}
		want := protocol.Message{Role: "user", Content: trimmed}
		if !slicesContains(r2.Messages, want) {
			t.Errorf("%s: no message %+v", p, want)
		}
	}
}

func slicesContains(msgs []protocol.Message, want protocol.Message) bool {
	for _, m := range msgs {
		if reflect.DeepEqual(m, want) {
			return true
		}
	}
	return false
}
