package responses

import (
	"encoding/json"
	"testing"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/internal/memotest"
)

// responsesBody writes chat messages as a Responses API body: the system message as
// instructions, tool calls as function_call items, tool results as
// function_call_output items.
func responsesBody(tb testing.TB, msgs []memotest.Msg) []byte {
	tb.Helper()
	type item struct {
		Type      string `json:"type,omitempty"`
		Role      string `json:"role,omitempty"`
		Content   any    `json:"content,omitempty"`
		CallID    string `json:"call_id,omitempty"`
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments,omitempty"`
		Output    string `json:"output,omitempty"`
	}
	body := struct {
		Model        string `json:"model"`
		Instructions string `json:"instructions,omitempty"`
		Input        []item `json:"input"`
		Store        bool   `json:"store"`
	}{Model: "gpt-5", Input: []item{}}
	for _, m := range msgs {
		switch {
		case m.Role == "system":
			body.Instructions = m.Content
		case m.Role == "tool":
			body.Input = append(body.Input, item{Type: "function_call_output", CallID: m.CallID, Output: m.Content})
		case m.Role == "assistant":
			if m.Content != "" {
				body.Input = append(body.Input, item{Type: "message", Role: "assistant",
					Content: []map[string]string{{"type": "output_text", "text": m.Content}}})
			}
			for _, c := range m.Calls {
				body.Input = append(body.Input, item{Type: "function_call", CallID: c.ID, Name: c.Name, Arguments: c.Arguments})
			}
		default:
			body.Input = append(body.Input, item{Role: m.Role, Content: m.Content})
		}
	}
	b, err := json.Marshal(body)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkTurns: see memotest.BenchTurns.
func BenchmarkTurns(b *testing.B) {
	memotest.BenchTurns(b, responsesBody, func(body []byte) (*Request, error) { return Parse(body, protocol.DefaultTaskRules()) })
}
