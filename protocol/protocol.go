// Package protocol holds the wire-independent view of an agent's call that every
// protocol adapter (protocol/openai, …) produces: the normalised messages, the task
// text and where it sits in the body, so that the proxy can splice context without
// knowing the wire format.
package protocol

import "errors"

// Message is one chat message normalised to the OpenAI chat shape, whatever the
// protocol it came from. It is what stitching hashes and what replay records.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// ToolCall is one function call made by an assistant message.
type ToolCall struct {
	ID        string `json:"id"`
	Type      string `json:"type"` // "function"
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Usage is the token usage an upstream reported for one call.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// Placement says where spliced context goes.
type Placement string

const (
	// AppendToTask appends the rendered template right after the task text (CLEAR's task ⊕ context).
	AppendToTask Placement = "append_to_task"
	// System appends the rendered template to the system message (or adds one at the front).
	System Placement = "system"
	// NewMessage inserts a new user message holding the rendered template right after the task message.
	NewMessage Placement = "new_message"
)

// Errors an adapter returns for bodies it cannot serve; the proxy maps them to 4xx.
var (
	ErrInvalidJSON     = errors.New("request body is not valid JSON")
	ErrMissingMessages = errors.New("request body has no \"messages\" array")
	ErrNoTask          = errors.New("no task text found by any task rule")
)

// View is what the proxy reads of a call, whatever its wire API.
type View struct {
	Model    string    // as the client named it (for Bedrock: the decoded model id of the path)
	Stream   bool      // the answer is a stream (SSE or AWS event stream)
	Messages []Message // every message normalised; a top-level system prompt becomes messages[0]
	Task     string    // "" when no task rule matched
	// Continues is the provider-side conversation the call continues (the OpenAI
	// Responses API's previous_response_id): the provider already holds the earlier
	// turns, context included, so Messages are only the new ones. "" for stateless calls.
	Continues string
}

// Request is a parsed call of one wire API: a read-only view, the splice that inserts
// context into the original bytes, and a decoder for its answer.
type Request interface {
	// Parsed is the call's view. (Adapters embed View in their request type, so the
	// method cannot be called View.)
	Parsed() *View
	// Splice returns a new body with text inserted per placement; every other byte of
	// body (the body that was parsed) is unchanged.
	Splice(body []byte, p Placement, text string) []byte
	// Decoder returns a fresh decoder for this call's answer.
	Decoder() Decoder
}

// Decoder assembles an answer from the response bytes as they are relayed, in any
// chunking. It never fails: bytes it cannot read leave the answer incomplete.
type Decoder interface {
	Write(p []byte) (int, error)
	// Finished reports that the answer is complete: the final event of a stream, or a
	// whole JSON body.
	Finished() bool
	Message() Message // role "assistant"
	Usage() Usage
}

// Identified is implemented by decoders whose answers carry an id that a later call
// may continue from (OpenAI Responses: previous_response_id). ResponseID is "" until
// the id was read.
type Identified interface {
	ResponseID() string
}
