package anthropic

import (
	"strings"
	"unsafe"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// EventDecoder assembles an answer from Anthropic stream events that are already
// framed: JSON objects such as {"type":"content_block_delta",…}, one per Event call.
// Bedrock InvokeModelWithResponseStream carries them base64-encoded in its chunk
// events; StreamDecoder feeds it from SSE. The zero value is ready to use. It is not
// safe for concurrent use.
//
// It reads message_start (usage), content_block_start (text, or tool_use with id and
// name), content_block_delta (text_delta, input_json_delta), message_delta (usage)
// and message_stop (the end); ping and unknown events are ignored, and an error
// event means the answer will not be finished. Malformed events are skipped.
type EventDecoder struct {
	blocks protocol.ByIndex[blockAcc]
	spare  blockAcc // where deltas of blocks past the budget go
	usage  usageAcc
	done   bool            // saw message_stop
	failed bool            // saw an error event
	budget protocol.Budget // what the answer may keep
	sketch protocol.Sketch // of the whole answer, beside the budget
}

// blockSize is what a block's accumulator costs the budget besides its bytes.
const blockSize = int(unsafe.Sizeof(blockAcc{}))

// Limit bounds the bytes of the answer kept (see protocol.Budget).
func (d *EventDecoder) Limit(n int) { d.budget.Limit(n) }

// Truncated is how many bytes of the answer were dropped for the limit.
func (d *EventDecoder) Truncated() int64 { return d.budget.Truncated() }

// Lost cuts the answer at an event of n bytes too long for its framer to hold, that
// carried part of it (see protocol.Budget.Lost).
func (d *EventDecoder) Lost(n int64) { d.budget.Lost(n) }

// Sketch is the sketch of the whole answer so far, whatever the budget kept.
func (d *EventDecoder) Sketch() *protocol.Sketch { return &d.sketch }

// blockKind is what a content block holds.
type blockKind uint8

const (
	kindOther blockKind = iota // thinking, server tool blocks…: kept raw
	kindText
	kindTool
)

// blockAcc assembles one content block from its deltas.
type blockAcc struct {
	index    int64
	kind     blockKind
	text     []byte
	id, name string
	input    string // the input of content_block_start, used when no delta comes
	args     []byte // the input_json_delta fragments joined

	// A block of another kind is its content_block_start, verbatim, with what its
	// deltas add: thinking and signature (thinking), input (server_tool_use).
	start               string
	thinking, signature []byte
	sawThinking, sawSig bool
}

// Index places the block among the answer's (protocol.ByIndex).
func (b blockAcc) Index() int64 { return b.index }

// Event applies one event, a JSON object.
func (d *EventDecoder) Event(json []byte) { d.event(json, nil) }

// event applies one event; field, the SSE event field, is its type when the object
// has none.
func (d *EventDecoder) event(data, field []byte) {
	if jsontext.Validate(data) != nil {
		return
	}
	root := gjson.ParseBytes(data)
	if !root.IsObject() {
		return
	}
	var typ, index, message, cblock, delta, usage, metrics gjson.Result
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			typ = v
		case "index":
			index = v
		case "message":
			message = v
		case "content_block":
			cblock = v
		case "delta":
			delta = v
		case "usage":
			usage = v
		case "amazon-bedrock-invocationMetrics":
			metrics = v
		}
		return true
	})
	name := typ.Str
	if typ.Type != gjson.String {
		name = string(field)
	}
	switch name {
	case "message_start":
		if message.IsObject() {
			d.usage.read(message.Get("usage"))
		}
	case "content_block_start":
		d.startBlock(indexOf(index), cblock)
	case "content_block_delta":
		d.applyDelta(indexOf(index), delta)
	case "message_delta":
		d.usage.read(usage)
	case "message_stop":
		d.done = true
		if !d.usage.seen && metrics.IsObject() {
			// Bedrock's own counts, when the stream carried no usage.
			d.usage.input = metrics.Get("inputTokenCount").Int()
			d.usage.output = metrics.Get("outputTokenCount").Int()
		}
	case "error":
		d.failed = true
	}
}

// startBlock applies content_block_start.
func (d *EventDecoder) startBlock(index int64, cb gjson.Result) {
	if !cb.IsObject() {
		return // malformed: it claims no index
	}
	b := readBlock(cb)
	switch b.typ.Str {
	case "text":
		if acc := d.block(index, kindText); acc != nil {
			acc.text = d.budget.Append(acc.text, b.text.Str)
			d.sketch.Text(index, b.text.Str)
		}
	case "tool_use":
		if acc := d.block(index, kindTool); acc != nil {
			d.sketch.Call(index, b.id.Str, b.name.Str)
			// Clone: the strings would otherwise pin the whole event.
			acc.id = d.budget.Clone(b.id.Str)
			acc.name = d.budget.Clone(b.name.Str)
			acc.input = d.budget.Clone(b.input.Raw)
		}
	default:
		if acc := d.block(index, kindOther); acc != nil {
			acc.start = d.budget.Clone(cb.Raw)
		}
	}
}

// applyDelta applies content_block_delta.
func (d *EventDecoder) applyDelta(index int64, delta gjson.Result) {
	if !delta.IsObject() {
		return
	}
	var typ, text, partial, thinking, signature gjson.Result
	delta.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			typ = v
		case "text":
			text = v
		case "partial_json":
			partial = v
		case "thinking":
			thinking = v
		case "signature":
			signature = v
		}
		return true
	})
	switch typ.Str {
	case "text_delta":
		if acc := d.block(index, kindText); acc != nil {
			acc.text = d.budget.Append(acc.text, text.Str)
			d.sketch.Text(index, text.Str)
		}
	case "input_json_delta":
		acc := d.block(index, kindTool)
		if acc == nil {
			acc = d.block(index, kindOther) // server_tool_use, mcp_tool_use
		}
		if acc != nil {
			acc.args = d.budget.Append(acc.args, partial.Str)
		}
	case "thinking_delta":
		if acc := d.block(index, kindOther); acc != nil {
			acc.thinking = d.budget.Append(acc.thinking, thinking.Str)
			acc.sawThinking = true
		}
	case "signature_delta":
		if acc := d.block(index, kindOther); acc != nil {
			acc.signature = d.budget.Append(acc.signature, signature.Str)
			acc.sawSig = true
		}
	}
}

// block returns the block at index, adding it with kind when new; nil when it holds
// another kind.
func (d *EventDecoder) block(index int64, kind blockKind) *blockAcc {
	if b := d.blocks.Get(index); b != nil {
		if b.kind != kind {
			return nil
		}
		return b
	}
	if !d.budget.Take(blockSize) {
		d.spare = blockAcc{kind: kind}
		return &d.spare
	}
	return d.blocks.Add(blockAcc{index: index, kind: kind})
}

// raw is a block of another kind as the answer holds it, compact: its start with
// what the deltas added; "" when nothing of it arrived.
func (b *blockAcc) raw() string {
	raw := b.start
	if !gjson.Valid(raw) || !strings.HasPrefix(strings.TrimSpace(raw), "{") {
		if !b.sawThinking && !b.sawSig {
			return ""
		}
		raw = `{"type":"thinking"}` // deltas of a block whose start was lost
	}
	var err error
	if b.sawThinking {
		if raw, err = sjson.Set(raw, "thinking", string(b.thinking)); err != nil {
			return ""
		}
	}
	if b.sawSig {
		if raw, err = sjson.Set(raw, "signature", string(b.signature)); err != nil {
			return ""
		}
	}
	if len(b.args) > 0 && gjson.ValidBytes(b.args) {
		if raw, err = sjson.SetRaw(raw, "input", string(b.args)); err != nil {
			return ""
		}
	}
	return jsontext.Compact(raw)
}

// indexOf returns the integer index v, or 0 when it is absent or not a number.
func indexOf(v gjson.Result) int64 {
	if v.Type != gjson.Number {
		return 0
	}
	return v.Int()
}

// Message returns the answer assembled so far: role "assistant", the text blocks in
// index order joined with "\n", and the tool_use blocks as tool calls in index order
// with their input fragments joined (compacted when they form valid JSON).
func (d *EventDecoder) Message() protocol.Message {
	m := protocol.Message{Role: "assistant"}
	if d.blocks.Len() == 0 {
		return m
	}
	var text jsontext.Joiner
	for _, b := range d.blocks.Sorted() {
		switch b.kind {
		case kindText:
			text.Add(string(b.text))
		case kindTool:
			args := b.input
			if len(b.args) > 0 {
				args = string(b.args)
			}
			m.ToolCalls = append(m.ToolCalls, protocol.ToolCall{ID: b.id, Type: "function", Name: b.name, Arguments: jsontext.Compact(args)})
		case kindOther:
			if raw := b.raw(); raw != "" {
				m.Raw = append(m.Raw, protocol.RawJSON(raw))
			}
		}
	}
	m.Content = text.String()
	return m
}

// Usage returns the usage reported so far: message_start's, updated by
// message_delta's. InputTokens counts cached input tokens too.
func (d *EventDecoder) Usage() protocol.Usage { return d.usage.usage() }

// Finished reports whether message_stop arrived and no error event did.
func (d *EventDecoder) Finished() bool { return d.done && !d.failed }
