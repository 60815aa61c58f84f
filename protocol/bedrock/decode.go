package bedrock

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"math"
	"slices"
	"strings"
	"unsafe"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/anthropic"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// jsonDecoder assembles an answer that comes as one JSON body. It decodes when the
// bytes so far end like a whole object, so that a body fed byte by byte costs one
// decode, not one per byte; it is finished once a decode finds an answer.
type jsonDecoder struct {
	decode func(body []byte) (protocol.Message, protocol.Usage, bool)
	buf    []byte
	over   bool // the body outgrew maxFrame
	done   bool
	msg    protocol.Message
	usage  protocol.Usage
	budget protocol.Budget  // what the answer may keep
	sketch *protocol.Sketch // the whole answer's, when the budget cut it
}

func newJSONDecoder(decode func([]byte) (protocol.Message, protocol.Usage, bool)) *jsonDecoder {
	return &jsonDecoder{decode: decode}
}

// Write buffers p and decodes once the body may be whole. It never fails.
func (d *jsonDecoder) Write(p []byte) (int, error) {
	if d.done || d.over || len(p) == 0 {
		return len(p), nil
	}
	if len(d.buf)+len(p) > maxFrame {
		d.over, d.buf = true, nil
		return len(p), nil
	}
	d.buf = append(d.buf, p...)
	if t := bytes.TrimRight(p, " \t\r\n"); len(t) > 0 && t[len(t)-1] == '}' {
		if m, u, ok := d.decode(d.buf); ok {
			d.sketch = d.budget.Trim(&m)
			d.msg, d.usage, d.done, d.buf = m, u, true, nil
		}
	}
	return len(p), nil
}

// Finished reports whether a complete answer was decoded.
func (d *jsonDecoder) Finished() bool { return d.done }

// Message is the decoded answer.
func (d *jsonDecoder) Message() protocol.Message {
	if !d.done {
		return protocol.Message{Role: "assistant"}
	}
	return d.msg
}

// Usage is the decoded token usage.
func (d *jsonDecoder) Usage() protocol.Usage { return d.usage }

// Limit bounds the bytes of the answer kept (see protocol.Budget).
func (d *jsonDecoder) Limit(n int) { d.budget.Limit(n) }

// Truncated is how many bytes of the answer were dropped for the limit.
func (d *jsonDecoder) Truncated() int64 { return d.budget.Truncated() }

// Sketch is the whole answer's sketch; nil unless the budget cut it.
func (d *jsonDecoder) Sketch() *protocol.Sketch { return d.sketch }

// decodeConverseResponse reads a Converse answer, which an Amazon Nova InvokeModel
// answer shares: {"output":{"message":{"role","content":[…]}},"stopReason",
// "usage":{"inputTokens","outputTokens"}}. ok is false without output.message.
func decodeConverseResponse(body []byte) (protocol.Message, protocol.Usage, bool) {
	if jsontext.Validate(body) != nil {
		return protocol.Message{}, protocol.Usage{}, false
	}
	root := gjson.ParseBytes(body)
	msg := jsontext.ObjectKey(jsontext.ObjectKey(root, "output"), "message")
	if !msg.IsObject() {
		return protocol.Message{}, protocol.Usage{}, false
	}
	role, content := "assistant", gjson.Result{}
	msg.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "role":
			if v.Str != "" {
				role = v.Str
			}
		case "content":
			content = v
		}
		return true
	})
	// A toolResult has no place in an answer: it stays raw, like any block the
	// answer's message cannot hold.
	m, _, _ := convMessage(role, content, nil, nil)
	for i, raw := range m.Raw {
		// Compact, as the stream's blocks are assembled: one answer, one record.
		m.Raw[i] = protocol.RawJSON(jsontext.Compact(string(raw)))
	}
	return m.Clone(), converseUsage.Read(jsontext.ObjectKey(root, "usage")), true
}

// converseUsage names the token counts of a Converse usage object.
var converseUsage = protocol.UsageKeys{Input: "inputTokens", Output: "outputTokens"}

// decodeLlamaResponse reads a Llama InvokeModel answer: {"generation",
// "prompt_token_count","generation_token_count","stop_reason"}. ok is false without
// a generation string.
func decodeLlamaResponse(body []byte) (protocol.Message, protocol.Usage, bool) {
	if jsontext.Validate(body) != nil {
		return protocol.Message{}, protocol.Usage{}, false
	}
	var l llamaAcc
	l.budget.Limit(math.MaxInt) // the jsonDecoder trims the whole answer
	ok := l.chunk(gjson.ParseBytes(body))
	return l.message(), l.usage, ok
}

// clone copies the strings of m out of the body they alias.
func clone(m protocol.Message) protocol.Message {
	m.Role = strings.Clone(m.Role)
	m.Content = strings.Clone(m.Content)
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		tc.ID, tc.Type, tc.Name, tc.Arguments = strings.Clone(tc.ID), strings.Clone(tc.Type), strings.Clone(tc.Name), strings.Clone(tc.Arguments)
	}
	return m
}

// streamKind is what the events of a stream carry.
type streamKind int

const (
	// streamConverse: ConverseStream; :event-type names the event, the payload is
	// its JSON.
	streamConverse streamKind = iota
	// streamClaude, streamNova, streamLlama: InvokeModelWithResponseStream; chunk
	// events whose payload {"bytes": base64} holds the model's own stream event.
	streamClaude
	streamNova
	streamLlama
)

// streamDecoder assembles an answer from an AWS event stream.
type streamDecoder struct {
	frames    FrameReader
	kind      streamKind
	exception bool // the stream carried an exception: the answer is incomplete

	conv   converseAcc
	llama  llamaAcc
	claude anthropic.EventDecoder

	metrics  protocol.Usage // amazon-bedrock-invocationMetrics, when sent
	chunkBuf []byte         // reused for decoded chunk bytes
}

func newStreamDecoder(kind streamKind) *streamDecoder {
	d := &streamDecoder{kind: kind}
	d.frames.Frame, d.frames.Skipped = d.frame, d.skipped
	return d
}

// Write feeds the next bytes of the stream. It never fails.
func (d *streamDecoder) Write(p []byte) (int, error) { return d.frames.Write(p) }

// Finished reports that the stream ended its answer (messageStop, Claude's
// message_stop, a Llama stop_reason) and carried no exception.
func (d *streamDecoder) Finished() bool {
	if d.exception {
		return false
	}
	switch d.kind {
	case streamClaude:
		return d.claude.Finished()
	case streamLlama:
		return d.llama.done
	}
	return d.conv.done
}

// Message returns the answer assembled so far.
func (d *streamDecoder) Message() protocol.Message {
	switch d.kind {
	case streamClaude:
		m := d.claude.Message()
		if m.Role == "" {
			m.Role = "assistant"
		}
		return m
	case streamLlama:
		return d.llama.message()
	}
	return d.conv.message()
}

// Limit bounds the bytes of the answer kept (see protocol.Budget), and with them
// the frame the reader holds (frameBound).
func (d *streamDecoder) Limit(n int) {
	d.conv.budget.Limit(n)
	d.llama.budget.Limit(n)
	d.claude.Limit(n)
	d.frames.Max = frameBound(n)
}

// skipped cuts the answer at a frame too long to hold: an event's deltas are the only
// ones that long. (An exception in it goes unseen: exceptions are a few fields.)
func (d *streamDecoder) skipped(n int) {
	switch d.kind {
	case streamClaude:
		d.claude.Lost(int64(n))
	case streamLlama:
		d.llama.budget.Lost(int64(n))
	default:
		d.conv.budget.Lost(int64(n))
	}
}

// Truncated is how many bytes of the answer were dropped for the limit.
func (d *streamDecoder) Truncated() int64 {
	switch d.kind {
	case streamClaude:
		return d.claude.Truncated()
	case streamLlama:
		return d.llama.budget.Truncated()
	}
	return d.conv.budget.Truncated()
}

// Sketch is the sketch of the whole answer so far, whatever the budget kept.
func (d *streamDecoder) Sketch() *protocol.Sketch {
	switch d.kind {
	case streamClaude:
		return d.claude.Sketch()
	case streamLlama:
		return &d.llama.sketch
	}
	return &d.conv.sketch
}

// Usage returns the token usage the model reported; a count it did not report is
// taken from the invocation metrics Bedrock adds to the last chunk of an
// InvokeModel stream. (Claude's decoder reads those metrics itself.)
func (d *streamDecoder) Usage() protocol.Usage {
	var u protocol.Usage
	switch d.kind {
	case streamClaude:
		return d.claude.Usage()
	case streamLlama:
		u = d.llama.usage
	default:
		u = d.conv.usage
	}
	if u.InputTokens == 0 {
		u.InputTokens = d.metrics.InputTokens
	}
	if u.OutputTokens == 0 {
		u.OutputTokens = d.metrics.OutputTokens
	}
	return u
}

// frame handles one frame of the stream.
func (d *streamDecoder) frame(msg eventstream.Message) {
	if d.exception {
		return
	}
	switch header(msg, ":message-type") {
	case "event", "":
	case "exception", "error":
		d.exception = true
		return
	default:
		return
	}
	if jsontext.Validate(msg.Payload) != nil {
		return
	}
	payload := gjson.ParseBytes(msg.Payload)
	event := header(msg, ":event-type")
	if d.kind == streamConverse {
		d.conv.event(event, payload)
		return
	}
	if event != "chunk" {
		return
	}
	b := jsontext.ObjectKey(payload, "bytes")
	if b.Type != gjson.String {
		return
	}
	n := base64.StdEncoding.DecodedLen(len(b.Str))
	if cap(d.chunkBuf) < n {
		d.chunkBuf = make([]byte, n)
	}
	n, err := base64.StdEncoding.Decode(d.chunkBuf[:n], []byte(b.Str))
	if err != nil {
		return
	}
	d.chunk(d.chunkBuf[:n])
	if cap(d.chunkBuf) > keepBuf {
		d.chunkBuf = nil
	}
}

// chunk handles the decoded JSON of one InvokeModel stream chunk.
func (d *streamDecoder) chunk(js []byte) {
	if d.kind == streamClaude {
		d.claude.Event(js) // it validates
		return
	}
	if jsontext.Validate(js) != nil {
		return
	}
	ev := gjson.ParseBytes(js)
	if !ev.IsObject() {
		return
	}
	if m := jsontext.ObjectKey(ev, "amazon-bedrock-invocationMetrics"); m.IsObject() {
		d.readMetrics(m)
	}
	switch d.kind {
	case streamNova:
		// {"contentBlockDelta": {…}}: the ConverseStream events, keyed by name.
		ev.ForEach(func(k, v gjson.Result) bool {
			d.conv.event(k.Str, v)
			return true
		})
	case streamLlama:
		d.llama.chunk(ev)
	}
}

// readMetrics reads {"inputTokenCount","outputTokenCount",…}.
func (d *streamDecoder) readMetrics(m gjson.Result) {
	m.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "inputTokenCount":
			d.metrics.InputTokens = v.Int()
		case "outputTokenCount":
			d.metrics.OutputTokens = v.Int()
		}
		return true
	})
}

// converseAcc assembles an answer from ConverseStream events.
type converseAcc struct {
	role     string
	content  []byte
	lastText int64 // content block index of the last text delta
	hasText  bool
	tools    []toolAcc
	toolAt   map[int64]int // content block index → position in tools
	reasons  []reasonAcc   // reasoningContent blocks, kept raw
	usage    protocol.Usage
	done     bool
	budget   protocol.Budget // what the answer may keep
	sketch   protocol.Sketch // of the whole answer, beside the budget
}

// Sizes of the accumulators, counted against the budget besides their bytes.
const (
	reasonSize = int(unsafe.Sizeof(reasonAcc{}))
	toolSize   = int(unsafe.Sizeof(toolAcc{}))
)

// reasonAcc assembles one reasoningContent block from its deltas.
type reasonAcc struct {
	index           int64
	text, signature []byte
	redacted        []byte // base64, as the deltas carry it
	sawSig          bool
}

// raw is the block as a whole answer holds it:
// {"reasoningContent":{"reasoningText":{"text","signature"}}} or
// {"reasoningContent":{"redactedContent":"…"}}.
func (r *reasonAcc) raw() string {
	var b []byte
	if len(r.redacted) > 0 {
		b = append(b, `{"reasoningContent":{"redactedContent":`...)
		b = protocol.AppendString(b, string(r.redacted))
		return string(append(b, "}}"...))
	}
	b = append(b, `{"reasoningContent":{"reasoningText":{"text":`...)
	b = protocol.AppendString(b, string(r.text))
	if r.sawSig {
		b = append(b, `,"signature":`...)
		b = protocol.AppendString(b, string(r.signature))
	}
	return string(append(b, "}}}"...))
}

// reason returns the accumulator of the reasoningContent block at index.
func (c *converseAcc) reason(index int64) *reasonAcc {
	for i := range c.reasons {
		if c.reasons[i].index == index {
			return &c.reasons[i]
		}
	}
	if len(c.reasons) >= maxReasons || !c.budget.Take(reasonSize) {
		return &reasonAcc{} // past the bound: dropped rather than unbounded
	}
	c.reasons = append(c.reasons, reasonAcc{index: index})
	return &c.reasons[len(c.reasons)-1]
}

// maxReasons bounds the reasoning blocks a stream assembles; an answer has one or two.
const maxReasons = 256

// toolAcc assembles one toolUse block.
type toolAcc struct {
	index    int64
	id, name string
	input    []byte
}

// event applies one event: its name and its JSON.
func (c *converseAcc) event(name string, v gjson.Result) {
	if !v.IsObject() {
		return
	}
	switch name {
	case "messageStart":
		if r := jsontext.ObjectKey(v, "role"); r.Str != "" {
			c.role = strings.Clone(r.Str)
		}
	case "contentBlockStart":
		tu := jsontext.ObjectKey(jsontext.ObjectKey(v, "start"), "toolUse")
		if !tu.IsObject() {
			return
		}
		index := jsontext.ObjectKey(v, "contentBlockIndex").Int()
		t := c.tool(index)
		tu.ForEach(func(k, f gjson.Result) bool {
			switch k.Str {
			case "toolUseId":
				t.id = c.budget.Clone(f.Str)
				c.sketch.Call(index, f.Str, "")
			case "name":
				t.name = c.budget.Clone(f.Str)
				c.sketch.Call(index, "", f.Str)
			}
			return true
		})
	case "contentBlockDelta":
		index := jsontext.ObjectKey(v, "contentBlockIndex").Int()
		jsontext.ObjectKey(v, "delta").ForEach(func(k, f gjson.Result) bool {
			switch k.Str {
			case "text":
				if f.Type != gjson.String {
					return true
				}
				// Text blocks are joined with "\n", as in a whole answer.
				if c.hasText && index != c.lastText {
					c.content = c.budget.Append(c.content, "\n")
				}
				c.content = c.budget.Append(c.content, f.Str)
				c.sketch.Text(index, f.Str)
				c.hasText, c.lastText = true, index
			case "toolUse":
				if in := jsontext.ObjectKey(f, "input"); in.Type == gjson.String {
					t := c.tool(index)
					t.input = c.budget.Append(t.input, in.Str)
				}
			case "reasoningContent":
				r := c.reason(index)
				f.ForEach(func(rk, rv gjson.Result) bool {
					switch rk.Str {
					case "text":
						r.text = c.budget.Append(r.text, rv.Str)
					case "signature":
						r.signature = c.budget.Append(r.signature, rv.Str)
						r.sawSig = true
					case "redactedContent":
						r.redacted = c.budget.Append(r.redacted, rv.Str)
					}
					return true
				})
			}
			return true
		})
	case "messageStop":
		c.done = true
	case "metadata":
		c.usage = converseUsage.Read(jsontext.ObjectKey(v, "usage"))
	}
}

// tool returns the accumulator of the toolUse block at index, adding it when new.
func (c *converseAcc) tool(index int64) *toolAcc {
	if i, ok := c.toolAt[index]; ok {
		return &c.tools[i]
	}
	if !c.budget.Take(toolSize) {
		return &toolAcc{} // past the budget: dropped
	}
	if c.toolAt == nil {
		c.toolAt = make(map[int64]int)
	}
	c.toolAt[index] = len(c.tools)
	c.tools = append(c.tools, toolAcc{index: index})
	return &c.tools[len(c.tools)-1]
}

// message returns the answer so far: the text deltas joined, and the tool calls
// in block order with their input fragments joined (compact JSON; "{}" when none
// came, as a whole answer gives for an empty input).
func (c *converseAcc) message() protocol.Message {
	m := protocol.Message{Role: c.role, Content: string(c.content)}
	if m.Role == "" {
		m.Role = "assistant"
	}
	if len(c.reasons) > 0 {
		reasons := slices.Clone(c.reasons)
		slices.SortFunc(reasons, func(a, b reasonAcc) int { return cmp.Compare(a.index, b.index) })
		for i := range reasons {
			m.Raw = append(m.Raw, protocol.RawJSON(reasons[i].raw()))
		}
	}
	if len(c.tools) == 0 {
		return m
	}
	tools := slices.Clone(c.tools)
	slices.SortFunc(tools, func(a, b toolAcc) int { return cmp.Compare(a.index, b.index) })
	m.ToolCalls = make([]protocol.ToolCall, len(tools))
	for i, t := range tools {
		args := string(t.input)
		switch {
		case len(bytes.TrimSpace(t.input)) == 0:
			args = "{}"
		case jsontext.Validate(t.input) == nil:
			args = jsontext.Compact(args)
		}
		m.ToolCalls[i] = protocol.ToolCall{ID: t.id, Type: "function", Name: t.name, Arguments: args}
	}
	return m
}

// llamaAcc assembles a Llama answer from its chunks (or its one whole body).
type llamaAcc struct {
	content []byte
	usage   protocol.Usage
	done    bool
	budget  protocol.Budget // what the answer may keep
	sketch  protocol.Sketch // of the whole answer, beside the budget
}

// chunk applies one {"generation","prompt_token_count","generation_token_count",
// "stop_reason"}; it reports whether the object had a generation string. Token
// counts are cumulative, so the largest seen wins.
func (l *llamaAcc) chunk(v gjson.Result) bool {
	if !v.IsObject() {
		return false
	}
	ok := false
	v.ForEach(func(k, f gjson.Result) bool {
		switch k.Str {
		case "generation":
			if f.Type == gjson.String {
				l.content = l.budget.Append(l.content, f.Str)
				l.sketch.Text(0, f.Str)
				ok = true
			}
		case "prompt_token_count":
			l.usage.InputTokens = max(l.usage.InputTokens, f.Int())
		case "generation_token_count":
			l.usage.OutputTokens = max(l.usage.OutputTokens, f.Int())
		case "stop_reason":
			if f.Type == gjson.String && f.Str != "" {
				l.done = true
			}
		}
		return true
	})
	return ok
}

func (l *llamaAcc) message() protocol.Message {
	return protocol.Message{Role: "assistant", Content: string(l.content)}
}
