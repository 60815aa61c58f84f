package anthropic

import (
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
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
		d.sse.Oversized = d.onCut
	}
	return d.sse.Write(p)
}

// Message returns the answer assembled so far (see EventDecoder.Message).
func (d *StreamDecoder) Message() protocol.Message { return d.events.Message() }

// Usage returns the usage reported so far (see EventDecoder.Usage).
func (d *StreamDecoder) Usage() protocol.Usage { return d.events.Usage() }

// Limit bounds the bytes of the answer kept (see protocol.Budget), and with them
// the event the framer holds (protocol.EventBound).
func (d *StreamDecoder) Limit(n int) {
	d.events.Limit(n)
	d.sse.Max = protocol.EventBound(n)
}

// onCut applies an event too long to hold, of which the framer kept the head and the
// tail. Only a content block's start or delta is ever so long (message_start,
// message_delta and message_stop carry a few fields): it is lost, and the answer cut
// there.
func (d *StreamDecoder) onCut(name []byte, c sse.Cut) {
	t := string(name)
	if typ := jsontext.HeadMember(c.Head, "type"); typ.Type == gjson.String {
		t = typ.Str
	}
	switch t {
	case "content_block_start", "content_block_delta":
		d.events.Lost(c.Size)
	}
}

// Truncated is how many bytes of the answer were dropped for the limit.
func (d *StreamDecoder) Truncated() int64 { return d.events.Truncated() }

// Sketch is the sketch of the whole answer so far (see EventDecoder.Sketch).
func (d *StreamDecoder) Sketch() *protocol.Sketch { return d.events.Sketch() }

// Finished reports whether the message_stop event arrived and no error event did.
func (d *StreamDecoder) Finished() bool { return d.events.Finished() }
