package openai

import (
	"bytes"
	"cmp"
	"slices"
	"strings"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
	"github.com/tidwall/gjson"
)

const (
	// maxLine bounds the partial line and the data of one event a StreamDecoder
	// keeps; past it the decode is broken rather than the memory unbounded.
	maxLine = 8 << 20
	// keepBuf is the largest line or data buffer kept for reuse: one huge event
	// should not pin its buffer for the rest of a long stream.
	keepBuf = 64 << 10
	// mapCalls is the number of tool calls past which they are found by a map.
	mapCalls = 8
)

// StreamDecoder consumes the raw SSE bytes of a streamed chat completion in arbitrary
// chunk boundaries (a tee of what goes to the client) and assembles the answer.
// The zero value is ready to use. It is not safe for concurrent use.
type StreamDecoder struct {
	line    []byte // the line that earlier writes began
	data    []byte // the data of the event being read
	hasData bool   // the event has a data field, maybe empty
	started bool   // a line was read: a byte order mark can only come first
	skipLF  bool   // the last line ended on '\r': a '\n' right after belongs to it
	broken  bool   // a line or event outgrew maxLine: the rest is ignored
	done    bool   // saw a finish_reason or [DONE]

	content []byte
	calls   []callAcc
	callAt  map[int64]int // index → position in calls, once there are many
	usage   protocol.Usage
}

// callAcc assembles one tool call from its deltas.
type callAcc struct {
	index         int64
	id, typ, name string
	args          []byte
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

// Message returns the answer assembled so far: role "assistant", the content deltas
// joined, and the tool calls in index order with their argument fragments joined.
func (d *StreamDecoder) Message() protocol.Message {
	m := protocol.Message{Role: "assistant", Content: string(d.content)}
	if len(d.calls) == 0 {
		return m
	}
	// Sort a copy: callAt holds positions in d.calls, and the stream may go on.
	calls := slices.Clone(d.calls)
	slices.SortFunc(calls, func(a, b callAcc) int { return cmp.Compare(a.index, b.index) })
	m.ToolCalls = make([]protocol.ToolCall, len(calls))
	for i, c := range calls {
		typ := c.typ
		if typ == "" {
			typ = "function"
		}
		m.ToolCalls[i] = protocol.ToolCall{ID: c.id, Type: typ, Name: c.name, Arguments: string(c.args)}
	}
	return m
}

// Usage returns the usage of the usage chunk (stream_options.include_usage), if any.
func (d *StreamDecoder) Usage() protocol.Usage { return d.usage }

// Finished reports whether the stream said it was complete: a finish_reason or
// "data: [DONE]".
func (d *StreamDecoder) Finished() bool { return d.done }

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
	if string(field) != "data" {
		return // event, id, retry: nothing an answer needs
	}
	if string(value) == "[DONE]" {
		d.done = true // even if the blank line that ends the event never comes
	}
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

// dispatch handles the event whose end a blank line marked.
func (d *StreamDecoder) dispatch() {
	if !d.hasData {
		return
	}
	d.handleEvent(d.data)
	d.data = reuse(d.data)
	d.hasData = false
}

// handleEvent applies one chunk; malformed ones are skipped so that one bad event
// does not lose the rest of the answer.
func (d *StreamDecoder) handleEvent(data []byte) {
	if string(data) == "[DONE]" {
		d.done = true
		return
	}
	if jsontext.Validate(data) != nil {
		return
	}
	gjson.ParseBytes(data).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "choices":
			d.readChoices(v)
		case "usage":
			if v.IsObject() {
				d.usage = readUsage(v)
			}
		}
		return true
	})
}

// readChoices applies the delta of choice 0; a choice without an index is taken to
// be at the index of its position.
func (d *StreamDecoder) readChoices(choices gjson.Result) {
	if !choices.IsArray() {
		return
	}
	pos := int64(-1)
	choices.ForEach(func(_, c gjson.Result) bool {
		pos++
		if !c.IsObject() {
			return true
		}
		var index, delta, finish gjson.Result
		c.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "index":
				index = v
			case "delta":
				delta = v
			case "finish_reason":
				finish = v
			}
			return true
		})
		if indexOr(index, pos) != 0 {
			return true
		}
		d.readDelta(delta)
		if finish.Type == gjson.String && finish.Str != "" {
			d.done = true
		}
		return true
	})
}

// readDelta appends one delta's content and tool call fragments.
func (d *StreamDecoder) readDelta(delta gjson.Result) {
	if !delta.IsObject() {
		return
	}
	delta.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "content":
			d.content = append(d.content, v.Str...)
		case "tool_calls":
			if v.IsArray() {
				pos := int64(-1)
				v.ForEach(func(_, c gjson.Result) bool {
					pos++
					d.readCallDelta(c, pos)
					return true
				})
			}
		case "function_call":
			// Legacy function calling streams one call, with no index.
			d.readFunctionDelta(d.call(0), v)
		}
		return true
	})
}

// readCallDelta applies one element of delta.tool_calls.
func (d *StreamDecoder) readCallDelta(c gjson.Result, pos int64) {
	if !c.IsObject() {
		return
	}
	var index, id, typ, fn gjson.Result
	c.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			index = v
		case "id":
			id = v
		case "type":
			typ = v
		case "function":
			fn = v
		}
		return true
	})
	acc := d.call(indexOr(index, pos))
	// Later chunks repeat fields at most; set, don't append. Clone: the strings
	// would otherwise pin the whole event they were cut from.
	if id.Str != "" {
		acc.id = strings.Clone(id.Str)
	}
	if typ.Str != "" {
		acc.typ = strings.Clone(typ.Str)
	}
	d.readFunctionDelta(acc, fn)
}

// readFunctionDelta applies {name, arguments} to acc: the name is set, the
// arguments fragment appended.
func (d *StreamDecoder) readFunctionDelta(acc *callAcc, fn gjson.Result) {
	if !fn.IsObject() {
		return
	}
	fn.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "name":
			if v.Str != "" {
				acc.name = strings.Clone(v.Str)
			}
		case "arguments":
			acc.args = append(acc.args, arguments(v)...)
		}
		return true
	})
}

// call returns the accumulator of the tool call at index, adding it when new.
// Indexes come from the stream, so they key a search, not a slice that one bad
// chunk could make huge; past a handful of calls a map keeps the search linear in
// the stream.
func (d *StreamDecoder) call(index int64) *callAcc {
	if d.callAt != nil {
		if i, ok := d.callAt[index]; ok {
			return &d.calls[i]
		}
	} else {
		for i := range d.calls {
			if d.calls[i].index == index {
				return &d.calls[i]
			}
		}
	}
	d.calls = append(d.calls, callAcc{index: index})
	switch {
	case d.callAt != nil:
		d.callAt[index] = len(d.calls) - 1
	case len(d.calls) > mapCalls:
		d.callAt = make(map[int64]int, 2*len(d.calls))
		for i, c := range d.calls {
			d.callAt[c.index] = i
		}
	}
	return &d.calls[len(d.calls)-1]
}

// indexOr returns the integer index v, or def when v is absent or not a number.
func indexOr(v gjson.Result, def int64) int64 {
	if v.Type != gjson.Number {
		return def
	}
	return v.Int()
}
