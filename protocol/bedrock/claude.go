package bedrock

import (
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/anthropic"
)

// ClaudeRequest is a parsed InvokeModel body of an Anthropic Claude model: an
// Anthropic Messages body (anthropic_version instead of model), read, spliced and
// viewed by the anthropic adapter. Only its answer differs: a Messages JSON body,
// or Anthropic stream events inside the chunks of an AWS event stream.
type ClaudeRequest struct {
	*anthropic.Request
	op Op
}

// parseClaude reads a Claude InvokeModel body.
func parseClaude(body []byte, rules []protocol.TaskRule, modelID string, op Op) (*ClaudeRequest, error) {
	r, err := anthropic.ParseBody(body, rules, modelID, op.Stream())
	if err != nil {
		return nil, err
	}
	return &ClaudeRequest{Request: r, op: op}, nil
}

// Decoder returns a decoder for the answer: the Anthropic events in the chunks of
// the event stream for InvokeModelWithResponseStream, else the Messages JSON body.
func (r *ClaudeRequest) Decoder() protocol.Decoder {
	if r.op == InvokeStream {
		return newStreamDecoder(streamClaude)
	}
	return newJSONDecoder(decodeClaudeResponse)
}

// decodeClaudeResponse reads an Anthropic Messages answer; ok is false for a body
// that holds no message, such as an error.
func decodeClaudeResponse(body []byte) (protocol.Message, protocol.Usage, bool) {
	m, u, err := anthropic.DecodeResponse(body)
	if err != nil {
		return protocol.Message{}, protocol.Usage{}, false
	}
	if m.Role == "" {
		m.Role = "assistant"
	}
	return m, u, true
}
