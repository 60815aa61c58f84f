package protocol

import (
	"regexp"
	"strings"
	"testing"
)

func seg(msg int, role, text string, turn int) Segment {
	return Segment{Msg: msg, Role: role, Text: text, Turn: turn, Offset: -1}
}

// codexSegs is the shape of Codex CLI's first request (protocol/testdata/harness/codex):
// developer texts, then a user item of AGENTS.md, one of environment context, then the
// request.
var codexSegs = []Segment{
	seg(0, "system", "You are Codex, an agent based on GPT-6.", 0),
	seg(1, "system", "<permissions instructions>\nread-only\n</permissions instructions>", 0),
	seg(2, "user", "# AGENTS.md instructions for /tmp/x/repo\n\n<INSTRUCTIONS>\n# Repository guidelines\n</INSTRUCTIONS>", 0),
	seg(3, "user", "<environment_context>\n  <cwd>/tmp/x/repo</cwd>\n  <current_date>2026-11-24</current_date>\n</environment_context>", 0),
	seg(4, "user", "List the files in this repository.", 0),
}

// claudeSegs is the shape of Claude Code's first request: one user message of a
// reminder part and the request part.
var claudeSegs = []Segment{
	seg(-1, "system", "You are Claude Code.", 0),
	seg(0, "user", "<system-reminder>\nAs you answer the user's questions…\n# currentDate\nToday's date is 2026-11-24.\n</system-reminder>\n\n", 0),
	seg(0, "user", "List the files in this repository.", 0),
}

func TestFindTask(t *testing.T) {
	re := regexp.MustCompile
	tests := []struct {
		name  string
		rules []TaskRule
		body  string
		segs  []Segment
		task  string
		rule  string
		seg   int
		end   int
	}{
		{name: "codex: envelope items are passed over", rules: DefaultTaskRules(), segs: codexSegs,
			task: "List the files in this repository.", rule: "task.rules[0]: first_user_message", seg: 4, end: 34},
		{name: "codex without envelopes: the AGENTS.md item", rules: []TaskRule{{FirstUserMessage: true, NoEnvelopes: true}}, segs: codexSegs,
			task: codexSegs[2].Text, rule: "task.rules[0]: first_user_message, envelopes: false", seg: 2, end: len(codexSegs[2].Text)},
		{name: "claude code: the reminder part is removed", rules: DefaultTaskRules(), segs: claudeSegs,
			task: "List the files in this repository.", rule: "task.rules[0]: first_user_message", seg: 2, end: 34},
		{name: "envelope inside the text, anchor before it",
			rules: DefaultTaskRules(),
			segs:  []Segment{seg(0, "user", "Fix the bug.\n<system-reminder>todo: none</system-reminder>\n", 0)},
			task:  "Fix the bug.", rule: "task.rules[0]: first_user_message", seg: 0, end: len("Fix the bug.")},
		{name: "an unclosed envelope is the user's text",
			rules: DefaultTaskRules(),
			segs:  []Segment{seg(0, "user", "explain <system-reminder> tags", 0)},
			task:  "explain <system-reminder> tags", rule: "task.rules[0]: first_user_message", seg: 0, end: 30},
		{name: "skip a part",
			rules: []TaskRule{{FirstUserMessage: true, Skip: []*regexp.Regexp{re(`^Context:`)}}},
			segs:  []Segment{seg(0, "user", "Context: the weather is fine", 0), seg(0, "user", "Book a flight.", 0)},
			task:  "Book a flight.", rule: `task.rules[0]: first_user_message, skip "^Context:"`, seg: 1, end: 14},
		{name: "skip a whole message",
			rules: []TaskRule{{FirstUserMessage: true, Skip: []*regexp.Regexp{re(`^\[session`)}}},
			segs:  []Segment{seg(0, "user", "[session 42]", 0), seg(1, "user", "Book a flight.", 0)},
			task:  "Book a flight.", rule: `task.rules[0]: first_user_message, skip "^\\[session"`, seg: 1, end: 14},
		{name: "strip",
			rules: []TaskRule{{FirstUserMessage: true, Strip: []*regexp.Regexp{re(`\[ref:\d+\]`)}}},
			segs:  []Segment{seg(0, "user", "Book a flight [ref:12] to Paris [ref:7]", 0)},
			task:  "Book a flight  to Paris", rule: `task.rules[0]: first_user_message, strip "\\[ref:\\d+\\]"`, seg: 0, end: len("Book a flight [ref:12] to Paris")},
		{name: "strip everything: the next message",
			rules: []TaskRule{{FirstUserMessage: true, Strip: []*regexp.Regexp{re(`(?s)^Note:.*`)}}},
			segs:  []Segment{seg(0, "user", "Note: all of it", 0), seg(1, "user", "real", 0)},
			task:  "real", rule: `task.rules[0]: first_user_message, strip "(?s)^Note:.*"`, seg: 1, end: 4},
		{name: "last user message of the first turn",
			rules: []TaskRule{{LastUserMessage: true}},
			segs: []Segment{seg(0, "user", "You are helping Ann.", 0), seg(1, "user", "Book a flight.", 0),
				seg(3, "user", "Thanks; now a hotel.", 1)},
			task: "Book a flight.", rule: "task.rules[0]: last_user_message", seg: 1, end: 14},
		{name: "last user message: empty ones passed over",
			rules: []TaskRule{{LastUserMessage: true}},
			segs:  []Segment{seg(0, "user", "Book a flight.", 0), seg(1, "user", "<environment_context>x</environment_context>", 0)},
			task:  "Book a flight.", rule: "task.rules[0]: last_user_message", seg: 0, end: 14},
		{name: "regex reads cleaned texts; anchor maps back",
			rules: []TaskRule{{Regex: re(`Task: (.+)`)}},
			segs:  []Segment{seg(0, "user", "<system-reminder>Task: not this</system-reminder>Task: this one", 0)},
			task:  "this one", rule: `task.rules[0]: regex "Task: (.+)"`, seg: 0, end: len("<system-reminder>Task: not this</system-reminder>Task: this one")},
		{name: "json path on a text of the body anchors there",
			rules: []TaskRule{{JSONPath: "messages.1.content"}},
			body:  `{"messages":[{"role":"user","content":"a"},{"role":"user","content":"Book it"}]}`,
			segs: []Segment{{Msg: 0, Role: "user", Text: "a", Offset: 37},
				{Msg: 1, Role: "user", Text: "Book it", Offset: 68}},
			task: "Book it", rule: `task.rules[0]: json_path "messages.1.content"`, seg: 1, end: 7},
		{name: "json path elsewhere anchors after the first user message",
			rules: []TaskRule{{JSONPath: "metadata.task"}},
			body:  `{"metadata":{"task":"T-1: book it"},"messages":[{"role":"user","content":"hi"}]}`,
			segs:  []Segment{seg(-1, "system", "sys", 0), seg(0, "user", "hi", 0)},
			task:  "T-1: book it", rule: `task.rules[0]: json_path "metadata.task"`, seg: 1, end: 2},
		{name: "json path not a string: next rule",
			rules: []TaskRule{{JSONPath: "metadata.n"}, {FirstUserMessage: true}},
			body:  `{"metadata":{"n":1}}`,
			segs:  []Segment{seg(0, "user", "hi", 0)},
			task:  "hi", rule: "task.rules[1]: first_user_message", seg: 0, end: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ok := FindTask(tt.rules, []byte(tt.body), tt.segs)
			if !ok {
				t.Fatal("no rule matched")
			}
			if f.Task != tt.task || f.Rule != tt.rule || f.Seg != tt.seg || f.End != tt.end {
				t.Errorf("got  task %q rule %q seg %d end %d\nwant task %q rule %q seg %d end %d",
					f.Task, f.Rule, f.Seg, f.End, tt.task, tt.rule, tt.seg, tt.end)
			}
		})
	}
}

func TestFindTaskNone(t *testing.T) {
	for name, segs := range map[string][]Segment{
		"no user text":  {seg(-1, "system", "sys", 0)},
		"only envelope": {seg(0, "user", "<environment_context>x</environment_context>", 0)},
		"only spaces":   {seg(0, "user", "  \n", 0)},
	} {
		if f, ok := FindTask(DefaultTaskRules(), nil, segs); ok {
			t.Errorf("%s: found %+v", name, f)
		}
	}
	if _, ok := FindTask([]TaskRule{{JSONPath: "a"}}, []byte(`{"a":"x"}`), nil); ok {
		t.Error("json path matched a body with no text to anchor to")
	}
}

// TestFindTaskAllocs: the default rule reading a call whose texts lose nothing to
// cleaning (the usual call) allocates nothing: it runs on every call.
func TestFindTaskAllocs(t *testing.T) {
	rules := DefaultTaskRules()
	segs := []Segment{seg(-1, "system", "You are an airline agent.\nBe brief.", 0),
		seg(0, "user", "Hi, I want to change my flight to Boston.", 0), seg(2, "user", "Yes please.", 1)}
	allocs := testing.AllocsPerRun(100, func() {
		if f, ok := FindTask(rules, nil, segs); !ok || f.Seg != 1 || f.End != len(segs[1].Text) {
			t.Fatalf("found %+v, %v", f, ok)
		}
	})
	if allocs != 0 {
		t.Errorf("FindTask allocated %v times a call, want 0", allocs)
	}
}

// TestFoundPrefix: Found.Prefix holds exactly when the task depends on no text after
// its own message: found by the first rule, a regex or first_user_message rule that
// stopped at it; not by a later rule, a first user message that only preambles were,
// the last user message of a turn or a json path.
func TestFoundPrefix(t *testing.T) {
	task := seg(1, "user", "Book the flight.", 0)
	pre := seg(0, "user", "Working directory: /srv/app\nDate: 2026-11-27\nOS: linux", 0)
	regex := TaskRule{Regex: regexp.MustCompile(`Book (.+)`)}
	for _, tt := range []struct {
		name  string
		rules []TaskRule
		segs  []Segment
		want  bool
	}{
		{"first user message", DefaultTaskRules(), []Segment{seg(-1, "system", "sys", 0), task}, true},
		{"after a preamble", DefaultTaskRules(), []Segment{pre, task}, true},
		{"only a preamble", DefaultTaskRules(), []Segment{pre}, false},
		{"regex", []TaskRule{regex}, []Segment{task}, true},
		{"a later rule", []TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}, {FirstUserMessage: true}}, []Segment{task}, false},
		{"last user message", []TaskRule{{LastUserMessage: true}}, []Segment{task}, false},
		{"json path", []TaskRule{{JSONPath: "task"}}, []Segment{task}, false},
	} {
		f, ok := FindTask(tt.rules, []byte(`{"task":"Book the flight."}`), tt.segs)
		if !ok || f.Prefix != tt.want {
			t.Errorf("%s: found %v, Prefix %v, want %v", tt.name, ok, f.Prefix, tt.want)
		}
	}
}

// TestEditedOffsets: a text nothing was cut from maps offsets to themselves (past its
// end, to its end), as the one span of the whole text did.
func TestEditedOffsets(t *testing.T) {
	e := cleanText("  plain task  ", true, nil)
	if !e.whole || e.text != "  plain task  " {
		t.Fatalf("cleaned to %+v", e)
	}
	for p, want := range map[int]int{0: 0, 5: 5, 14: 14, 20: 14} {
		if got := e.origOffset(p); got != want {
			t.Errorf("origOffset(%d) = %d, want %d", p, got, want)
		}
	}
	e = cleanText("<system-reminder>r</system-reminder> book it ", true, nil)
	if e.whole || e.text != "book it" || e.origOffset(len(e.text)) != len("<system-reminder>r</system-reminder> book it") {
		t.Errorf("cleaned to %+v, end at %d", e, e.origOffset(len(e.text)))
	}
	if e = cleanText("<system-reminder>r</system-reminder>", true, nil); e.whole || e.text != "" || e.origOffset(3) != 0 {
		t.Errorf("all scaffolding cleaned to %+v", e)
	}
}

func TestCleanTextIdempotent(t *testing.T) {
	strip := []*regexp.Regexp{regexp.MustCompile(`ab`)}
	for _, s := range []string{"aabb", "aaaabbbb", "<system-<system-reminder>x</system-reminder>reminder>y</system-reminder> z",
		" x <environment_context></environment_context>", strings.Repeat("a", 40) + strings.Repeat("b", 40)} {
		once := cleanText(s, true, strip).text
		if twice := cleanText(once, true, strip).text; twice != once {
			t.Errorf("cleanText(%q) = %q, again %q", s, once, twice)
		}
		if strings.Contains(once, "ab") || strings.Contains(once, "<system-reminder>y") {
			t.Errorf("cleanText(%q) = %q still has what it removes", s, once)
		}
	}
}

// FuzzTaskRules: skip, strip and json path rules on arbitrary bodies and texts do not
// panic, find the same task twice, anchor inside the text, and cleaning is idempotent.
func FuzzTaskRules(f *testing.F) {
	f.Add([]byte(`{"metadata":{"task":"x"}}`), "Book [ref:1] it <system-reminder>r</system-reminder>", "Context: y")
	f.Add([]byte(`{}`), "# AGENTS.md instructions for /x\n<INSTRUCTIONS>i</INSTRUCTIONS>", "<environment_context>e</environment_context>go")
	f.Add([]byte(`[1,2`), "[ref:[ref:1]2]", "")
	rules := []TaskRule{
		{JSONPath: "metadata.task", Strip: []*regexp.Regexp{regexp.MustCompile(`\[ref:\d+\]`)}},
		{Regex: regexp.MustCompile(`Task: (.+)`), Skip: []*regexp.Regexp{regexp.MustCompile(`^Context:`)}},
		{LastUserMessage: true, Strip: []*regexp.Regexp{regexp.MustCompile(`\[ref:\d+\]`), regexp.MustCompile(`(?s)<!--.*?-->`)}},
		{FirstUserMessage: true, Skip: []*regexp.Regexp{regexp.MustCompile(`^Context:`)}, NoEnvelopes: true},
	}
	f.Fuzz(func(t *testing.T, body []byte, a, b string) {
		segs := []Segment{seg(-1, "system", b, 0), seg(0, "user", a, 0), seg(0, "user", b, 0), seg(2, "user", a+b, 1)}
		for i := range rules {
			one := rules[i : i+1]
			f1, ok1 := FindTask(one, body, segs)
			f2, ok2 := FindTask(one, body, segs)
			if ok1 != ok2 || f1 != f2 {
				t.Fatalf("rule %d: %+v %v then %+v %v", i, f1, ok1, f2, ok2)
			}
			if !ok1 {
				continue
			}
			if f1.Task == "" || f1.Seg < 0 || f1.Seg >= len(segs) || f1.End < 0 || f1.End > len(segs[f1.Seg].Text) {
				t.Fatalf("rule %d: bad find %+v", i, f1)
			}
			for _, s := range []string{a, b} {
				once := cleanText(s, !rules[i].NoEnvelopes, rules[i].Strip).text
				if twice := cleanText(once, !rules[i].NoEnvelopes, rules[i].Strip).text; twice != once {
					t.Fatalf("rule %d: cleaning %q gives %q, then %q", i, s, once, twice)
				}
			}
		}
	})
}
