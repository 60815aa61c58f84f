package anthropic

import (
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/sse"
)

// StreamDecoder consumes the raw SSE bytes of a streamed Messages answer in arbitrary
// chunk boundaries (a tee of what goes to the client) and assembles the answer with
// an EventDecoder. The zero value is ready to use. It is not safe for concurrent use.
type StreamDecoder struct {
	sse    sse.Reader
	events EventDecoder
}

// Write feeds the next bytes of the stream. It never fails.
func (d *StreamDecoder) Write(p []byte) (int, error) {
	if d.sse.Event == nil {
		d.sse.Event = func(name, data []byte) { d.events.event(data, name) }
	}
	return d.sse.Write(p)
}

// Message returns the answer assembled so far (see EventDecoder.Message).
func (d *StreamDecoder) Message() protocol.Message { return d.events.Message() }

// Usage returns the usage reported so far (see EventDecoder.Usage).
func (d *StreamDecoder) Usage() protocol.Usage { return d.events.Usage() }

// Limit bounds the bytes of the answer kept (see protocol.Budget).
func (d *StreamDecoder) Limit(n int) { d.events.Limit(n) }

// Truncated is how many bytes of the answer were dropped for the limit.
func (d *StreamDecoder) Truncated() int64 { return d.events.Truncated() }

// Sketch is the sketch of the whole answer so far (see EventDecoder.Sketch).
func (d *StreamDecoder) Sketch() *protocol.Sketch { return d.events.Sketch() }

// Finished reports whether the message_stop event arrived and no error event did.
func (d *StreamDecoder) Finished() bool { return d.events.Finished() }
