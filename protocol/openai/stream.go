package openai

import (
	"unsafe"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
	"github.com/camproxy/camproxy/protocol/sse"
	"github.com/tidwall/gjson"
)

// StreamDecoder consumes the raw SSE bytes of a streamed chat completion in arbitrary
// chunk boundaries (a tee of what goes to the client) and assembles the answer.
// The zero value is ready to use. It is not safe for concurrent use.
type StreamDecoder struct {
	sse  sse.Reader
	done bool // saw a finish_reason or [DONE]

	content []byte
	refusal []byte
	// reasoning_content and reasoning deltas, as servers of open models send them
	reasoningContent, reasoning []byte
	calls                       protocol.ByIndex[callAcc]
	spare                       callAcc // where deltas of calls past the budget go
	usage                       protocol.Usage
	budget                      protocol.Budget // what the answer may keep
	sketch                      protocol.Sketch // of the whole answer, beside the budget
}

// callAcc assembles one tool call from its deltas.
type callAcc struct {
	index         int64
	id, typ, name string
	args          []byte
}

// Index places the call among the stream's (protocol.ByIndex).
func (c callAcc) Index() int64 { return c.index }

// Write feeds the next bytes of the stream. It never fails.
func (d *StreamDecoder) Write(p []byte) (int, error) {
	if d.sse.Event == nil {
		d.sse.Event, d.sse.Data, d.sse.Oversized = d.onEvent, d.onData, d.onCut
	}
	return d.sse.Write(p)
}

// Message returns the answer assembled so far: role "assistant", the content deltas
// joined, and the tool calls in index order with their argument fragments joined.
func (d *StreamDecoder) Message() protocol.Message {
	m := protocol.Message{Role: "assistant", Content: string(d.content)}
	if len(d.refusal) > 0 {
		if m.Content != "" {
			m.Parts = []protocol.Part{{Type: protocol.PartText, Text: m.Content}}
		}
		m.Parts = append(m.Parts, protocol.Part{Type: protocol.PartRefusal, Text: string(d.refusal)})
	}
	if len(d.reasoningContent) > 0 {
		m.Raw = append(m.Raw, reasoningRaw("reasoning_content", string(protocol.AppendString(nil, string(d.reasoningContent)))))
	}
	if len(d.reasoning) > 0 {
		m.Raw = append(m.Raw, reasoningRaw("reasoning", string(protocol.AppendString(nil, string(d.reasoning)))))
	}
	if d.calls.Len() == 0 {
		return m
	}
	calls := d.calls.Sorted()
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

// Limit bounds the bytes of the answer kept (see protocol.Budget), and with them
// the event the framer holds (protocol.EventBound).
func (d *StreamDecoder) Limit(n int) {
	d.budget.Limit(n)
	d.sse.Max = protocol.EventBound(n)
}

// Truncated is how many bytes of the answer were dropped for the limit.
func (d *StreamDecoder) Truncated() int64 { return d.budget.Truncated() }

// Sketch is the sketch of the whole answer so far, whatever the budget kept.
func (d *StreamDecoder) Sketch() *protocol.Sketch { return &d.sketch }

// Usage returns the usage of the usage chunk (stream_options.include_usage), if any.
func (d *StreamDecoder) Usage() protocol.Usage { return d.usage }

// Finished reports whether the stream said it was complete: a finish_reason or
// "data: [DONE]".
func (d *StreamDecoder) Finished() bool { return d.done }

// onEvent handles one complete SSE event.
func (d *StreamDecoder) onEvent(_, data []byte) { d.handleEvent(data) }

// onCut applies a chunk too long to hold, of which the framer kept the head and the
// tail: its deltas are lost, and the answer is cut there. Its usage and the
// finish_reason of its last choice (agents ask for one), which come last, are read
// from the tail.
func (d *StreamDecoder) onCut(_ []byte, c sse.Cut) {
	d.budget.Lost(c.Size)
	if u := jsontext.TailMember(c.Tail, 1, "usage"); u.IsObject() {
		d.usage = usageKeys.Read(u)
	}
	// Depth 3: a member of an element of choices.
	if f := jsontext.TailMember(c.Tail, 3, "finish_reason"); f.Type == gjson.String && f.Str != "" {
		d.done = true
	}
}

// onData sees each data line: "[DONE]" ends the answer even if the blank line that
// closes its event never comes.
func (d *StreamDecoder) onData(v []byte) {
	if string(v) == "[DONE]" {
		d.done = true
	}
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
				d.usage = usageKeys.Read(v)
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
			d.content = d.budget.Append(d.content, v.Str)
			d.sketch.Text(0, v.Str)
		case "refusal":
			d.refusal = d.budget.Append(d.refusal, v.Str)
		case "reasoning_content":
			d.reasoningContent = d.budget.Append(d.reasoningContent, v.Str)
		case "reasoning":
			d.reasoning = d.budget.Append(d.reasoning, v.Str)
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
			d.readBodyDelta(d.call(0), v, functionBody)
		}
		return true
	})
}

// readCallDelta applies one element of delta.tool_calls.
func (d *StreamDecoder) readCallDelta(c gjson.Result, pos int64) {
	if !c.IsObject() {
		return
	}
	var index, id, typ, fn, custom gjson.Result
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
		case "custom":
			custom = v
		}
		return true
	})
	acc := d.call(indexOr(index, pos))
	// Later chunks repeat fields at most; set, don't append. Clone: the strings
	// would otherwise pin the whole event they were cut from.
	if id.Str != "" {
		acc.id = d.budget.Clone(id.Str)
		d.sketch.Call(acc.index, id.Str, "")
	}
	if typ.Str != "" {
		acc.typ = d.budget.Clone(typ.Str)
	}
	d.readBodyDelta(acc, fn, functionBody)
	if custom.IsObject() {
		// A custom (freeform) call: its input text arrives like arguments.
		if acc.typ == "" {
			acc.typ = protocol.ToolCustom
		}
		d.readBodyDelta(acc, custom, customBody)
	}
}

// readBodyDelta applies {name, <b.key>} to acc: the name is set, the arguments or
// input fragment appended.
func (d *StreamDecoder) readBodyDelta(acc *callAcc, obj gjson.Result, b callBody) {
	if !obj.IsObject() {
		return
	}
	obj.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "name":
			if v.Str != "" {
				acc.name = d.budget.Clone(v.Str)
				d.sketch.Call(acc.index, "", v.Str)
			}
		case b.key:
			acc.args = d.budget.Append(acc.args, b.text(v))
		}
		return true
	})
}

// call returns the accumulator of the tool call at index, adding it when new.
func (d *StreamDecoder) call(index int64) *callAcc {
	if c := d.calls.Get(index); c != nil {
		return c
	}
	if !d.budget.Take(callSize) {
		d.spare = callAcc{index: index} // its index still places it in the sketch
		return &d.spare
	}
	return d.calls.Add(callAcc{index: index})
}

// callSize is what a tool call's accumulator costs the budget besides its strings.
const callSize = int(unsafe.Sizeof(callAcc{}))

// indexOr returns the integer index v, or def when v is absent or not a number.
func indexOr(v gjson.Result, def int64) int64 {
	if v.Type != gjson.Number {
		return def
	}
	return v.Int()
}
