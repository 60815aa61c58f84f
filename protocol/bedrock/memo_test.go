package bedrock

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/internal/memotest"
)

// tauConverse writes chat messages as a Converse body: the system message as the
// system blocks, tool calls as toolUse blocks, each tool result as a user message's
// toolResult block.
func tauConverse(tb testing.TB, msgs []memotest.Msg) []byte {
	tb.Helper()
	type text struct {
		Text string `json:"text"`
	}
	type message struct {
		Role    string `json:"role"`
		Content []any  `json:"content"`
	}
	body := struct {
		System   []text    `json:"system,omitempty"`
		Messages []message `json:"messages"`
	}{Messages: []message{}}
	for _, m := range msgs {
		switch {
		case m.Role == "system":
			body.System = append(body.System, text{m.Content})
		case m.Role == "tool":
			body.Messages = append(body.Messages, message{"user", []any{map[string]any{"toolResult": map[string]any{
				"toolUseId": m.CallID, "content": []text{{m.Content}}}}}})
		default:
			var content []any
			if m.Content != "" {
				content = append(content, text{m.Content})
			}
			for _, c := range m.Calls {
				in := json.RawMessage(c.Arguments)
				if !json.Valid(in) {
					in = json.RawMessage(`{}`)
				}
				content = append(content, map[string]any{"toolUse": map[string]any{"toolUseId": c.ID, "name": c.Name, "input": in}})
			}
			body.Messages = append(body.Messages, message{m.Role, content})
		}
	}
	b, err := json.Marshal(body)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// converse parses a Converse call's body (memo included).
func converse(rules []protocol.TaskRule) func([]byte) (*ConverseRequest, error) {
	return func(b []byte) (*ConverseRequest, error) { return parseConverse(b, rules, famUnknown, Converse) }
}

// sameParse fails unless body reads from the memo as it reads afresh.
func sameParse(t *testing.T, body []byte, rules []protocol.TaskRule) {
	t.Helper()
	memotest.Same(t, body, converse(rules), memotest.Fresh(&convMemo, converse(rules)))
}

// TestMemoMatchesRealData: every turn of the real tau-bench trajectories as a
// Converse body reads from the memo exactly as afresh.
func TestMemoMatchesRealData(t *testing.T) {
	rules := []protocol.TaskRule{{Regex: regexp.MustCompile(`user_id is (\w+)`)}, {FirstUserMessage: true}}
	for _, msgs := range memotest.Trajectories(t, 8) {
		for n := 2; n <= len(msgs); n++ {
			body := tauConverse(t, msgs[:n])
			if _, err := converse(rules)(body); err != nil {
				t.Fatal(err)
			}
			sameParse(t, body, rules)
		}
	}
}

// TestMemoEdgeCases: tool results split into messages (alone, and before text),
// the first message's content array at another place, media, messages that are not
// objects, duplicate keys.
func TestMemoEdgeCases(t *testing.T) {
	rules := []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}, {FirstUserMessage: true}}
	user := `{"role":"user","content":[{"text":"Task: fix it"},{"image":{"format":"png","source":{"bytes":"AA=="}}}]}`
	call := `{"role":"assistant","content":[{"reasoningContent":{"reasoningText":{"text":"t"}}},{"toolUse":{"toolUseId":"t1","name":"f","input":{"b":1,"a":2}}}]}`
	res := `{"role":"user","content":[{"toolResult":{"toolUseId":"t1","content":[{"json":{"a":1}},{"text":"x"}]}}]}`
	resText := `{"role":"user","content":[{"toolResult":{"toolUseId":"t1","content":[{"text":"x"}]}},{"text":"Task: go on"}]}`
	bodies := []string{
		`{"system":[{"text":"Task: sys"}],"messages":[` + user + `,` + call + `,` + res + `]}`,
		`{"messages":[` + res + `,` + user + `,` + call + `,` + resText + `]}`,
		`{"messages":[` + resText + `]}`,
		`{"system":"s","messages":[1,null,{"role":"user","content":"x"},` + user + `]}`,
		`{"messages":[` + user + `],"messages":[` + call + `,` + user + `]}`,
		`{"system":[],"messages":[]}`, `{"messages":{}}`,
	}
	for range 2 { // the second time, every element is a hit
		for _, b := range bodies {
			sameParse(t, []byte(b), rules)
		}
	}
}

// skipPairs: see memotest.SkipPairs.
var skipPairs = memotest.SkipPairs("messages",
	`{"role":"user","content":[{"text":"Task: the remembered message, long enough to index"}]}`,
	`{"role":"assistant","content":[{"toolUse":{"toolUseId":"t1","name":"f","input":{}}}]}`)

// TestSkipKnownElements: a body whose elements the memo holds reads as it reads
// afresh, and an invalid one is refused with the same error.
func TestSkipKnownElements(t *testing.T) {
	parse := converse(protocol.DefaultTaskRules())
	for _, p := range skipPairs {
		memotest.Primed(t, []byte(p[0]), []byte(p[1]), parse, memotest.Fresh(&convMemo, parse))
	}
}

// FuzzSkipMatchesScan: whatever the memo holds from one body, another reads as it
// reads afresh, the first time and the second.
func FuzzSkipMatchesScan(f *testing.F) {
	for _, p := range skipPairs {
		f.Add([]byte(p[0]), []byte(p[1]))
	}
	parse := converse(fuzzRules)
	f.Fuzz(func(t *testing.T, prime, body []byte) {
		memotest.Primed(t, prime, body, parse, memotest.Fresh(&convMemo, parse))
		memotest.Same(t, body, parse, memotest.Fresh(&convMemo, parse))
	})
}
