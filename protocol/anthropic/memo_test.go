package anthropic

import (
	"testing"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/internal/memotest"
	"github.com/camproxy/camproxy/protocol/openai"
)

// sameParse fails unless body reads from the memo as it reads afresh.
func sameParse(t *testing.T, body []byte, rules []protocol.TaskRule) {
	t.Helper()
	parse := func(b []byte) (*Request, error) { return Parse(b, rules) }
	memotest.Same(t, body, parse, func(b []byte) (*Request, error) {
		saved := memo
		memo = protocol.NewMemo[*element](0) // remembers nothing
		defer func() { memo = saved }()
		return parse(b)
	})
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

func FuzzMemoMatchesFresh(f *testing.F) {
	f.Add([]byte(`{"system":"s","messages":[{"role":"user","content":"Task: a"},{"role":"assistant","content":[{"type":"tool_use","id":"1","name":"f","input":{}}]}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"1","content":"x"},{"type":"document","source":{"type":"text","data":"d"}}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		sameParse(t, body, []protocol.TaskRule{{FirstUserMessage: true}})
		sameParse(t, body, []protocol.TaskRule{{FirstUserMessage: true}})
	})
}
