package anthropic

import (
	"bytes"

	"github.com/camproxy/camproxy/protocol"
)

const (
	// maxLine bounds the partial line and the data of one event a StreamDecoder
	// keeps; past it the decode is broken rather than the memory unbounded.
	maxLine = 8 << 20
	// keepBuf is the largest line or data buffer kept for reuse: one huge event
	// should not pin its buffer for the rest of a long stream.
	keepBuf = 64 << 10
	// maxName bounds the event field kept; event types are short words.
	maxName = 64
)

// StreamDecoder consumes the raw SSE bytes of a streamed Messages answer in arbitrary
// chunk boundaries (a tee of what goes to the client) and assembles the answer with
// an EventDecoder. The zero value is ready to use. It is not safe for concurrent use.
type StreamDecoder struct {
	line    []byte // the line that earlier writes began
	data    []byte // the data of the event being read
	name    []byte // the event field of the event being read
	hasData bool   // the event has a data field, maybe empty
	started bool   // a line was read: a byte order mark can only come first
	skipLF  bool   // the last line ended on '\r': a '\n' right after belongs to it
	broken  bool   // a line or event outgrew maxLine: the rest is ignored

	events EventDecoder
}

// Write feeds the next bytes of the stream. It never fails.
func (d *StreamDecoder) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && !d.broken {
		if d.skipLF {
			d.skipLF = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		i := lineEnd(p)
		if i < 0 {
			d.keep(p)
			break
		}
		d.skipLF = p[i] == '\r'
		seg := p[:i]
		p = p[i+1:]
		if len(d.line)+len(seg) > maxLine {
			d.breakDecode()
			break
		}
		if len(d.line) == 0 {
			d.handleLine(seg)
			continue
		}
		d.line = appendCapped(d.line, seg)
		d.handleLine(d.line)
		d.line = reuse(d.line)
	}
	return n, nil
}

// Message returns the answer assembled so far (see EventDecoder.Message).
func (d *StreamDecoder) Message() protocol.Message { return d.events.Message() }

// Usage returns the usage reported so far (see EventDecoder.Usage).
func (d *StreamDecoder) Usage() protocol.Usage { return d.events.Usage() }

// Finished reports whether the message_stop event arrived and no error event did.
func (d *StreamDecoder) Finished() bool { return d.events.Finished() }

// lineEnd returns the offset of the first line terminator ('\n' or '\r') in p, or -1.
func lineEnd(p []byte) int {
	i := bytes.IndexByte(p, '\n')
	head := p
	if i >= 0 {
		head = p[:i]
	}
	if j := bytes.IndexByte(head, '\r'); j >= 0 {
		return j
	}
	return i
}

// keep stores the unterminated tail of a write until a later write ends the line.
func (d *StreamDecoder) keep(p []byte) {
	if len(d.line)+len(p) > maxLine {
		d.breakDecode()
		return
	}
	d.line = appendCapped(d.line, p)
}

// breakDecode gives up on the rest of the stream and frees what it held for it.
func (d *StreamDecoder) breakDecode() {
	d.broken = true
	d.line, d.data = nil, nil
}

// appendCapped appends p to b growing it as append does, but never past maxLine,
// which callers checked len(b)+len(p) against: the bound is on memory, not length.
func appendCapped(b, p []byte) []byte {
	if n := len(b) + len(p); n > cap(b) {
		nb := make([]byte, len(b), min(max(2*cap(b), n), maxLine))
		copy(nb, b)
		b = nb
	}
	return append(b, p...)
}

// reuse empties a buffer for reuse, or drops it when it grew too big to keep.
func reuse(b []byte) []byte {
	if cap(b) > keepBuf {
		return nil
	}
	return b[:0]
}

// handleLine interprets one line of the event stream.
func (d *StreamDecoder) handleLine(line []byte) {
	if !d.started {
		d.started = true
		line = bytes.TrimPrefix(line, []byte("\uFEFF"))
	}
	if len(line) == 0 {
		d.dispatch()
		return
	}
	if line[0] == ':' {
		return // comment, e.g. a keep-alive
	}
	field, value := line, []byte(nil)
	if c := bytes.IndexByte(line, ':'); c >= 0 {
		field, value = line[:c], line[c+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(field) {
	case "event":
		// A longer name is no event type we know: keep none rather than a prefix.
		d.name = d.name[:0]
		if len(value) <= maxName {
			d.name = append(d.name, value...)
		}
	case "data":
		if d.hasData {
			if len(d.data)+1+len(value) > maxLine {
				d.breakDecode()
				return
			}
			d.data = appendCapped(d.data, []byte{'\n'})
		}
		d.data = appendCapped(d.data, value)
		d.hasData = true
	}
	// id, retry: nothing an answer needs.
}

// dispatch handles the event whose end a blank line marked.
func (d *StreamDecoder) dispatch() {
	if d.hasData {
		d.events.event(d.data, d.name)
		d.data = reuse(d.data)
		d.hasData = false
	}
	d.name = d.name[:0]
}
