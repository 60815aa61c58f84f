// Package bedrock is the adapter for the Amazon Bedrock Runtime API: Converse and
// ConverseStream, and InvokeModel and InvokeModelWithResponseStream for the model
// families whose bodies it can read (Anthropic Claude, Amazon Nova, Meta Llama). It
// reads a request body into a protocol view, splices context into it by byte
// insertion, and decodes answers (JSON bodies and AWS event streams) into normalised
// messages.
//
// As in the other adapters nothing here re-marshals a body: gjson reports the raw
// offset of every value, and a splice is one insertion at such an offset.
package bedrock

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/camproxy/camproxy/protocol"
)

// Errors of this adapter.
var (
	// ErrBadPath reports a path that does not name a Bedrock Runtime operation.
	ErrBadPath = errors.New("bedrock: path is not /model/{modelId}/{operation}")
	// ErrUnsupported reports an InvokeModel call this adapter cannot read: a model
	// family it does not know, or a body that does not parse. The proxy forwards
	// such a call untouched.
	ErrUnsupported = errors.New("bedrock: unsupported InvokeModel call")
)

// Op is one of the four Bedrock Runtime operations on a model.
type Op int

// The operations, named by the last segment of the path.
const (
	Converse       Op = iota // POST /model/{modelId}/converse
	ConverseStream           // POST /model/{modelId}/converse-stream
	Invoke                   // POST /model/{modelId}/invoke
	InvokeStream             // POST /model/{modelId}/invoke-with-response-stream
)

// opNames are the path segments of the operations, indexed by Op.
var opNames = [...]string{
	Converse:       "converse",
	ConverseStream: "converse-stream",
	Invoke:         "invoke",
	InvokeStream:   "invoke-with-response-stream",
}

// String returns the path segment of the operation.
func (o Op) String() string {
	if o >= 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Stream reports whether the operation answers with an AWS event stream.
func (o Op) Stream() bool { return o == ConverseStream || o == InvokeStream }

// ParsePath reads "/model/{modelId}/{op}" from the raw (percent-encoded) request
// path and returns the decoded model id. The id is everything between "/model/"
// and the last "/", so that an ARN a client did not escape still routes. A query
// string, if the caller left one on, is ignored. A model id that does not decode,
// an empty one or an unknown operation is an error wrapping ErrBadPath.
func ParsePath(raw string) (modelID string, op Op, err error) {
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		raw = raw[:i]
	}
	rest, ok := strings.CutPrefix(raw, "/model/")
	if !ok {
		return "", 0, fmt.Errorf("%w: %q", ErrBadPath, raw)
	}
	slash := strings.LastIndexByte(rest, '/')
	if slash < 0 {
		return "", 0, fmt.Errorf("%w: no operation in %q", ErrBadPath, raw)
	}
	escaped, name := rest[:slash], rest[slash+1:]
	op = -1
	for o, n := range opNames {
		if n == name {
			op = Op(o)
		}
	}
	if op < 0 {
		return "", 0, fmt.Errorf("%w: unknown operation %q", ErrBadPath, name)
	}
	modelID, err = url.PathUnescape(escaped)
	if err != nil {
		return "", 0, fmt.Errorf("%w: model id %q: %w", ErrBadPath, escaped, err)
	}
	if modelID == "" {
		return "", 0, fmt.Errorf("%w: empty model id", ErrBadPath)
	}
	return modelID, op, nil
}

// family is the model family whose InvokeModel body and answer a call carries.
type family int

const (
	famUnknown family = iota
	famClaude
	famNova
	famLlama
)

// familyOf tells the family of a model id: a foundation model id
// ("anthropic.claude-…"), an inference profile ("us.anthropic.claude-…",
// "global.anthropic.…") or an ARN whose last segment names one of them.
func familyOf(modelID string) family {
	name := modelID
	if strings.HasPrefix(name, "arn:") {
		name = name[strings.LastIndexByte(name, '/')+1:]
	}
	name = strings.ToLower(name)
	for _, candidate := range []string{name, afterDot(name)} {
		switch {
		case strings.HasPrefix(candidate, "anthropic."):
			return famClaude
		case strings.HasPrefix(candidate, "amazon.nova"):
			return famNova
		case strings.HasPrefix(candidate, "meta.llama"):
			return famLlama
		}
	}
	return famUnknown
}

// afterDot strips the geography prefix of an inference profile id ("us.", "eu.",
// "apac.", "global." …): what follows the first dot.
func afterDot(s string) string {
	if i := strings.IndexByte(s, '.'); i >= 0 {
		return s[i+1:]
	}
	return ""
}

// Parse reads the body of a call. Converse and ConverseStream bodies have the
// Converse shape. InvokeModel bodies are read by the model family: Anthropic Claude
// (an Anthropic Messages body), Amazon Nova (messages-v1, the Converse shape) and
// Meta Llama (a prompt). rules are tried in order; the first that matches sets the
// task.
//
// A Converse body that is not JSON is an error wrapping protocol.ErrInvalidJSON; one
// without a messages array wraps protocol.ErrMissingMessages. Every error of an
// InvokeModel call (another family, or a body of its family that does not parse)
// wraps ErrUnsupported, and the cause as well.
func Parse(op Op, modelID string, body []byte, rules []protocol.TaskRule) (protocol.Request, error) {
	switch op {
	case Converse, ConverseStream:
		r, err := parseConverse(body, rules, famUnknown, op)
		if err != nil {
			return nil, err
		}
		r.Model = modelID
		return r, nil
	case Invoke, InvokeStream:
	default:
		return nil, fmt.Errorf("%w: unknown operation %v", ErrBadPath, op)
	}
	var (
		req protocol.Request
		err error
	)
	switch fam := familyOf(modelID); fam {
	case famClaude:
		var r *ClaudeRequest
		if r, err = parseClaude(body, rules, modelID, op); err == nil {
			req = r
		}
	case famNova:
		var r *ConverseRequest
		if r, err = parseConverse(body, rules, famNova, op); err == nil {
			r.Model = modelID
			req = r
		}
	case famLlama:
		var r *LlamaRequest
		if r, err = parseLlama(body, rules, op); err == nil {
			r.Model = modelID
			req = r
		}
	default:
		return nil, fmt.Errorf("%w: model %q is of no family this adapter reads", ErrUnsupported, modelID)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return req, nil
}

// The request types implement protocol.Request.
var (
	_ protocol.Request = (*ConverseRequest)(nil)
	_ protocol.Request = (*LlamaRequest)(nil)
	_ protocol.Request = (*ClaudeRequest)(nil)
	_ protocol.Decoder = (*streamDecoder)(nil)
	_ protocol.Decoder = (*jsonDecoder)(nil)
)
