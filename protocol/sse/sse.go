// Package sse splits a server-sent-event stream, fed in arbitrary chunks (a tee of
// what is relayed), into events: the WHATWG framing — lines ending in \n, \r\n or
// \r, data lines joined with \n, comments, a leading byte order mark — in bounded
// memory. The adapters decode the events.
package sse

import (
	"bytes"

	"github.com/camproxy/camproxy/protocol"
)

const (
	// HeadBytes and TailBytes are what the reader keeps of an event whose data
	// outgrew Max: the fields that name an event and its answer (type, response id,
	// status) come first, the totals (usage, and in a Responses event the metadata
	// after it: at most 16 pairs of 64 and 512 characters) last; the answer between
	// them is what the event is too large for.
	HeadBytes = 4 << 10
	TailBytes = 64 << 10
	// keepBuf is the largest buffer kept for reuse: one huge event should not pin its
	// buffer for the rest of a long stream.
	keepBuf = 64 << 10
	// maxName bounds the event field kept; event types are short words.
	maxName = 64
	// maxField bounds the start of a line read before its field is known: the
	// longest field read ("event") after a byte order mark. A longer field name
	// is none the reader keeps, and the rest of its line is skipped unread.
	maxField = len("\uFEFF") + len("event")
)

// Cut is what the reader kept of an event whose data outgrew Max.
type Cut struct {
	Head []byte // the data's first bytes, at most HeadBytes
	Tail []byte // the data's last bytes after Head, at most TailBytes
	Size int64  // the data's length: Head and Tail are all of it when it is their sum
}

// Reader assembles events. Set Event (and Data, Oversized, Max if needed) before
// the first Write.
//
// Its memory is bounded by Max: it holds the data of the event being read, never a
// whole line (a data line is appended to the event's data as it arrives). An event
// whose data outgrows Max is not kept: the reader goes on past it keeping only its
// head and tail (HeadBytes, and twice TailBytes of buffer), hands those to Oversized,
// and reads the events after it as usual.
type Reader struct {
	// Event receives each complete event: its event field ("" when absent) and data.
	// Both slices are valid only during the call.
	Event func(name, data []byte)
	// Data, if set, sees each data line's value once the line is read, before its
	// event is complete (not the lines of an event that outgrew Max).
	Data func(value []byte)
	// Oversized, if set, receives each event whose data outgrew Max in the place of
	// Event: its event field and what was kept of its data, valid only during the call.
	Oversized func(name []byte, c Cut)
	// Max bounds the data of one event the reader holds; 0 is the bound for the
	// default answer budget (protocol.EventBound).
	Max int

	field   []byte // the start of the current line, until its field is known
	kind    lineKind
	skipSP  bool // the line's value has not begun: a leading space is dropped
	value   int  // where the current data line's value begins in data
	data    []byte
	name    []byte
	hasData bool // the event has a data field, maybe empty
	started bool // a line was read: a byte order mark can only come first
	skipLF  bool // the last line ended on '\r': a '\n' right after belongs to it

	cut        bool // the event's data outgrew Max: head, tail and size hold it
	head, tail []byte
	size       int64
}

// lineKind is what the rest of the current line is, once its field is known.
type lineKind uint8

const (
	lineField lineKind = iota // the field is not known yet
	lineData
	lineEvent
	lineEventLong // an event field longer than maxName: kept as none
	lineSkip      // a comment, id, retry or unknown field
)

// Write feeds the next bytes of the stream. It never fails.
func (r *Reader) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if r.skipLF {
			r.skipLF = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		i := lineEnd(p)
		if i < 0 {
			r.feed(p)
			break
		}
		r.feed(p[:i])
		r.skipLF = p[i] == '\r'
		p = p[i+1:]
		r.endLine()
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

// feed reads the next bytes of the current line (no terminator among them).
func (r *Reader) feed(seg []byte) {
	if r.kind == lineField {
		c := bytes.IndexByte(seg, ':')
		name := seg
		if c >= 0 {
			name = seg[:c]
		}
		if len(r.field)+len(name) > maxField {
			r.field, r.kind = r.field[:0], lineSkip // no field the reader keeps
			return
		}
		r.field = append(r.field, name...)
		if c < 0 {
			return
		}
		r.begin()
		seg = seg[c+1:]
	}
	if r.skipSP && len(seg) > 0 {
		r.skipSP = false
		if seg[0] == ' ' {
			seg = seg[1:]
		}
	}
	switch r.kind {
	case lineData:
		r.addData(seg)
	case lineEvent:
		if len(r.name)+len(seg) > maxName {
			// A longer name is no event type anyone sends: keep none rather than a prefix.
			r.name, r.kind = r.name[:0], lineEventLong
			return
		}
		r.name = append(r.name, seg...)
	}
}

// begin starts the value of the line whose field r.field holds.
func (r *Reader) begin() {
	field := r.field
	if !r.started {
		field = bytes.TrimPrefix(field, []byte("\uFEFF"))
		r.started = true
	}
	switch string(field) {
	case "data":
		r.kind = lineData
		if r.hasData {
			r.addData([]byte{'\n'})
		}
		r.hasData = true
		r.value = len(r.data)
	case "event":
		r.kind = lineEvent
		r.name = r.name[:0]
	default:
		r.kind = lineSkip // a comment (empty field), id, retry: nothing an answer needs
	}
	r.field, r.skipSP = r.field[:0], true
}

// endLine ends the current line: a blank one dispatches the event.
func (r *Reader) endLine() {
	if r.kind == lineField {
		// No colon: the whole line is the field name, with an empty value.
		field := r.field
		if !r.started {
			field = bytes.TrimPrefix(field, []byte("\uFEFF"))
		}
		if len(field) == 0 {
			r.field, r.started = r.field[:0], true
			r.dispatch()
			return
		}
		r.begin()
	}
	switch r.kind {
	case lineData:
		if r.Data != nil && !r.cut {
			r.Data(r.data[r.value:])
		}
	case lineEventLong:
		r.name = r.name[:0]
	}
	r.kind, r.started = lineField, true
}

// max is the bound on the data of one event.
func (r *Reader) max() int {
	if r.Max > 0 {
		return r.Max
	}
	return protocol.EventBound(0)
}

// addData appends v to the event's data, or, past Max, keeps only its head and tail.
func (r *Reader) addData(v []byte) {
	if len(v) == 0 {
		return
	}
	if !r.cut && len(r.data)+len(v) <= r.max() {
		r.data = appendCapped(r.data, v, r.max())
		return
	}
	if !r.cut {
		// Past the bound: keep the head and tail of what was read, and let the rest go.
		r.cut, r.size = true, 0
		held := r.data
		r.data = nil
		r.skip(held)
	}
	r.skip(v)
}

// skip counts v as data of a cut event: the first HeadBytes are kept, and a window of
// the last TailBytes in a buffer of twice that, so that each byte is copied once or
// twice, never more.
func (r *Reader) skip(v []byte) {
	r.size += int64(len(v))
	if k := min(HeadBytes-len(r.head), len(v)); k > 0 {
		if r.head == nil {
			r.head = make([]byte, 0, HeadBytes)
		}
		r.head = append(r.head, v[:k]...)
		v = v[k:]
	}
	if len(v) == 0 {
		return
	}
	if r.tail == nil {
		r.tail = make([]byte, 0, 2*TailBytes)
	}
	if len(v) >= TailBytes {
		r.tail = append(r.tail[:0], v[len(v)-TailBytes:]...)
		return
	}
	if len(r.tail)+len(v) > cap(r.tail) {
		n := copy(r.tail, r.tail[len(r.tail)-TailBytes:])
		r.tail = r.tail[:n]
	}
	r.tail = append(r.tail, v...)
}

// appendCapped appends p to b growing it as append does, but never past limit, which
// callers checked len(b)+len(p) against: the bound is on memory, not length.
func appendCapped(b, p []byte, limit int) []byte {
	if n := len(b) + len(p); n > cap(b) {
		nb := make([]byte, len(b), min(max(2*cap(b), n), limit))
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

// dispatch hands on the event whose end a blank line marked.
func (r *Reader) dispatch() {
	switch {
	case r.cut:
		if r.Oversized != nil {
			tail := r.tail[max(len(r.tail)-TailBytes, 0):]
			r.Oversized(r.name, Cut{Head: r.head, Tail: tail, Size: r.size})
		}
		// Rare: let the buffers go rather than hold them for the rest of the stream.
		r.cut, r.head, r.tail = false, nil, nil
	case r.hasData && r.Event != nil:
		r.Event(r.name, r.data)
	}
	if r.hasData {
		r.data = reuse(r.data)
		r.hasData = false
	}
	r.name = r.name[:0]
}
