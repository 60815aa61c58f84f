// Package protocol holds the wire-independent view of an agent's call that every
// protocol adapter (protocol/openai, …) produces: the normalised messages, the task
// text and where it sits in the body, so that the proxy can splice context without
// knowing the wire format.
package protocol

import (
	"errors"
	"fmt"
)

// Message is one chat message normalised to the OpenAI chat shape, whatever the
// protocol it came from. It is what stitching hashes and what replay records. Its
// JSON is the OpenAI chat message (see MarshalJSON); stitching hashes only Role,
// Content, ToolCalls and ToolCallID, so Parts and Raw never change an episode's chain.
type Message struct {
	Role string
	// Content is the message's text: a string content as is, the text parts of a
	// list joined with "\n".
	Content string
	// Parts are the content parts in order, text parts included, when the message
	// has a part other than text (an image, audio, a file…); nil otherwise, and then
	// the content is the string Content.
	Parts      []Part
	ToolCalls  []ToolCall
	ToolCallID string
	Name       string
	// Raw holds, verbatim and in order, the wire's items and blocks of this message
	// that the chat shape cannot hold: reasoning, thinking, server-side tool calls and
	// their results, item types camproxy does not know. Kept rather than dropped so
	// that a trajectory says everything that happened.
	Raw []RawJSON
}

// ToolCall is one tool call made by an assistant message.
type ToolCall struct {
	ID string
	// Type is "function", or "custom" for a freeform tool call (the Responses API's
	// custom_tool_call, such as Codex's apply_patch), whose input is plain text.
	Type string
	Name string
	// Arguments is a function call's JSON arguments, or a custom call's input.
	Arguments string
}

// Tool call types.
const (
	ToolFunction = "function"
	ToolCustom   = "custom"
)

// RawJSON is one JSON value as the wire carried it.
type RawJSON string

// Part is one content part in the OpenAI chat shape.
type Part struct {
	// Type is text, refusal, image_url, input_audio or file; a part of another type
	// is kept verbatim in Raw.
	Type  string
	Text  string // text and refusal parts
	Media *Media // image_url, input_audio and file parts
	Raw   RawJSON
}

// Part types.
const (
	PartText       = "text"
	PartRefusal    = "refusal"
	PartImage      = "image_url"
	PartInputAudio = "input_audio"
	PartFile       = "file"
)

// Media is what a part says of an image, audio or file: where it is, or its bytes.
// The replay buffer keeps a hash of the bytes rather than the bytes themselves
// unless told to keep them (replay.keep_media; see StripMedia).
type Media struct {
	URL       string // where the media is: http(s), s3://, gs://…
	FileID    string // a provider's file id
	Data      string // the bytes, base64-encoded
	SHA256    string // hex SHA-256 of the bytes, set when Data was dropped
	MediaType string // MIME type (image/png, application/pdf, audio/wav…)
	Filename  string
	Format    string // input_audio's format (wav, mp3)
	Detail    string // image_url's detail (low, high, auto)
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

// Errors an adapter returns for bodies it cannot serve; the proxy answers them 400
// with the error's text. Every adapter returns the same one for the same condition
// (jsontext.Object, Missing).
var (
	// ErrInvalidJSON: the body is not one valid JSON document (its syntax, nesting
	// deeper than jsontext.MaxDepth, bytes that are not UTF-8).
	ErrInvalidJSON = errors.New("request body is not valid JSON")
	// ErrMissingMessages: the body is JSON but holds no conversation: it is not an
	// object, or its API's member for the messages ("messages"; Gemini's "contents",
	// Llama's "prompt") is absent or of another type.
	ErrMissingMessages = errors.New("request body has no messages")
	ErrNoTask          = errors.New("no task text found by any task rule")
)

// Missing is the error of a body, a JSON object, whose member name that holds the
// conversation is absent or not kind ("an array", "a string").
func Missing(name, kind string) error {
	return fmt.Errorf("%w: %q is missing or not %s", ErrMissingMessages, name, kind)
}

// View is what the proxy reads of a call, whatever its wire API.
type View struct {
	Model    string    // as the client named it (for Bedrock: the decoded model id of the path)
	Stream   bool      // the answer is a stream (SSE or AWS event stream)
	Messages []Message // every message normalised; a top-level system prompt becomes messages[0]
	Task     string    // "" when no task rule matched
	// TaskRule names the rule that found Task ("task.rules[0]: first_user_message");
	// "" when none did.
	TaskRule string
	// Continues is the provider-side conversation the call continues (the OpenAI
	// Responses API's previous_response_id): the provider already holds the earlier
	// turns, context included, so Messages are only the new ones. "" for stateless calls.
	Continues string
	// Slots, when not nil, holds one per message (Slots[i] for Messages[i]; nil for a
	// message read afresh): where a consumer remembers what it derives from a message
	// that calls resend (see Slot). Adapters that remember what they read set it.
	Slots []*Slot
	// Side holds what side-call rules read of the body beyond the messages (tools
	// offered, output cap) when the adapter collected it during its parse
	// (SideReader); MatchSideCall reads the body otherwise.
	Side SideFacts
}

// Request is a parsed call of one wire API: a read-only view, the splice that inserts
// context into the original bytes, and a decoder for its answer.
type Request interface {
	// Parsed is the call's view. (Adapters embed View in their request type, so the
	// method cannot be called View.)
	Parsed() *View
	// SpliceTo appends to dst body (the body that was parsed) with text inserted
	// per placement, every other byte unchanged (body as it is when nothing is
	// inserted), and returns the extended slice: the caller splices into a buffer it
	// reuses rather than a new one per call. body is not modified.
	SpliceTo(dst, body []byte, p Placement, text string) []byte
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
	// Limit bounds the bytes of the answer the decoder keeps for Message (see
	// Budget; n <= 0: DefaultMaxAnswer). Call it before the first Write. It bounds
	// only the decoded copy: Finished and Usage see every event.
	Limit(n int)
	// Truncated is how many bytes of the answer Message lacks for the limit: 0
	// when it is whole.
	Truncated() int64
	// Sketch is the sketch of the whole answer, kept whatever the limit cut, for
	// stitching the call after a truncated one; it may be nil when Truncated is 0.
	Sketch() *Sketch
}

// Identified is implemented by decoders whose answers carry an id that a later call
// may continue from (OpenAI Responses: previous_response_id). ResponseID is "" until
// the id was read.
type Identified interface {
	ResponseID() string
}
