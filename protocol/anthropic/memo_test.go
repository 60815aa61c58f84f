package anthropic

import (
	"regexp"
	"testing"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/internal/memotest"
	"github.com/camproxy/camproxy/protocol/openai"
)

// sameParse fails unless body reads from the memo as it reads afresh.
func sameParse(t *testing.T, body []byte, rules []protocol.TaskRule) {
	t.Helper()
	parse := func(b []byte) (*Request, error) { return Parse(b, rules) }
	memotest.Same(t, body, parse, memotest.Fresh(&memo, parse))
}

// TestMemoMatchesFresh: a body read from the memo reads as it reads afresh — tool
// results split into messages, media, the same element at another place, and an
// element whose bytes another protocol's memo read first (each adapter reads bytes
// its own way, so each has its own memo).
func TestMemoMatchesFresh(t *testing.T) {
	rules := []protocol.TaskRule{{FirstUserMessage: true}}
	shared := `{"role":"user","content":[{"type":"text","text":"Fix it"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}`
	if _, err := openai.Parse([]byte(`{"messages":[`+shared+`]}`), rules); err != nil {
		t.Fatal(err)
	}
	bodies := []string{
		`{"model":"claude","system":"You are a coder. Today is 2025-01-02.","messages":[` + shared + `]}`,
		`{"system":[{"type":"text","text":"s"}],"messages":[` + shared + `,{"role":"assistant","content":[{"type":"thinking","thinking":"t"},{"type":"tool_use","id":"t1","name":"f","input":{"b":1,"a":2}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"},{"type":"text","text":"<system-reminder>r</system-reminder>go on"}]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"a"}]}]}]}`,
		`{"messages":[1,null,{"role":"user","content":"x"}]}`,
		`{"messages":[]}`,
	}
	for range 2 {
		for _, b := range bodies {
			sameParse(t, []byte(b), rules)
		}
	}
}

// TestMemoMatchesRealData: every turn of the real tau-bench trajectories as a
// Messages API body, and the bodies Claude Code sent (harness captures), read from
// the memo exactly as afresh.
func TestMemoMatchesRealData(t *testing.T) {
	rules := []protocol.TaskRule{{Regex: regexp.MustCompile(`user_id is (\w+)`)}, {FirstUserMessage: true}}
	for _, msgs := range memotest.Trajectories(t, 8) {
		for n := 2; n <= len(msgs); n++ {
			sameParse(t, messagesBody(t, msgs[:n]), rules)
		}
	}
	captures := memotest.Captures(t, "claude-code")
	for range 2 {
		for f, b := range captures {
			if _, err := Parse(b, protocol.DefaultTaskRules()); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			sameParse(t, b, protocol.DefaultTaskRules())
		}
	}
}

// skipPairs: see memotest.SkipPairs.
var skipPairs = memotest.SkipPairs("messages",
	`{"role":"user","content":[{"type":"text","text":"Task: the remembered message, long enough"}]}`,
	`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]}`)

// TestSkipKnownElements: a body whose elements the memo holds reads as it reads
// afresh, and an invalid one is refused with the same error.
func TestSkipKnownElements(t *testing.T) {
	parse := func(b []byte) (*Request, error) { return Parse(b, protocol.DefaultTaskRules()) }
	for _, p := range skipPairs {
		memotest.Primed(t, []byte(p[0]), []byte(p[1]), parse, memotest.Fresh(&memo, parse))
	}
}

// FuzzSkipMatchesScan: whatever the memo holds from one body, another reads as it
// reads afresh (the elements the memo vouches for are skipped, the rest scanned).
func FuzzSkipMatchesScan(f *testing.F) {
	for _, p := range skipPairs {
		f.Add([]byte(p[0]), []byte(p[1]))
	}
	parse := func(b []byte) (*Request, error) { return Parse(b, []protocol.TaskRule{{FirstUserMessage: true}}) }
	f.Fuzz(func(t *testing.T, prime, body []byte) {
		memotest.Primed(t, prime, body, parse, memotest.Fresh(&memo, parse))
	})
}

func FuzzMemoMatchesFresh(f *testing.F) {
	f.Add([]byte(`{"system":"s","messages":[{"role":"user","content":"Task: a"},{"role":"assistant","content":[{"type":"tool_use","id":"1","name":"f","input":{}}]}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"1","content":"x"},{"type":"document","source":{"type":"text","data":"d"}}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		sameParse(t, body, []protocol.TaskRule{{FirstUserMessage: true}})
		sameParse(t, body, []protocol.TaskRule{{FirstUserMessage: true}})
	})
}
