package openai

import (
	"github.com/camproxy/camproxy/protocol"
)

// Parsed returns the call's view.
func (r *Request) Parsed() *protocol.View { return &r.View }

// Decoder returns a decoder for the answer: SSE when the call streams, else JSON.
func (r *Request) Decoder() protocol.Decoder {
	if r.Stream {
		return &StreamDecoder{}
	}
	return &JSONDecoder{}
}

// JSONDecoder assembles a non-streamed chat.completion; it is finished once the bytes
// written form a complete answer.
type JSONDecoder struct {
	buf    []byte
	done   bool
	msg    protocol.Message
	usage  protocol.Usage
	budget protocol.Budget  // what the answer may keep
	sketch *protocol.Sketch // the whole answer's, when the budget cut it
}

// Write buffers p and decodes once the body is a whole JSON document. A body that
// comes whole in one write (a buffered answer, as the proxy relays it) is decoded
// where it is, without a copy.
func (d *JSONDecoder) Write(p []byte) (int, error) {
	if d.done {
		return len(p), nil
	}
	data := p
	if len(d.buf) > 0 {
		d.buf = append(d.buf, p...)
		data = d.buf
	}
	if msg, usage, ok, err := decodeAnswer(data); ok && err == nil {
		d.sketch = d.budget.Trim(&msg)
		d.msg, d.usage, d.done = msg, usage, true
		d.buf = nil
		return len(p), nil
	}
	if len(d.buf) == 0 {
		d.buf = append(d.buf, p...)
	}
	return len(p), nil
}

// Finished reports whether a complete answer was decoded.
func (d *JSONDecoder) Finished() bool { return d.done }

// Message is the decoded answer.
func (d *JSONDecoder) Message() protocol.Message { return d.msg }

// Usage is the decoded token usage.
func (d *JSONDecoder) Usage() protocol.Usage { return d.usage }

// Limit bounds the bytes of the answer kept (see protocol.Budget).
func (d *JSONDecoder) Limit(n int) { d.budget.Limit(n) }

// Truncated is how many bytes of the answer were dropped for the limit.
func (d *JSONDecoder) Truncated() int64 { return d.budget.Truncated() }

// Sketch is the whole answer's sketch; nil unless the budget cut it.
func (d *JSONDecoder) Sketch() *protocol.Sketch { return d.sketch }
