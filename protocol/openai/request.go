// Package openai is the adapter for OpenAI chat completions: it reads a request body
// into a protocol view, splices context into it by byte insertion, and decodes answers
// (JSON and SSE streams) into normalised messages.
//
// Nothing here re-marshals a body: reading goes through gjson, which reports the raw
// byte offset of every value, and writing is a single insertion at such an offset, so
// that every byte the client sent reaches the upstream unchanged.
package openai

import (
	"bytes"
	"fmt"

	"github.com/camproxy/camproxy/protocol"
	"github.com/tidwall/gjson"
)

// maxDepth bounds the nesting of a JSON document we accept. gjson validates
// recursively, so a body of a few MiB of '[' would otherwise grow the goroutine
// stack by gigabytes and kill the process; encoding/json uses the same limit.
const maxDepth = 10000

// Request is the read-only view of a /v1/chat/completions body.
type Request struct {
	protocol.View // Model, Stream, Messages (normalised), Task ("" when no rule matched)

	// bodyLen is the length of the parsed body: Splice refuses a different body
	// rather than inserting at offsets that mean nothing in it.
	bodyLen int
	// arrOpen is the offset of the '[' that opens the messages array.
	arrOpen int
	// task says where the task sits; meaningful only when Task != "".
	task taskSpot
	// sys says where the System placement appends.
	sys anchor
}

// taskSpot locates the task inside the raw body.
type taskSpot struct {
	msg    int // index of the task message in messages
	part   int // index of the content part holding the anchor, -1 for string content
	at     int // raw offset right after the task text (AppendToTask inserts here)
	msgEnd int // raw offset right after the task message object (NewMessage inserts here)
}

// Parse reads an OpenAI chat completions body. rules are tried in order; the first
// that matches sets Task. A body whose task no rule finds parses fine with Task "".
func Parse(body []byte, rules []protocol.TaskRule) (*Request, error) {
	if err := validate(body); err != nil {
		return nil, err
	}
	// One copy of the body: every string of the view aliases it, so the view stays
	// valid after the caller reuses its buffer, at the cost of one allocation.
	js := string(body)
	root := gjson.Result{Type: gjson.JSON, Raw: js}
	if firstByte(js) != '{' {
		return nil, fmt.Errorf("%w: the body is not a JSON object", protocol.ErrMissingMessages)
	}
	r := &Request{bodyLen: len(body), task: taskSpot{msg: -1}}
	var msgs gjson.Result
	// Last key wins on duplicates, as in the Python and Go decoders upstream.
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "model":
			r.Model = v.Str // "" unless a string
		case "stream":
			r.Stream = v.Type == gjson.True
		case "messages":
			msgs = v
		}
		return true
	})
	if !msgs.IsArray() {
		return nil, fmt.Errorf("%w: \"messages\" is missing or not an array", protocol.ErrMissingMessages)
	}
	r.arrOpen = msgs.Index
	segs := r.readMessages(msgs)
	r.findTask(rules, segs)
	return r, nil
}

// validate reports whether body is one JSON document that gjson may walk safely.
func validate(body []byte) error {
	if tooDeep(body) {
		return fmt.Errorf("%w: nested deeper than %d levels", protocol.ErrInvalidJSON, maxDepth)
	}
	if !gjson.ValidBytes(body) {
		return protocol.ErrInvalidJSON
	}
	return nil
}

// tooDeep reports whether body nests arrays and objects deeper than maxDepth. It
// skips strings with IndexByte, so it costs little next to the parse itself.
func tooDeep(body []byte) bool {
	if len(body) <= maxDepth {
		return false // a document needs at least one byte per level
	}
	depth := 0
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '"':
			i = stringEnd(body, i+1)
		case '[', '{':
			depth++
			if depth > maxDepth {
				return true
			}
		case ']', '}':
			depth--
		}
	}
	return false
}

// stringEnd returns the offset of the quote that closes the string whose contents
// start at i, or len(b) when it is unterminated.
func stringEnd(b []byte, i int) int {
	for i < len(b) {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		q := i + j
		// The quote is escaped when an odd number of backslashes precede it.
		n := 0
		for k := q - 1; k >= i && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q
		}
		i = q + 1
	}
	return len(b)
}

// firstByte returns the first non-whitespace byte of s, or 0.
func firstByte(s string) byte {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return s[i]
		}
	}
	return 0
}
