package responses

import (
	"cmp"
	"slices"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
	"github.com/camproxy/camproxy/protocol/sse"
)

// Decoder returns a decoder for the answer: SSE when the call streams, else JSON.
// Both implement protocol.Identified.
func (r *Request) Decoder() protocol.Decoder {
	if r.Stream {
		return &StreamDecoder{}
	}
	return &JSONDecoder{}
}

var (
	_ protocol.Identified = (*JSONDecoder)(nil)
	_ protocol.Identified = (*StreamDecoder)(nil)
)

// DecodeResponse reads a response object: its id, the assistant message of its output
// items and its usage. ok is false when body is not a response object (no output list),
// such as an error body.
func DecodeResponse(body []byte) (id string, msg protocol.Message, usage protocol.Usage, ok bool) {
	if jsontext.Validate(body) != nil {
		return "", protocol.Message{}, protocol.Usage{}, false
	}
	return decodeResponse(gjson.ParseBytes(body))
}

// decodeResponse reads a response object of a validated body.
func decodeResponse(resp gjson.Result) (id string, msg protocol.Message, usage protocol.Usage, ok bool) {
	if !resp.IsObject() {
		return "", protocol.Message{}, protocol.Usage{}, false
	}
	var output gjson.Result
	resp.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "id":
			id = strings.Clone(v.Str)
		case "output":
			output = v
		case "usage":
			usage = usageKeys.Read(v)
		}
		return true
	})
	if !output.IsArray() {
		return id, protocol.Message{}, usage, false
	}
	// Clone: the strings may alias an event's buffer.
	return id, answer(output).Clone(), usage, true
}

// usageKeys names the token counts of a usage object.
var usageKeys = protocol.UsageKeys{Input: "input_tokens", Output: "output_tokens"}

// JSONDecoder assembles a non-streamed response object; it is finished once the
// bytes written form a whole response object.
type JSONDecoder struct {
	buf    []byte
	done   bool
	id     string
	msg    protocol.Message
	usage  protocol.Usage
	budget protocol.Budget  // what the answer may keep
	sketch *protocol.Sketch // the whole answer's, when the budget cut it
}

// Write buffers p and decodes once the body is a whole JSON document.
func (d *JSONDecoder) Write(p []byte) (int, error) {
	if d.done {
		return len(p), nil
	}
	d.buf = append(d.buf, p...)
	if ok, _ := jsontext.Valid(d.buf); ok {
		if id, msg, usage, ok := DecodeResponse(d.buf); ok {
			d.sketch = d.budget.Trim(&msg)
			d.id, d.msg, d.usage, d.done = id, msg, usage, true
			d.buf = nil
		}
	}
	return len(p), nil
}

// Finished reports whether a whole response object was decoded.
func (d *JSONDecoder) Finished() bool { return d.done }

// Message is the decoded answer.
func (d *JSONDecoder) Message() protocol.Message {
	if !d.done {
		return protocol.Message{Role: "assistant"}
	}
	return d.msg
}

// Usage is the decoded token usage.
func (d *JSONDecoder) Usage() protocol.Usage { return d.usage }

// ResponseID is the response's id.
func (d *JSONDecoder) ResponseID() string { return d.id }

// Limit bounds the bytes of the answer kept (see protocol.Budget).
func (d *JSONDecoder) Limit(n int) { d.budget.Limit(n) }

// Truncated is how many bytes of the answer were dropped for the limit.
func (d *JSONDecoder) Truncated() int64 { return d.budget.Truncated() }

// Sketch is the whole answer's sketch; nil unless the budget cut it.
func (d *JSONDecoder) Sketch() *protocol.Sketch { return d.sketch }

// StreamDecoder consumes the raw SSE bytes of a streamed response in arbitrary chunk
// boundaries (a tee of what goes to the client). The final event — response.completed,
// response.incomplete or response.failed (response.done, as the Realtime API and some
// backends name it) — carries the whole response: its output and usage are the answer.
// Until then (and when the final event's output is empty, as some backends send it)
// the answer is assembled from the output_item.done items and, for items not done yet,
// from the output_text, function_call_arguments and custom_tool_call_input deltas, so
// that a stream cut short still records what arrived.
//
// An event longer than the framer holds (protocol.EventBound of the limit; the final
// event repeats the whole answer, so a long one is) is read from its head and tail
// only (see onCut): a final one still ends the answer, with the response's id and
// usage when they lie there, and the answer stays what the earlier events built.
//
// The zero value is ready to use; it is not safe for concurrent use.
type StreamDecoder struct {
	sse  sse.Reader
	done bool

	id    string
	final *protocol.Message // the final event's answer, when its output has items
	usage protocol.Usage
	items []outItem // output items so far, by output_index
	spare outItem   // where events past maxItems, or past the budget, go

	budget protocol.Budget // what the answer may keep
	sketch protocol.Sketch // of the whole answer, beside the budget
	// sketchedItem is output_index+1 of the last item whose text deltas went to the
	// sketch, whether or not the budget kept the item.
	sketchedItem int64
}

// maxItems bounds the output items a stream assembles; a response has a handful.
const maxItems = 1024

// itemSize is what an item's accumulator costs the budget besides its bytes.
const itemSize = int(unsafe.Sizeof(outItem{}))

// outItem assembles one output item from its events.
type outItem struct {
	index        int64
	typ          string
	text         []byte // message: its output_text deltas, or its final text
	callID, name string
	args         []byte // function_call arguments, custom_tool_call input
	done         string // the item of output_item.done, whole: it replaces the rest
}

// Write feeds the next bytes of the stream. It never fails.
func (d *StreamDecoder) Write(p []byte) (int, error) {
	if d.sse.Event == nil {
		d.sse.Event, d.sse.Oversized = d.onEvent, d.onCut
	}
	return d.sse.Write(p)
}

// Finished reports whether the final event (response.completed, .incomplete, .failed
// or .done) was read.
func (d *StreamDecoder) Finished() bool { return d.done }

// Usage is the final event's usage.
func (d *StreamDecoder) Usage() protocol.Usage { return d.usage }

// ResponseID is the response's id, known from response.created on.
func (d *StreamDecoder) ResponseID() string { return d.id }

// Limit bounds the bytes of the answer kept (see protocol.Budget), and with them
// the event the framer holds (protocol.EventBound).
func (d *StreamDecoder) Limit(n int) {
	d.budget.Limit(n)
	d.sse.Max = protocol.EventBound(n)
}

// Truncated is how many bytes of the answer were dropped for the limit.
func (d *StreamDecoder) Truncated() int64 { return d.budget.Truncated() }

// Sketch is the sketch of the whole answer so far, whatever the budget kept: the
// final event's, else the events'.
func (d *StreamDecoder) Sketch() *protocol.Sketch { return &d.sketch }

// Message returns the answer: the final event's, else what the events so far hold.
func (d *StreamDecoder) Message() protocol.Message {
	if d.final != nil {
		return *d.final
	}
	items := slices.Clone(d.items)
	slices.SortStableFunc(items, func(a, b outItem) int { return cmp.Compare(a.index, b.index) })
	var a assembler
	for _, it := range items {
		switch {
		case it.done != "":
			a.item(gjson.Parse(it.done))
		case it.typ == typeMessage:
			a.assistantText(string(it.text), nil)
		case it.typ == typeFunctionCall:
			a.call(protocol.ToolCall{ID: it.callID, Type: protocol.ToolFunction, Name: it.name, Arguments: string(it.args)})
		case it.typ == typeCustomCall:
			a.call(protocol.ToolCall{ID: it.callID, Type: protocol.ToolCustom, Name: it.name, Arguments: string(it.args)})
		}
	}
	for i := len(a.msgs) - 1; i >= 0; i-- {
		if a.msgs[i].Role == "assistant" {
			return a.msgs[i]
		}
	}
	return protocol.Message{Role: "assistant"}
}

// onEvent applies one event; malformed ones are skipped so that one bad event does
// not lose the rest of the answer. The type is the data's "type", else the event name.
func (d *StreamDecoder) onEvent(name, data []byte) {
	if d.done || jsontext.Validate(data) != nil {
		return
	}
	ev := gjson.ParseBytes(data)
	if !ev.IsObject() {
		return
	}
	var typ, resp, item, delta, index, content, text, args, input gjson.Result
	ev.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			typ = v
		case "response":
			resp = v
		case "item":
			item = v
		case "delta":
			delta = v
		case "output_index":
			index = v
		case "content_index":
			content = v
		case "text":
			text = v
		case "arguments":
			args = v
		case "input":
			input = v
		}
		return true
	})
	t := typ.Str
	if t == "" {
		t = string(name)
	}
	switch t {
	case "response.created", "response.in_progress", "response.queued":
		if id := jsontext.ObjectKey(resp, "id"); id.Str != "" {
			d.id = strings.Clone(id.Str)
		}
	case "response.completed", "response.incomplete", "response.failed", "response.done":
		id, msg, usage, ok := decodeResponse(resp)
		if id != "" {
			d.id = id
		}
		d.usage = usage
		if ok && (hasElements(jsontext.ObjectKey(resp, "output")) || len(d.items) == 0) {
			// The final answer replaces what the events built: it alone is kept.
			d.items, d.spare = nil, outItem{}
			d.budget.Restart()
			if sk := d.budget.Trim(&msg); sk != nil {
				d.sketch = *sk
			}
			d.final = &msg
		}
		d.done = true
	case "response.output_item.added", "response.output_item.done":
		d.readItem(index.Int(), item, t == "response.output_item.done")
	case "response.output_text.delta":
		if it := d.item(index.Int()); it.typ == "message" || it.typ == "" {
			it.typ = "message"
			it.text = d.budget.Append(it.text, delta.Str)
			// Each text part of each message item is a text of its own.
			d.sketch.Text(index.Int()<<20^content.Int(), delta.Str)
			d.sketchedItem = index.Int() + 1
		}
	case "response.output_text.done":
		if it := d.item(index.Int()); text.Type == gjson.String {
			it.typ = "message"
			it.text = d.budget.Set(it.text, text.Str)
		}
	case "response.function_call_arguments.delta":
		it := d.item(index.Int())
		it.typ = "function_call"
		it.args = d.budget.Append(it.args, delta.Str)
	case "response.function_call_arguments.done":
		if it := d.item(index.Int()); args.Type == gjson.String {
			it.typ = "function_call"
			it.args = d.budget.Set(it.args, args.Str)
		}
	case "response.custom_tool_call_input.delta":
		it := d.item(index.Int())
		it.typ = typeCustomCall
		it.args = d.budget.Append(it.args, delta.Str)
	case "response.custom_tool_call_input.done":
		if it := d.item(index.Int()); input.Type == gjson.String {
			it.typ = typeCustomCall
			it.args = d.budget.Set(it.args, input.Str)
		}
	}
}

// onCut applies an event too long to hold, of which the framer kept the head and
// the tail. A final event ends the answer as it would whole: its type comes first (or
// is the SSE event's name), the response's id right after it, its usage last but for
// the user and metadata fields. The answer stays what the deltas and done items built,
// within the budget as they came: the items only the final event holds are lost —
// OpenAI streams every item before it; a backend that streams none has the answer
// marked cut (Budget.Lost). An event that repeats what its deltas built loses nothing;
// one that adds to the answer cuts it there, as its part past the budget would have.
func (d *StreamDecoder) onCut(name []byte, c sse.Cut) {
	if d.done {
		return
	}
	t := string(name)
	if typ := jsontext.HeadMember(c.Head, "type"); typ.Type == gjson.String {
		t = typ.Str
	}
	switch t {
	case "response.created", "response.in_progress", "response.queued":
		// They echo the request's instructions and tools: a coding agent's can be long.
		if id := jsontext.HeadMember(c.Head, "response", "id"); id.Str != "" {
			d.id = id.Str
		}
	case "response.completed", "response.incomplete", "response.failed", "response.done":
		if id := jsontext.HeadMember(c.Head, "response", "id"); id.Str != "" {
			d.id = id.Str
		}
		// Depth 2: a member of the response object, the event's one object member.
		if u := jsontext.TailMember(c.Tail, 2, "usage"); u.IsObject() {
			d.usage = usageKeys.Read(u)
		}
		if len(d.items) == 0 {
			d.budget.Lost(c.Size)
		}
		d.done = true
	case "response.output_item.done":
		if !d.repeats(c.Head) {
			d.budget.Lost(c.Size)
		}
	case "response.output_item.added", "response.output_text.delta",
		"response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
		d.budget.Lost(c.Size)
	}
	// output_text.done, function_call_arguments.done and custom_tool_call_input.done
	// repeat their deltas; the other events add nothing to the answer.
}

// repeats reports whether a cut output_item.done is a message or call whose deltas
// built its text or arguments, which stand for it: its output_index and its item's
// type come before the item's content, in the head.
func (d *StreamDecoder) repeats(head []byte) bool {
	index, typ := jsontext.HeadMember(head, "output_index"), jsontext.HeadMember(head, "item", "type")
	if index.Type != gjson.Number {
		return false
	}
	for i := range d.items {
		if it := &d.items[i]; it.index == index.Int() {
			switch typ.Str {
			case typeMessage, typeFunctionCall, typeCustomCall:
				return it.typ == typ.Str && len(it.text)+len(it.args) > 0
			}
			return false
		}
	}
	return false
}

// readItem applies an output_item.added or .done event; a done item is whole and
// replaces what the deltas built.
func (d *StreamDecoder) readItem(index int64, v gjson.Result, done bool) {
	f := readItem(v)
	it := d.item(index)
	if done && v.IsObject() {
		switch f.typ.Str {
		case typeFunctionCall, typeCustomCall:
			d.sketch.Call(index, f.callID.Str, f.name.Str)
		case typeMessage:
			if d.sketchedItem != index+1 && f.role.Str == "assistant" {
				// No text delta came (items come one after the other): the item
				// says its text whole.
				d.sketch.Text(index<<20, contentText(f.content, nil))
			}
		}
		// Whole: read like an item of the final output (any type, kept verbatim
		// when the chat shape has no place for it).
		// Past the budget it is dropped, and what the deltas built stays.
		if done, ok := d.budget.Swap(len(it.text)+len(it.args)+len(it.done), v.Raw); ok {
			it.typ = f.typ.Str
			it.done = done
			it.text, it.args = nil, nil
		}
		return
	}
	switch f.typ.Str {
	case typeMessage:
		it.typ = typeMessage
	case typeFunctionCall, typeCustomCall:
		it.typ = f.typ.Str
		d.sketch.Call(index, f.callID.Str, f.name.Str)
		if f.callID.Str != "" {
			it.callID = d.budget.Clone(f.callID.Str)
		}
		if f.name.Str != "" {
			it.name = d.budget.Clone(f.name.Str)
		}
	default:
		it.typ = "other"
	}
}

// item returns the item at output_index, adding it when new. Indexes come from the
// stream: they key a search, not a slice that one bad event could make huge.
func (d *StreamDecoder) item(index int64) *outItem {
	for i := range d.items {
		if d.items[i].index == index {
			return &d.items[i]
		}
	}
	if len(d.items) >= maxItems || !d.budget.Take(itemSize) {
		d.spare = outItem{}
		return &d.spare
	}
	d.items = append(d.items, outItem{index: index})
	return &d.items[len(d.items)-1]
}

// hasElements reports whether v is an array with at least one element.
func hasElements(v gjson.Result) bool {
	any := false
	v.ForEach(func(_, _ gjson.Result) bool {
		any = true
		return false
	})
	return any && v.IsArray()
}
