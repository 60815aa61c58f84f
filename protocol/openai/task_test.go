package openai

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
)

// remembered is the element the memo holds for raw, one element's bytes.
func remembered(raw string) *element { return memo.Read([]byte(raw), readElement) }

func chatBody(els ...string) []byte {
	return []byte(`{"model":"m","messages":[` + strings.Join(els, ",") + `],"temperature":0}`)
}

// TestTaskRemembered: a task found in the first messages is remembered on its element
// with the elements before it, and a later call that sends them first (the episode's
// next turn, with more messages after) takes it from there: the same task, rule and
// anchors as reading the texts again gives. After another system prompt it is found,
// and remembered, anew.
func TestTaskRemembered(t *testing.T) {
	rules := protocol.DefaultTaskRules()
	sysA := `{"role":"system","content":"You are an airline agent.\nSession task-memo A"}`
	sysB := `{"role":"system","content":"You are an airline agent.\nSession task-memo B"}`
	user := `{"role":"user","content":"Change my flight to Boston, reservation TASKMEMO1."}`
	turn := []string{`{"role":"assistant","content":"Sure, which date?"}`, `{"role":"user","content":"May 3rd."}`}
	for _, els := range [][]string{
		{sysA, user}, {sysA, user}, append([]string{sysA, user}, turn...),
		{sysB, user, turn[0]}, append([]string{sysB, user}, turn...),
	} {
		body := chatBody(els...)
		got, err := Parse(body, rules)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := parseReference(body, rules)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%d elements:\n got %+v\nwant %+v", len(els), got, want)
		}
	}
	u := remembered(user)
	for i, sys := range []string{sysB, sysA} { // newest first
		ts := u.tasks.Load()
		if ts == nil {
			t.Fatal("no task remembered")
		}
		m := ts.ways[(int(ts.next.Load())-1-i+taskWays)%taskWays].Load()
		if m == nil || m.n != 1 || m.before[0] != remembered(sys).id || m.task != "Change my flight to Boston, reservation TASKMEMO1." {
			t.Errorf("the task after %.40s… is not remembered: %+v", sys[len(sys)-20:], m)
		}
	}
	if n := u.tasks.Load().next.Load(); n != 2 {
		t.Errorf("%d tasks remembered, want 2 (one per system prompt)", n)
	}
}

// TestTaskNotRemembered: a task that depends on texts after its message is read
// again on every call, and later calls find what their texts give: a regex rule
// before the rule that found it (its match may come later), a first user message
// that only preambles were, the last user message of the first turn.
func TestTaskNotRemembered(t *testing.T) {
	regexFirst := []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}, {FirstUserMessage: true}}
	last := []protocol.TaskRule{{LastUserMessage: true}}
	preamble := `{"role":"user","content":"Working directory: /srv/app\nDate: 2026-11-27\nOS: linux"}`
	hello := `{"role":"user","content":"hello, not-remembered test"}`
	answer := `{"role":"assistant","content":"Hi."}`
	tests := []struct {
		rules []protocol.TaskRule
		first []string // found in its last element, not remembered
		later []string // a later call of the same episode
	}{
		{regexFirst, []string{hello}, []string{hello, answer, `{"role":"user","content":"Task: book it"}`}},
		{protocol.DefaultTaskRules(), []string{preamble}, []string{preamble, answer, `{"role":"user","content":"Add a NOTES.md, not-remembered test."}`}},
		{last, []string{`{"role":"user","content":"first, not-remembered test"}`}, []string{`{"role":"user","content":"first, not-remembered test"}`, `{"role":"user","content":"second"}`}},
	}
	for _, tt := range tests {
		for _, els := range [][]string{tt.first, tt.first, tt.later} {
			body := chatBody(els...)
			got, err := Parse(body, tt.rules)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := parseReference(body, tt.rules)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%.60s:\n got task %q (%s)\nwant task %q (%s)", body, got.Task, got.TaskRule, want.Task, want.TaskRule)
			}
		}
		k := len(tt.first) - 1
		e := remembered(tt.first[k])
		if e.tasks.Load() != nil {
			t.Errorf("%.60s: the task of its element %d was remembered", tt.first[k], k)
		}
	}
}

// A task the rules build (text parts joined, an envelope cut out) is a copy the
// memo's bound does not count, as large as its element and up to taskWays of them per
// element: it is found again on each call rather than remembered. A task that is a
// slice of the element's own text still is (found in review: a 100 KiB message of two
// text parts after four system prompts held 400 KiB of remembered copies).
func TestTaskMemoHoldsNoCopies(t *testing.T) {
	rules := protocol.DefaultTaskRules()
	part := strings.Repeat("word ", 2<<10)
	joined := `{"role":"user","content":[{"type":"text","text":"` + part + `"},{"type":"text","text":"` + part + `"}]}`
	plain := `{"role":"user","content":"` + part + `"}`
	for i := range 4 {
		sys := `{"role":"system","content":"You are agent number ` + string(rune('A'+i)) + `, with a long enough prompt"}`
		for _, user := range []string{joined, plain} {
			r, err := Parse(chatBody(sys, user), rules)
			if err != nil {
				t.Fatal(err)
			}
			if r.Task == "" {
				t.Fatalf("no task found in %.40s…", user)
			}
		}
	}
	if ts := remembered(joined).tasks.Load(); ts != nil {
		for w := range ts.ways {
			if m := ts.ways[w].Load(); m != nil {
				t.Fatalf("a joined task of %d bytes is remembered: a copy the memo does not account for", len(m.task))
			}
		}
	}
	ts, kept := remembered(plain).tasks.Load(), 0
	if ts != nil {
		for w := range ts.ways {
			if ts.ways[w].Load() != nil {
				kept++
			}
		}
	}
	if kept == 0 {
		t.Fatal("a task that is a slice of its element's text is no longer remembered")
	}
}
