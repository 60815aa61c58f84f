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
	"fmt"
	"strings"
	"unsafe"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
	"github.com/tidwall/gjson"
)

// Request is a parsed POST /v1/messages body (also the body of Bedrock InvokeModel
// for Claude): the view, and where in the body each placement inserts.
type Request struct {
	protocol.View // Model, Stream, Messages (normalised), Task ("" when no rule matched)

	// bodyLen is the length of the parsed body: Splice refuses a different body
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
	if err := jsontext.Validate(body); err != nil {
		return nil, err
	}
	// Read in place, never retained: the model and system prompt are copied, and
	// messages are read from private copies of their bytes (readMessages), so the
	// view stays valid after the caller reuses its buffer.
	js := unsafe.String(unsafe.SliceData(body), len(body))
	open, closing := jsontext.ObjectBounds(js)
	if open < 0 {
		return nil, fmt.Errorf("%w: the body is not a JSON object", protocol.ErrMissingMessages)
	}
	root := gjson.Result{Type: gjson.JSON, Raw: js}
	r := &Request{bodyLen: len(body)}
	var system, msgs gjson.Result
	// Last key wins on duplicates, as in the Python and Go decoders upstream.
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "model":
			r.Model = strings.Clone(v.Str) // "" unless a string
		case "stream":
			r.Stream = v.Type == gjson.True
		case "system":
			system = protocol.Detach(v)
		case "messages":
			msgs = v
		}
		return true
	})
	if outside != nil {
		r.Model, r.Stream = outside.Model, outside.Stream
	}
	if !msgs.IsArray() {
		return nil, fmt.Errorf("%w: \"messages\" is missing or not an array", protocol.ErrMissingMessages)
	}
	segs := r.readSystem(system, open, closing)
	segs = r.readMessages(body, msgs.Index, segs)
	r.findTask(rules, body, segs)
	return r, nil
}

// Parsed returns the call's view.
func (r *Request) Parsed() *protocol.View { return &r.View }
