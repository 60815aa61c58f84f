// Package sse splits a server-sent-event stream, fed in arbitrary chunks (a tee of
// what is relayed), into events: the WHATWG framing — lines ending in \n, \r\n or
// \r, data lines joined with \n, comments, a leading byte order mark — in bounded
// memory. The adapters decode the events.
package sse

import "bytes"

const (
	// MaxLine bounds a partial line and the data of one event; past it the reader
	// stops (Broken) rather than grow without bound.
	MaxLine = 8 << 20
	// keepBuf is the largest buffer kept for reuse: one huge event should not pin its
	// buffer for the rest of a long stream.
	keepBuf = 64 << 10
	// maxName bounds the event field kept; event types are short words.
	maxName = 64
)

// Reader assembles events. Set Event (and Data if needed) before the first Write.
type Reader struct {
	// Event receives each complete event: its event field ("" when absent) and data.
	// Both slices are valid only during the call.
	Event func(name, data []byte)
	// Data, if set, sees each data line as it is read, before its event is complete.
	Data func(value []byte)

	line    []byte // the line that earlier writes began
	data    []byte // the data of the event being read
	name    []byte // the event field of the event being read
	hasData bool   // the event has a data field, maybe empty
	started bool   // a line was read: a byte order mark can only come first
	skipLF  bool   // the last line ended on '\r': a '\n' right after belongs to it
	broken  bool   // a line or event outgrew MaxLine: the rest is ignored
}

// Broken reports that a line or an event outgrew MaxLine and reading stopped.
func (r *Reader) Broken() bool { return r.broken }

// Write feeds the next bytes of the stream. It never fails.
func (r *Reader) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && !r.broken {
		if r.skipLF {
			r.skipLF = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		i := lineEnd(p)
		if i < 0 {
			r.keep(p)
			break
		}
		r.skipLF = p[i] == '\r'
		seg := p[:i]
		p = p[i+1:]
		if len(r.line)+len(seg) > MaxLine {
			r.stop()
			break
		}
		if len(r.line) == 0 {
			r.handleLine(seg)
			continue
		}
		r.line = appendCapped(r.line, seg)
		r.handleLine(r.line)
		r.line = reuse(r.line)
	}
	return n, nil
}

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
func (r *Reader) keep(p []byte) {
	if len(r.line)+len(p) > MaxLine {
		r.stop()
		return
	}
	r.line = appendCapped(r.line, p)
}

// stop gives up on the rest of the stream and frees what it held for it.
func (r *Reader) stop() {
	r.broken = true
	r.line, r.data, r.name = nil, nil, nil
}

// appendCapped appends p to b growing it as append does, but never past MaxLine,
// which callers checked len(b)+len(p) against: the bound is on memory, not length.
func appendCapped(b, p []byte) []byte {
	if n := len(b) + len(p); n > cap(b) {
		nb := make([]byte, len(b), min(max(2*cap(b), n), MaxLine))
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
func (r *Reader) handleLine(line []byte) {
	if !r.started {
		r.started = true
		line = bytes.TrimPrefix(line, []byte("\uFEFF"))
	}
	if len(line) == 0 {
		r.dispatch()
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
		// A longer name is no event type anyone sends: keep none rather than a prefix.
		r.name = r.name[:0]
		if len(value) <= maxName {
			r.name = append(r.name, value...)
		}
	case "data":
		if r.Data != nil {
			r.Data(value)
		}
		if r.hasData {
			if len(r.data)+1+len(value) > MaxLine {
				r.stop()
				return
			}
			r.data = appendCapped(r.data, []byte{'\n'})
		}
		r.data = appendCapped(r.data, value)
		r.hasData = true
	}
	// id, retry: nothing an answer needs.
}

// dispatch hands on the event whose end a blank line marked.
func (r *Reader) dispatch() {
	if r.hasData && r.Event != nil {
		r.Event(r.name, r.data)
	}
	if r.hasData {
		r.data = reuse(r.data)
		r.hasData = false
	}
	r.name = r.name[:0]
}
