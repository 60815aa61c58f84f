// Package anthropic is the adapter for the Anthropic Messages API (POST /v1/messages,
// and the Claude body of Bedrock InvokeModel): it reads a request body into a
// protocol view normalised to the OpenAI chat shape, splices context into it by
// byte insertion, and decodes answers (JSON, SSE streams and already-framed stream
// events) into normalised messages.
//
// Nothing here re-marshals a body: reading goes through gjson, which reports the raw
// byte offset of every value, and writing is a single insertion at such an offset
// (protocol/jsontext), so that every byte the client sent reaches the upstream
// unchanged.
package anthropic

import (
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
	"github.com/tidwall/gjson"
)

// Request is a parsed POST /v1/messages body (also the body of Bedrock InvokeModel
// for Claude): the view, and where in the body each placement inserts.
type Request struct {
	protocol.View // Model, Stream, Messages (normalised), Task ("" when no rule matched)

	// bodyLen is the length of the parsed body: SpliceTo refuses a different body
	// rather than inserting at offsets that mean nothing in it.
	bodyLen int
	// task says where the task sits; meaningful only when Task != "".
	task taskSpot
	// sys says where the System placement inserts.
	sys anchor
	// arrOpen is the offset of the '[' that opens the messages array.
	arrOpen int
	// wireMessages is the number of elements of the messages array.
	wireMessages int
}

var _ protocol.Request = (*Request)(nil)

// taskSpot locates the task inside the raw body.
type taskSpot struct {
	at    int    // raw offset right after the task text (AppendToTask inserts here)
	after anchor // where NewMessage inserts its user message
}

// Parse reads a Messages API body; the model and stream flags come from the body.
// rules are tried in order; the first that matches sets Task. A body whose task no
// rule finds parses fine with Task "".
func Parse(body []byte, rules []protocol.TaskRule) (*Request, error) {
	return parse(body, rules, nil)
}

// ParseBody reads a body whose model and streaming are decided outside it: Bedrock
// InvokeModel names the model in the path and streams by route, and its body holds
// anthropic_version instead of model. Any model or stream key of the body is ignored.
func ParseBody(body []byte, rules []protocol.TaskRule, model string, stream bool) (*Request, error) {
	return parse(body, rules, &protocol.View{Model: model, Stream: stream})
}

// parse reads body; outside, when not nil, holds the model and stream to use.
func parse(body []byte, rules []protocol.TaskRule, outside *protocol.View) (*Request, error) {
	// Elements sent before are validated once, when first read (memo).
	hits := memo.Hits()
	defer hits.Release()
	// Read in place, never retained: the model and system prompt are copied, and
	// messages are read from private copies of their bytes (memo), so the view stays
	// valid after the caller reuses its buffer.
	js, open, err := jsontext.Object(body, hits)
	if err != nil {
		return nil, err
	}
	r := &Request{bodyLen: len(body)}
	var system gjson.Result
	msgs := -1
	// One walk of the body. Last key wins on duplicates, as in the Python and Go
	// decoders upstream.
	closing := jsontext.Members(body, js, open, func(key string, v int) int {
		switch key {
		case "model":
			var end int
			r.Model, end = jsontext.CloneString(body, js, v) // "" unless a string
			return end
		case "stream":
			r.Stream = body[v] == 't'
		case "system":
			var end int
			system, end = jsontext.DetachAt(body, js, v)
			return end
		case "messages":
			msgs = v
			if body[v] == '[' {
				r.arrOpen = v
				return jsontext.ReadElements(body, v, hits, readElement)
			}
		}
		return -1
	}) - 1
	if outside != nil {
		r.Model, r.Stream = outside.Model, outside.Stream
	}
	if msgs < 0 || body[msgs] != '[' {
		return nil, protocol.Missing("messages", "an array")
	}
	sys, segs := r.readSystem(system, open, closing)
	segs = r.setMessages(hits.Walked(), sys, segs)
	r.findTask(rules, body, segs)
	return r, nil
}

// Parsed returns the call's view.
func (r *Request) Parsed() *protocol.View { return &r.View }
