package responses

import (
	"regexp"
	"testing"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/internal/memotest"
)

// sameParse fails unless body reads from the memo as it reads afresh.
func sameParse(t *testing.T, body []byte, rules []protocol.TaskRule) {
	t.Helper()
	parse := func(b []byte) (*Request, error) { return Parse(b, rules) }
	memotest.Same(t, body, parse, memotest.Fresh(&memo, parse))
}

// TestMemoMatchesRealData: every turn of the real tau-bench trajectories as a
// Responses API body, and the bodies Codex and the OpenAI Agents SDK sent (harness
// captures), read from the memo exactly as afresh.
func TestMemoMatchesRealData(t *testing.T) {
	rules := []protocol.TaskRule{{Regex: regexp.MustCompile(`user_id is (\w+)`)}, {FirstUserMessage: true}}
	for _, msgs := range memotest.Trajectories(t, 8) {
		for n := 2; n <= len(msgs); n++ {
			sameParse(t, responsesBody(t, msgs[:n]), rules)
		}
	}
	captures := memotest.Captures(t, "codex", "openai-agents")
	for range 2 {
		for f, b := range captures {
			if _, err := Parse(b, protocol.DefaultTaskRules()); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			sameParse(t, b, protocol.DefaultTaskRules())
		}
	}
}

// TestMemoEdgeCases: runs of assistant items joined across remembered items (a
// shared run must not grow in place), items in other orders and places, the input
// as a string, duplicate keys.
func TestMemoEdgeCases(t *testing.T) {
	rules := []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}, {FirstUserMessage: true}}
	call := `{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}`
	say := `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"},{"type":"refusal","refusal":"r"}]}`
	raw := `{"type":"reasoning","id":"rs","summary":[]}`
	out := `{"type":"function_call_output","call_id":"c1","output":"ok"}`
	user := `{"role":"user","content":"Task: fix it"}`
	bodies := []string{
		`{"input":[` + user + `,` + call + `]}`,
		`{"input":[` + user + `,` + call + `,` + call + `,` + say + `,` + raw + `,` + out + `]}`,
		`{"input":[` + user + `,` + say + `,` + call + `]}`,
		`{"input":[` + user + `,` + raw + `,` + say + `,` + say + `]}`,
		`{"input":[` + call + `,` + user + `,` + call + `,` + out + `,` + call + `]}`,
		`{"instructions":"Task: sys","input":[` + raw + `]}`,
		`{"instructions":null,"input":"Task: s","input":[` + user + `]}`,
		`{"input":[` + user + `],"input":"Task: s"}`,
		`{"input":[1,"x",null,` + user + `,{"type":"x_output","call_id":"c2"},{"type":"additional_tools","role":"developer"}]}`,
		`{"input":[]}`, `{"input":{}}`, `{}`,
	}
	for range 2 { // the second time, every item is a hit
		for _, b := range bodies {
			sameParse(t, []byte(b), rules)
		}
	}
}

// skipPairs: see memotest.SkipPairs.
var skipPairs = memotest.SkipPairs("input",
	`{"role":"user","content":[{"type":"input_text","text":"Task: the remembered message, long enough"}]}`,
	`{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}`)

// TestSkipKnownElements: a body whose items the memo holds reads as it reads
// afresh, and an invalid one is refused with the same error.
func TestSkipKnownElements(t *testing.T) {
	parse := func(b []byte) (*Request, error) { return Parse(b, protocol.DefaultTaskRules()) }
	for _, p := range skipPairs {
		memotest.Primed(t, []byte(p[0]), []byte(p[1]), parse, memotest.Fresh(&memo, parse))
	}
}

// FuzzSkipMatchesScan: whatever the memo holds from one body, another reads as it
// reads afresh, the first time and the second.
func FuzzSkipMatchesScan(f *testing.F) {
	for _, p := range skipPairs {
		f.Add([]byte(p[0]), []byte(p[1]))
	}
	for _, b := range seedBodies {
		f.Add([]byte(b), []byte(b))
	}
	parse := func(b []byte) (*Request, error) {
		return Parse(b, []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}, {FirstUserMessage: true}})
	}
	f.Fuzz(func(t *testing.T, prime, body []byte) {
		memotest.Primed(t, prime, body, parse, memotest.Fresh(&memo, parse))
		memotest.Same(t, body, parse, memotest.Fresh(&memo, parse))
	})
}
