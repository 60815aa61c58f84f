package responses

import (
	"bytes"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/internal/splicetest"
)

// Bodies for the golden tests: unknown fields, odd whitespace and key order, and
// escapes the splice must leave as they are.
const (
	// bodyString: input is a plain string with escapes; instructions set.
	bodyString = ` { "model" : "gpt-4.1", "instructions" : "You are an agent." , "input" : "Fly to Montr\u00e9al \/ Qu\u00e9bec" , "x-top":{"a":[1,2]} }`
	// bodyItems: a tool-calling conversation sent back as items; the task is the
	// second input_text part of the first user message.
	bodyItems = `{"model":"gpt-4.1","stream":true,"instructions":"Rules.","input":[
  {"role":"developer","content":"Be terse."},
  {"type":"message","role":"user","content":[{"type":"input_image","image_url":"data:,"},{"type":"input_text","text":"Policy \/ r\u00e8gles"},{"type":"input_text","text":"Task: r\u00e9server \"A\/B\" now\nEnd."}],"x":{}},
  {"type":"reasoning","id":"rs_1","summary":[]},
  {"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Let me look.","annotations":[]}]},
  {"type":"function_call","id":"fc_1","call_id":"call_1","name":"lookup","arguments":"{\"q\": \"UA12\"}","status":"completed"},
  {"type":"function_call","id":"fc_2","call_id":"call_2","name":"seat","arguments":"{}"},
  {"type":"function_call_output","call_id":"call_1","output":"{\"status\":\"on time\"}"},
  {"type":"function_call_output","call_id":"call_2","output":[{"type":"input_text","text":"12A"}]}
],"tools":[{"type":"function","name":"lookup","parameters":{"type":"object"}}]}`
	// bodyNoInstructions: no instructions; an easy message with string content.
	bodyNoInstructions = "\n\t{\"input\":[{\"role\":\"user\",\"content\":\"go on\"}],\"max_output_tokens\":5}"
	// bodyNullInstructions: instructions null.
	bodyNullInstructions = `{"instructions":null,"input":[{"role":"user","content":"go"}] }`
	// bodyEmptyInstructions: an empty instructions string.
	bodyEmptyInstructions = `{"instructions":"","input":"go"}`
	// bodyContinued: previous_response_id with only a tool output: no task.
	bodyContinued = `{"model":"gpt-4.1","previous_response_id":"resp_1","instructions":"Rules.","input":[{"type":"function_call_output","call_id":"call_1","output":"ok"}]}`
	// bodyInstructionsTask: the task is in the instructions.
	bodyInstructionsTask = `{"instructions":"Task: pay\n","input":[{"role":"user","content":"hi"}]}`
	// bodyEmptyList: an empty input list.
	bodyEmptyList = `{"instructions":"Task: pay","input":[ ]}`
)

// spliceText is a rendered template: leading blank lines, quotes, a non-ASCII letter
// and characters that HTML escaping would touch.
const spliceText = "\n\nHint: use \"YUL\" é/</> & go"

const (
	spliceEscaped = `\n\nHint: use \"YUL\" é/</> & go`
	spliceTrimmed = `Hint: use \"YUL\" é/</> & go`
)

func TestParse(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		rules     []protocol.TaskRule
		model     string
		stream    bool
		task      string
		continues string
		msgs      []protocol.Message
	}{
		{name: "string input", body: bodyString, model: "gpt-4.1", task: "Fly to Montréal / Québec",
			msgs: []protocol.Message{{Role: "system", Content: "You are an agent."}, {Role: "user", Content: "Fly to Montréal / Québec"}}},
		{name: "items", body: bodyItems, model: "gpt-4.1", stream: true, task: "Policy / règles\nTask: réserver \"A/B\" now\nEnd.",
			msgs: []protocol.Message{
				{Role: "system", Content: "Rules."},
				{Role: "developer", Content: "Be terse."},
				{Role: "user", Content: "Policy / règles\nTask: réserver \"A/B\" now\nEnd.", Parts: []protocol.Part{
					{Type: "image_url", Media: &protocol.Media{}},
					{Type: "text", Text: "Policy / règles"}, {Type: "text", Text: "Task: réserver \"A/B\" now\nEnd."}}},
				{Role: "assistant", Content: "Let me look.", ToolCalls: []protocol.ToolCall{
					{ID: "call_1", Type: "function", Name: "lookup", Arguments: `{"q": "UA12"}`},
					{ID: "call_2", Type: "function", Name: "seat", Arguments: `{}`}},
					Raw: []protocol.RawJSON{`{"type":"reasoning","id":"rs_1","summary":[]}`}},
				{Role: "tool", Content: `{"status":"on time"}`, ToolCallID: "call_1"},
				{Role: "tool", Content: "12A", ToolCallID: "call_2"},
			}},
		{name: "regex over instructions", body: bodyItems, rules: []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+?) now`)}},
			model: "gpt-4.1", stream: true, task: `réserver "A/B"`},
		{name: "continued", body: bodyContinued, model: "gpt-4.1", continues: "resp_1",
			msgs: []protocol.Message{{Role: "system", Content: "Rules."}, {Role: "tool", Content: "ok", ToolCallID: "call_1"}}},
		{name: "no instructions", body: bodyNoInstructions, task: "go on", msgs: []protocol.Message{{Role: "user", Content: "go on"}}},
		{name: "no input", body: `{"model":"m","prompt":{"id":"pmpt_1"}}`, model: "m"},
		{name: "empty list", body: bodyEmptyList, msgs: []protocol.Message{{Role: "system", Content: "Task: pay"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules := tt.rules
			if rules == nil {
				rules = protocol.DefaultTaskRules()
			}
			r, err := Parse([]byte(tt.body), rules)
			if err != nil {
				t.Fatal(err)
			}
			if r.Model != tt.model || r.Stream != tt.stream || r.Task != tt.task || r.Continues != tt.continues {
				t.Fatalf("model %q stream %v task %q continues %q", r.Model, r.Stream, r.Task, r.Continues)
			}
			if tt.msgs != nil && !reflect.DeepEqual(r.Messages, tt.msgs) {
				t.Fatalf("messages\n got %+v\nwant %+v", r.Messages, tt.msgs)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	for _, b := range []string{``, `{"input":`, "{\"input\":\"\xff\"}"} {
		if _, err := Parse([]byte(b), protocol.DefaultTaskRules()); !errors.Is(err, protocol.ErrInvalidJSON) {
			t.Errorf("%q: err %v", b, err)
		}
	}
	// JSON, but not the object a call is: no conversation, as in every adapter.
	for _, b := range []string{`[]`, `"x"`} {
		if _, err := Parse([]byte(b), protocol.DefaultTaskRules()); !errors.Is(err, protocol.ErrMissingMessages) {
			t.Errorf("%q: err %v", b, err)
		}
	}
}

func TestSpliceGolden(t *testing.T) {
	firstUser := protocol.DefaultTaskRules()
	regexRule := []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+?) now`)}}
	taskRule := []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}}
	tests := []struct {
		name  string
		body  string
		rules []protocol.TaskRule
		p     protocol.Placement
		want  string // the body with the insertion, as a replacement of one substring
		from  string
	}{
		{"append to string input", bodyString, firstUser, protocol.AppendToTask,
			`"Fly to Montr\u00e9al \/ Qu\u00e9bec` + spliceEscaped + `"`, `"Fly to Montr\u00e9al \/ Qu\u00e9bec"`},
		{"new message degrades for string input", bodyString, firstUser, protocol.NewMessage,
			`"Fly to Montr\u00e9al \/ Qu\u00e9bec` + spliceEscaped + `"`, `"Fly to Montr\u00e9al \/ Qu\u00e9bec"`},
		{"system into instructions", bodyString, firstUser, protocol.System,
			`"You are an agent.` + spliceEscaped + `"`, `"You are an agent."`},
		{"append after the last text part", bodyItems, firstUser, protocol.AppendToTask,
			`now\nEnd.` + spliceEscaped + `"}]`, `now\nEnd."}]`},
		{"append mid-string by regex", bodyItems, regexRule, protocol.AppendToTask,
			`r\u00e9server \"A\/B\"` + spliceEscaped + ` now`, `r\u00e9server \"A\/B\" now`},
		{"new message after the task item", bodyItems, firstUser, protocol.NewMessage,
			`"x":{}},{"role":"user","content":"` + spliceTrimmed + `"}`, `"x":{}}`},
		{"new instructions member", bodyNoInstructions, firstUser, protocol.System,
			`{"instructions":"` + spliceTrimmed + `","input"`, `{"input"`},
		{"null instructions: a last member", bodyNullInstructions, firstUser, protocol.System,
			`}] ,"instructions":"` + spliceTrimmed + `"}`, `}] }`},
		{"empty instructions", bodyEmptyInstructions, firstUser, protocol.System,
			`"instructions":"` + spliceTrimmed + `"`, `"instructions":""`},
		{"task in instructions: new message first", bodyInstructionsTask, taskRule, protocol.NewMessage,
			`"input":[{"role":"user","content":"` + spliceTrimmed + `"},{"role"`, `"input":[{"role"`},
		{"task in instructions, empty list", bodyEmptyList, taskRule, protocol.NewMessage,
			`"input":[{"role":"user","content":"` + spliceTrimmed + `"} ]`, `"input":[ ]`},
		{"new member of an object with no other", `{}`, firstUser, protocol.System,
			`{"instructions":"` + spliceTrimmed + `"}`, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.body)
			r, err := Parse(body, tt.rules)
			if err != nil {
				t.Fatal(err)
			}
			out := r.SpliceTo(nil, body, tt.p, spliceText)
			if strings.Count(tt.body, tt.from) != 1 {
				t.Fatalf("bad test: %q not once in the body", tt.from)
			}
			want := strings.Replace(tt.body, tt.from, tt.want, 1)
			if string(out) != want {
				t.Fatalf("splice\n got %s\nwant %s", out, want)
			}
			checkInsertion(t, r, body, out, tt.p)
			checkReparse(t, r, out, tt.rules, tt.p, spliceText)
		})
	}
}

// TestSpliceNoTask: without a task only System inserts; other bodies come back as is.
func TestSpliceNoTask(t *testing.T) {
	body := []byte(bodyContinued)
	r, err := Parse(body, protocol.DefaultTaskRules())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []protocol.Placement{protocol.AppendToTask, protocol.NewMessage, "bogus"} {
		if out := r.SpliceTo(nil, body, p, spliceText); !bytes.Equal(out, body) {
			t.Fatalf("%s: body changed: %s", p, out)
		}
	}
	if out := r.SpliceTo(nil, body[:len(body)-1], protocol.System, spliceText); len(out) != len(body)-1 {
		t.Fatal("a different body was spliced")
	}
	out := r.SpliceTo(nil, body, protocol.System, spliceText)
	checkInsertion(t, r, body, out, protocol.System)
}

// checkInsertion fails unless out is in plus one run of bytes at the placement's
// anchor, and stays valid JSON.
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
		if r.arrOpen < 0 { // a string input: appended to the task
			if !splicetest.ContainsMessage(r2.Messages, r.Task+full) {
				t.Errorf("%s: no message holds task+text %q", p, r.Task+full)
			}
			return
		}
		want := protocol.Message{Role: "user", Content: trimmed}
		found := false
		for _, m := range r2.Messages {
			found = found || reflect.DeepEqual(m, want)
		}
		if !found {
			t.Errorf("%s: no message %+v in %+v", p, want, r2.Messages)
		}
	}
}
