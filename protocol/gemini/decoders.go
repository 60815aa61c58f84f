package gemini

import (
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
	"github.com/camproxy/camproxy/protocol/sse"
)

// common is what every decoder reports of its answer.
type common struct{ a answer }

// Message returns the answer assembled so far (role "assistant").
func (d *common) Message() protocol.Message { return d.a.message() }

// Usage returns the usage reported so far.
func (d *common) Usage() protocol.Usage { return d.a.usage }

// Limit bounds the bytes of the answer kept (see protocol.Budget).
func (d *common) Limit(n int) { d.a.budget.Limit(n) }

// Truncated is how many bytes of the answer were dropped for the limit.
func (d *common) Truncated() int64 { return d.a.budget.Truncated() }

// Sketch is the sketch of the whole answer so far, whatever the budget kept.
func (d *common) Sketch() *protocol.Sketch { return &d.a.sketch }

// JSONDecoder assembles the answer of generateContent: one JSON object. It is
// finished once the bytes written form a whole answer with a finish reason.
type JSONDecoder struct {
	common
	buf  []byte
	read bool // the body was whole and read
	lost bool // the body outgrew the buffer
}

// maxBody bounds the body a JSONDecoder buffers beside the answer budget's bound:
// a body past it is not read rather than the memory unbounded.
const maxBody = 64 << 20

// Write buffers p and reads the body once it is a whole JSON document; a body that
// comes whole in one write is read where it is.
func (d *JSONDecoder) Write(p []byte) (int, error) {
	if d.read || d.lost {
		return len(p), nil
	}
	data := p
	if len(d.buf) > 0 {
		d.buf = append(d.buf, p...)
		data = d.buf
	}
	if jsontext.Validate(data) == nil {
		d.a.chunk(data)
		d.read, d.buf = true, nil
		return len(p), nil
	}
	if len(data) > max(maxBody, protocol.EventBound(0)) {
		d.a.budget.Lost(int64(len(data)))
		d.lost, d.buf = true, nil
		return len(p), nil
	}
	if len(d.buf) == 0 {
		d.buf = append(d.buf, p...)
	}
	return len(p), nil
}

// Finished reports whether a whole answer with a finish reason was read, and no
// error body.
func (d *JSONDecoder) Finished() bool { return d.read && d.a.done && !d.a.failed }

// StreamDecoder assembles the answer of streamGenerateContent?alt=sse: each event's
// data is one GenerateContentResponse chunk. The zero value is ready to use. It is
// not safe for concurrent use.
type StreamDecoder struct {
	common
	sse sse.Reader
}

// Write feeds the next bytes of the stream, in any chunking. It never fails.
func (d *StreamDecoder) Write(p []byte) (int, error) {
	if d.sse.Event == nil {
		d.sse.Event = func(_, data []byte) { d.a.chunk(data) }
		// A chunk too long to hold carried answer text: the answer is cut there.
		d.sse.Oversized = func(_ []byte, c sse.Cut) { d.a.budget.Lost(c.Size) }
	}
	return d.sse.Write(p)
}

// Limit bounds the bytes of the answer kept, and with them the event the framer
// holds (protocol.EventBound).
func (d *StreamDecoder) Limit(n int) {
	d.a.budget.Limit(n)
	d.sse.Max = protocol.EventBound(n)
}

// Finished reports whether a chunk with a finish reason arrived and no error did.
func (d *StreamDecoder) Finished() bool { return d.a.done && !d.a.failed }

// ArrayDecoder assembles the answer of streamGenerateContent without alt: a JSON
// array whose elements (GenerateContentResponse chunks) the API writes as they are
// made, `[{…}` then `,\r\n{…}` then `]`. It reads each element as soon as its
// closing brace arrives, holding only the element being read (at most
// protocol.EventBound of the limit; a longer one is skipped and the answer cut
// there). A bare object where the array should be (an error body) is read as an
// element. The zero value is ready to use. It is not safe for concurrent use.
type ArrayDecoder struct {
	common
	state  arrayState
	depth  int  // nesting inside the element
	inStr  bool // inside a string of the element
	escape bool // the last byte was a backslash inside a string
	elem   []byte
	size   int64 // bytes of the element so far
	max    int
	closed bool // the array's ']' arrived
	bare   bool // the element is a bare object, not in an array
}

type arrayState uint8

const (
	arrayStart arrayState = iota // before '[' (or a bare object)
	arrayNext                    // between elements: ',', whitespace, ']' or '{'
	arrayElem                    // inside an element
	arrayDone                    // after ']', or after a bare object; or the framing is broken
)

// Limit bounds the bytes of the answer kept, and with them the element held.
func (d *ArrayDecoder) Limit(n int) {
	d.a.budget.Limit(n)
	d.max = protocol.EventBound(n)
}

// Write feeds the next bytes of the array, in any chunking. It never fails.
func (d *ArrayDecoder) Write(p []byte) (int, error) {
	if d.max == 0 {
		d.max = protocol.EventBound(0)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch d.state {
		case arrayStart, arrayNext:
			switch {
			case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			case c == '[' && d.state == arrayStart:
				d.state = arrayNext
			case c == ',' && d.state == arrayNext:
			case c == ']' && d.state == arrayNext:
				d.state, d.closed = arrayDone, true
			case c == '{':
				d.bare = d.state == arrayStart
				d.state, d.depth, d.size = arrayElem, 0, 0
				i = d.element(p, i)
			default:
				d.state = arrayDone // not the framing: nothing more is read
			}
		case arrayElem:
			i = d.element(p, i)
		case arrayDone:
			return len(p), nil
		}
	}
	return len(p), nil
}

// element reads the bytes of the element from p[i] up to its end or p's, and
// returns the offset of the last byte it read.
func (d *ArrayDecoder) element(p []byte, i int) int {
	start := i
	for ; i < len(p); i++ {
		c := p[i]
		switch {
		case d.inStr:
			switch {
			case d.escape:
				d.escape = false
			case c == '\\':
				d.escape = true
			case c == '"':
				d.inStr = false
			}
			continue
		case c == '"':
			d.inStr = true
		case c == '{' || c == '[':
			d.depth++
		case c == '}' || c == ']':
			d.depth--
		}
		if d.depth == 0 {
			d.keep(p[start : i+1])
			d.finish()
			return i
		}
	}
	d.keep(p[start:])
	return len(p) - 1
}

// keep holds the bytes of the element, as long as it stays within the bound.
func (d *ArrayDecoder) keep(b []byte) {
	d.size += int64(len(b))
	if d.size <= int64(d.max) {
		d.elem = append(d.elem, b...)
	} else {
		d.elem = d.elem[:0]
	}
}

// finish reads the element just closed.
func (d *ArrayDecoder) finish() {
	if d.size > int64(d.max) {
		d.a.budget.Lost(d.size)
	} else {
		d.a.chunk(d.elem)
	}
	d.elem = d.elem[:0]
	d.state = arrayNext
	if d.bare {
		d.state = arrayDone
	}
}

// Finished reports whether the array closed after a chunk with a finish reason,
// and no error arrived.
func (d *ArrayDecoder) Finished() bool { return d.closed && d.a.done && !d.a.failed }
