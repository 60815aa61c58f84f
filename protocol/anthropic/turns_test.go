package anthropic

import (
	"encoding/json"
	"testing"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/internal/memotest"
)

// messagesBody writes chat messages as a Messages API body: the system message as
// "system", tool calls as tool_use blocks, each tool result as a user message's
// tool_result block.
func messagesBody(tb testing.TB, msgs []memotest.Msg) []byte {
	tb.Helper()
	type block struct {
		Type      string          `json:"type"`
		Text      string          `json:"text,omitempty"`
		ID        string          `json:"id,omitempty"`
		Name      string          `json:"name,omitempty"`
		Input     json.RawMessage `json:"input,omitempty"`
		ToolUseID string          `json:"tool_use_id,omitempty"`
		Content   string          `json:"content,omitempty"`
	}
	type message struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	}
	body := struct {
		Model    string    `json:"model"`
		System   string    `json:"system,omitempty"`
		Messages []message `json:"messages"`
	}{Model: "claude-sonnet-4-5", Messages: []message{}}
	for _, m := range msgs {
		switch {
		case m.Role == "system":
			body.System = m.Content
		case m.Role == "tool":
			body.Messages = append(body.Messages, message{"user", []block{{Type: "tool_result", ToolUseID: m.CallID, Content: m.Content}}})
		case len(m.Calls) > 0:
			var bs []block
			if m.Content != "" {
				bs = append(bs, block{Type: "text", Text: m.Content})
			}
			for _, c := range m.Calls {
				in := json.RawMessage(c.Arguments)
				if !json.Valid(in) {
					in = json.RawMessage(`{}`)
				}
				bs = append(bs, block{Type: "tool_use", ID: c.ID, Name: c.Name, Input: in})
			}
			body.Messages = append(body.Messages, message{"assistant", bs})
		default:
			body.Messages = append(body.Messages, message{m.Role, m.Content})
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
	memotest.BenchTurns(b, messagesBody, func(body []byte) (*Request, error) { return Parse(body, protocol.DefaultTaskRules()) })
}
