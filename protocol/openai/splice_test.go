package openai

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

// Bodies for the golden tests. Each has unknown fields at every level, odd
// whitespace and key order, and escapes the splice must leave as they are.
const (
	// bodyFirstUser: the task is the first user message; the system message has
	// string content.
	bodyFirstUser = ` { "x-top" : {"a":[1,2]}, "messages" :[
  {"content":"You are an agent.","role":"system","meta":{"k":null}},
  { "role" : "user" , "content" : "Fly to Montr\u00e9al \/ Qu\u00e9bec" , "extra": [ {"role":"system"} ] },
  {"role":"assistant","content":null,"x":1}
] , "model":"gpt-4o", "tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}
`
	// bodyRegex: the task sits mid-string in a user message, after escapes of
	// every kind; there is no system message.
	bodyRegex = `{"messages":[{"role":"user","content":"Policy \/ r\u00e8gles\nTask: r\u00e9server \"A\/B\" \ud83d\ude00 now\nEnd.","x":{}}],"n":1}`
	// bodyParts: a developer message whose content is parts, the task in the
	// first text part of a user message that also holds an image.
	bodyParts = `{"messages":[{"role":"developer","content":[{"type":"text","text":"Rules."},{"type":"image_url","image_url":{"url":"u"}}]},{"role":"user","content":[{"type":"text","text":"Task: pay"},{"type":"image_url","image_url":{"url":"v"}},{"type":"text","text":"thanks"}]}]}`
	// bodyNoText: a system message whose parts hold no text.
	bodyNoText = `{"messages":[{"role":"system","content":[ {"type":"image_url","image_url":{"url":"u"}} ]},{"role":"user","content":"go"}]}`
	// bodyEmptyParts: a system message with an empty parts array.
	bodyEmptyParts = `{"messages":[{"role":"system","content":[ ]},{"role":"user","content":"go"}]}`
	// bodyNullSystem: a system message with null content takes no text.
	bodyNullSystem = `{"messages":[{"role":"system","content":null},{"role":"user","content":"go"}]}`
	// bodyEmpty: no messages at all.
	bodyEmpty = `{"messages":[ ],"model":"m"}`
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
	partsRule := []protocol.TaskRule{{Regex: regexp.MustCompile(`^Task: (.+)$`)}}
	firstUser := protocol.DefaultTaskRules()
	tests := []struct {
		name  string
		body  string
		rules []protocol.TaskRule
		p     protocol.Placement
		want  string
	}{
		{
			name: "first user message, append", body: bodyFirstUser, rules: firstUser, p: protocol.AppendToTask,
			want: ` { "x-top" : {"a":[1,2]}, "messages" :[
  {"content":"You are an agent.","role":"system","meta":{"k":null}},
  { "role" : "user" , "content" : "Fly to Montr\u00e9al \/ Qu\u00e9bec` + spliceEscaped + `" , "extra": [ {"role":"system"} ] },
  {"role":"assistant","content":null,"x":1}
] , "model":"gpt-4o", "tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}
`,
		},
		{
			name: "first user message, system", body: bodyFirstUser, rules: firstUser, p: protocol.System,
			want: ` { "x-top" : {"a":[1,2]}, "messages" :[
  {"content":"You are an agent.` + spliceEscaped + `","role":"system","meta":{"k":null}},
  { "role" : "user" , "content" : "Fly to Montr\u00e9al \/ Qu\u00e9bec" , "extra": [ {"role":"system"} ] },
  {"role":"assistant","content":null,"x":1}
] , "model":"gpt-4o", "tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}
`,
		},
		{
			name: "first user message, new message", body: bodyFirstUser, rules: firstUser, p: protocol.NewMessage,
			want: ` { "x-top" : {"a":[1,2]}, "messages" :[
  {"content":"You are an agent.","role":"system","meta":{"k":null}},
  { "role" : "user" , "content" : "Fly to Montr\u00e9al \/ Qu\u00e9bec" , "extra": [ {"role":"system"} ] },{"role":"user","content":"` + spliceTrimmed + `"},
  {"role":"assistant","content":null,"x":1}
] , "model":"gpt-4o", "tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}
`,
		},
		{
			name: "regex ending mid-string after escapes, append", body: bodyRegex, rules: regexRule, p: protocol.AppendToTask,
			want: `{"messages":[{"role":"user","content":"Policy \/ r\u00e8gles\nTask: r\u00e9server \"A\/B\" \ud83d\ude00` + spliceEscaped + ` now\nEnd.","x":{}}],"n":1}`,
		},
		{
			name: "regex, system message added in front", body: bodyRegex, rules: regexRule, p: protocol.System,
			want: `{"messages":[{"role":"system","content":"` + spliceTrimmed + `"},{"role":"user","content":"Policy \/ r\u00e8gles\nTask: r\u00e9server \"A\/B\" \ud83d\ude00 now\nEnd.","x":{}}],"n":1}`,
		},
		{
			name: "regex, new message", body: bodyRegex, rules: regexRule, p: protocol.NewMessage,
			want: `{"messages":[{"role":"user","content":"Policy \/ r\u00e8gles\nTask: r\u00e9server \"A\/B\" \ud83d\ude00 now\nEnd.","x":{}},{"role":"user","content":"` + spliceTrimmed + `"}],"n":1}`,
		},
		{
			name: "regex in a part, append", body: bodyParts, rules: partsRule, p: protocol.AppendToTask,
			want: `{"messages":[{"role":"developer","content":[{"type":"text","text":"Rules."},{"type":"image_url","image_url":{"url":"u"}}]},{"role":"user","content":[{"type":"text","text":"Task: pay` + spliceEscaped + `"},{"type":"image_url","image_url":{"url":"v"}},{"type":"text","text":"thanks"}]}]}`,
		},
		{
			name: "first user message of parts: after the last text part", body: bodyParts, rules: firstUser, p: protocol.AppendToTask,
			want: `{"messages":[{"role":"developer","content":[{"type":"text","text":"Rules."},{"type":"image_url","image_url":{"url":"u"}}]},{"role":"user","content":[{"type":"text","text":"Task: pay"},{"type":"image_url","image_url":{"url":"v"}},{"type":"text","text":"thanks` + spliceEscaped + `"}]}]}`,
		},
		{
			name: "developer parts: system appends to the last text part", body: bodyParts, rules: firstUser, p: protocol.System,
			want: `{"messages":[{"role":"developer","content":[{"type":"text","text":"Rules.` + spliceEscaped + `"},{"type":"image_url","image_url":{"url":"u"}}]},{"role":"user","content":[{"type":"text","text":"Task: pay"},{"type":"image_url","image_url":{"url":"v"}},{"type":"text","text":"thanks"}]}]}`,
		},
		{
			name: "parts: new message after the task message", body: bodyParts, rules: partsRule, p: protocol.NewMessage,
			want: `{"messages":[{"role":"developer","content":[{"type":"text","text":"Rules."},{"type":"image_url","image_url":{"url":"u"}}]},{"role":"user","content":[{"type":"text","text":"Task: pay"},{"type":"image_url","image_url":{"url":"v"}},{"type":"text","text":"thanks"}]},{"role":"user","content":"` + spliceTrimmed + `"}]}`,
		},
		{
			name: "system parts without text: a text part is added", body: bodyNoText, rules: firstUser, p: protocol.System,
			want: `{"messages":[{"role":"system","content":[ {"type":"image_url","image_url":{"url":"u"}} ,{"type":"text","text":"` + spliceTrimmed + `"}]},{"role":"user","content":"go"}]}`,
		},
		{
			name: "system with empty parts: the first part", body: bodyEmptyParts, rules: firstUser, p: protocol.System,
			want: `{"messages":[{"role":"system","content":[ {"type":"text","text":"` + spliceTrimmed + `"}]},{"role":"user","content":"go"}]}`,
		},
		{
			name: "system with null content: a system message in front", body: bodyNullSystem, rules: firstUser, p: protocol.System,
			want: `{"messages":[{"role":"system","content":"` + spliceTrimmed + `"},{"role":"system","content":null},{"role":"user","content":"go"}]}`,
		},
		{
			name: "no messages: the system message alone", body: bodyEmpty, rules: firstUser, p: protocol.System,
			want: `{"messages":[{"role":"system","content":"` + spliceTrimmed + `"} ],"model":"m"}`,
		},
		{
			name: "no task: append leaves the body alone", body: bodyEmpty, rules: firstUser, p: protocol.AppendToTask,
			want: bodyEmpty,
		},
		{
			name: "no task: new message leaves the body alone", body: bodyRegex, rules: partsRule, p: protocol.NewMessage,
			want: bodyRegex,
		},
		{
			name: "unknown placement leaves the body alone", body: bodyFirstUser, rules: firstUser, p: "elsewhere",
			want: bodyFirstUser,
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
	r, err := Parse([]byte(bodyRegex), []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+?) now`)}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "réserver \"A/B\" \U0001F600"; r.Task != want {
		t.Fatalf("Task = %q; want %q", r.Task, want)
	}
}

func TestSpliceOtherBodyOrEmptyText(t *testing.T) {
	body := []byte(bodyFirstUser)
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
	airline, err := os.ReadFile("testdata/airline16k.json")
	if err != nil {
		t.Fatal(err)
	}
	regex := []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+?) now`)}, {FirstUserMessage: true}}
	return map[string][]protocol.TaskRule{
		bodyFirstUser:   protocol.DefaultTaskRules(),
		bodyRegex:       regex,
		bodyParts:       {{Regex: regexp.MustCompile(`^Task: (.+)$`)}},
		bodyNoText:      protocol.DefaultTaskRules(),
		bodyEmptyParts:  protocol.DefaultTaskRules(),
		bodyNullSystem:  protocol.DefaultTaskRules(),
		bodyEmpty:       protocol.DefaultTaskRules(),
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
	splicetest.CheckInsertion(t, a.at, ok, in, out, p)
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
		if !strings.Contains(r2.Messages[r.task.msg].Content, r.Task+full) {
			t.Errorf("%s: task message %q lacks task+text %q", p, r2.Messages[r.task.msg].Content, r.Task+full)
		}
		if rules[0].FirstUserMessage && r2.Task != r.Task+full {
			t.Errorf("%s: task %q; want %q", p, r2.Task, r.Task+full)
		}
	case protocol.System:
		first := r2.Messages[0]
		if (first.Role != "system" && first.Role != "developer") || !strings.Contains(first.Content, trimmed) {
			t.Errorf("%s: first message %+v lacks %q", p, first, trimmed)
		}
	case protocol.NewMessage:
		if r.Task == "" {
			return
		}
		want := protocol.Message{Role: "user", Content: trimmed}
		if got := r2.Messages[r.task.msg+1]; !reflect.DeepEqual(got, want) && trimmed != "" {
			t.Errorf("%s: message after the task = %+v; want %+v", p, got, want)
		}
		if len(r2.Messages) != len(r.Messages)+1 {
			t.Errorf("%s: %d messages; want %d", p, len(r2.Messages), len(r.Messages)+1)
		}
	}
}
