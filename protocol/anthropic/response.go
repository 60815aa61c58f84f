package anthropic

import (
	"errors"
	"fmt"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
	"github.com/tidwall/gjson"
)

// maxBody bounds the answer a JSONDecoder buffers; past it the decode is given up
// rather than the memory unbounded.
const maxBody = 64 << 20

// errNoMessage reports an answer without a content array, such as an error body.
var errNoMessage = errors.New("anthropic: response has no content array")

// Decoder returns a fresh decoder for this call's answer: the SSE decoder when the
// call streams, else the JSON message decoder.
func (r *Request) Decoder() protocol.Decoder {
	if r.Stream {
		return &StreamDecoder{}
	}
	return &JSONDecoder{}
}

// DecodeResponse reads a non-streamed answer, {"type":"message","role":"assistant",
// "content":[…],"usage":{…}}: its text blocks joined with "\n", its tool_use blocks as
// tool calls (compact JSON arguments), and its usage. Usage is returned even when the
// message is missing; an error body gives an error naming its type and message.
//
// Usage.InputTokens counts every input token: input_tokens plus the tokens written
// to and read from the prompt cache, which Anthropic reports apart.
func DecodeResponse(body []byte) (protocol.Message, protocol.Usage, error) {
	if err := jsontext.Validate(body); err != nil {
		return protocol.Message{}, protocol.Usage{}, err
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return protocol.Message{}, protocol.Usage{}, errNoMessage
	}
	var typ, role, content, usage, apiErr gjson.Result
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "type":
			typ = v
		case "role":
			role = v
		case "content":
			content = v
		case "usage":
			usage = v
		case "error":
			apiErr = v
		}
		return true
	})
	var u usageAcc
	u.read(usage)
	if typ.Str == "error" {
		return protocol.Message{}, u.usage(), fmt.Errorf("anthropic: error response: %s: %s",
			apiErr.Get("type").Str, apiErr.Get("message").Str)
	}
	if !content.IsArray() {
		return protocol.Message{}, u.usage(), errNoMessage
	}
	r := role.Str
	if r == "" {
		r = "assistant"
	}
	m, _ := blockMessage(r, content, nil, nil)
	for i, raw := range m.Raw {
		// Compact, as the stream's blocks are assembled: one answer, one record.
		m.Raw[i] = protocol.RawJSON(jsontext.Compact(string(raw)))
	}
	return m, u.usage(), nil
}

// usageAcc holds the token counts an answer reported so far.
type usageAcc struct {
	input, cacheWrite, cacheRead, output int64
	seen                                 bool // a usage object was read
}

// read sets the counts that v, a usage object, holds; the others stay as they were
// (a message_delta repeats only some).
func (u *usageAcc) read(v gjson.Result) {
	if !v.IsObject() {
		return
	}
	u.seen = true
	v.ForEach(func(k, n gjson.Result) bool {
		if n.Type != gjson.Number {
			return true
		}
		switch k.Str {
		case "input_tokens":
			u.input = n.Int()
		case "cache_creation_input_tokens":
			u.cacheWrite = n.Int()
		case "cache_read_input_tokens":
			u.cacheRead = n.Int()
		case "output_tokens":
			u.output = n.Int()
		}
		return true
	})
}

// usage is the protocol view: every input token, cached or not, is an input token.
func (u *usageAcc) usage() protocol.Usage {
	return protocol.Usage{InputTokens: u.input + u.cacheWrite + u.cacheRead, OutputTokens: u.output}
}

// JSONDecoder assembles a non-streamed answer from its bytes in any chunking: it is
// finished once the bytes written form a whole answer (DecodeResponse succeeds). It
// decodes lazily, when asked, and at most once per write that ends on '}'. The zero
// value is ready to use. It is not safe for concurrent use.
type JSONDecoder struct {
	buf    []byte
	tried  int  // len(buf) at the last decode attempt
	broken bool // the body outgrew maxBody
	done   bool
	msg    protocol.Message
	usage  protocol.Usage
	budget protocol.Budget  // what the answer may keep
	sketch *protocol.Sketch // the whole answer's, when the budget cut it
}

// Write buffers p. It never fails.
func (d *JSONDecoder) Write(p []byte) (int, error) {
	switch {
	case d.done || d.broken:
	case len(d.buf)+len(p) > maxBody:
		d.broken, d.buf = true, nil
	default:
		d.buf = append(d.buf, p...)
	}
	return len(p), nil
}

// decode tries the bytes written so far when they may be a whole object.
func (d *JSONDecoder) decode() {
	if d.done || d.broken || d.tried == len(d.buf) {
		return
	}
	d.tried = len(d.buf)
	end := len(d.buf) - 1
	for end >= 0 && (d.buf[end] == ' ' || d.buf[end] == '\n' || d.buf[end] == '\r' || d.buf[end] == '\t') {
		end--
	}
	if end < 0 || d.buf[end] != '}' {
		return
	}
	if m, u, err := DecodeResponse(d.buf); err == nil {
		d.sketch = d.budget.Trim(&m)
		d.msg, d.usage, d.done = m, u, true
		d.buf = nil
	}
}

// Finished reports whether the bytes written are a whole answer.
func (d *JSONDecoder) Finished() bool {
	d.decode()
	return d.done
}

// Message returns the answer; role "assistant" and nothing else until it is whole.
func (d *JSONDecoder) Message() protocol.Message {
	d.decode()
	if !d.done {
		return protocol.Message{Role: "assistant"}
	}
	return d.msg
}

// Usage returns the answer's usage; zero until it is whole.
func (d *JSONDecoder) Usage() protocol.Usage {
	d.decode()
	return d.usage
}

// Limit bounds the bytes of the answer kept (see protocol.Budget).
func (d *JSONDecoder) Limit(n int) { d.budget.Limit(n) }

// Truncated is how many bytes of the answer were dropped for the limit.
func (d *JSONDecoder) Truncated() int64 {
	d.decode()
	return d.budget.Truncated()
}

// Sketch is the whole answer's sketch; nil unless the budget cut it.
func (d *JSONDecoder) Sketch() *protocol.Sketch {
	d.decode()
	return d.sketch
}
