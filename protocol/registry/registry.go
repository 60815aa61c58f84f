// Package registry is camproxy's one table of wire protocols. Each Protocol carries
// everything the data plane and the CLI need to know of its wire: which paths it
// augments and which it owns, how its body is parsed, the error body its SDKs read
// and whether a broken stream may end with an error event, how its answers stream,
// and the Provider (upstream) its calls go to, with that upstream's auth kind and
// default base URL. The proxy's lookup, its error mapping and streaming decisions,
// the app's upstreams and `camproxy task explain` all read this table, so they
// cannot disagree. Adding a protocol is its package under protocol/, one file here
// with its entry, and its place in All.
package registry

import (
	"bytes"
	"errors"
	"net/url"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// Call is what a lookup and a parse see of a request. The proxy implements it over
// its fasthttp request without allocating; task explain over a path alone.
type Call interface {
	Path() []byte              // decoded and normalised
	RawPath() []byte           // as sent (Bedrock model ids arrive percent-encoded)
	Header(name string) []byte // nil when absent
	Query(name string) []byte  // a query parameter's decoded value; nil when absent
}

// ErrPass marks a call camproxy forwards untouched because it cannot read its body
// (a model family it does not know).
var ErrPass = errors.New("body not understood; forwarded untouched")

// Protocol is one wire API as camproxy serves it.
type Protocol struct {
	// Name is the metric label and the episode's protocol (two protocols of one
	// provider may share it: OpenAI's Responses and Chat Completions are "openai").
	Name string
	// Explain is the protocol's name in `camproxy task explain --protocol`: unique.
	Explain  string
	Provider *Provider
	// Example is one augmented path (for docs and the registry's tests).
	Example string
	// Augments says whether a call goes through the pipeline; it is decided on the
	// path (and headers) alone, before the body is touched.
	Augments func(Call) bool
	// Owns says whether a call the pipeline does not take belongs to this protocol's
	// upstream (models, files, count-tokens …); nil: none but those it augments.
	Owns func(Call) bool
	// Parse reads an augmented call's body. ErrPass: forwarded untouched.
	Parse func(c Call, body []byte, rules []protocol.TaskRule) (protocol.Request, error)
	// ParseBody reads a body without its path, as task explain has it; it is Parse
	// for every protocol whose path adds nothing to the body.
	ParseBody func(body []byte, rules []protocol.TaskRule) (protocol.Request, error)
	// Sniff tells, from a body's top level, that it is this protocol's (task explain
	// without --protocol); SniffBlock from one content block of its messages. Both
	// are tried in All's order; a body no protocol claims is Fallback's.
	Sniff      func(root gjson.Result) bool
	SniffBlock func(block gjson.Result) bool
	// Errors is the error shape its SDKs read.
	Errors *Errors
	// Streams are the content types (prefixes) relayed chunk by chunk besides the
	// ones every protocol streams (StreamTypes); StreamsOn, when set, limits them to
	// the calls it accepts (Gemini's JSON-array stream is application/json, which
	// its other methods answer whole).
	Streams   []string
	StreamsOn func(Call) bool
}

// StreamTypes are the answers every route relays chunk by chunk rather than buffers:
// SSE, and AWS event streams (what any route's upstream may answer when it streams).
var StreamTypes = []string{"text/event-stream", "application/vnd.amazon.eventstream"}

// Streamed says whether the answer of content type ct to call c on p's route is
// relayed chunk by chunk.
func (p *Protocol) Streamed(c Call, ct []byte) bool {
	extra := p.Streams
	if p.StreamsOn != nil && !p.StreamsOn(c) {
		extra = nil
	}
	for _, types := range [2][]string{StreamTypes, extra} {
		for _, t := range types {
			if bytes.HasPrefix(ct, []byte(t)) {
				return true
			}
		}
	}
	return false
}

// All are the protocols in lookup order: a call is the first one's that augments it,
// else the first's that owns it; the last (Fallback) owns every call the others do not.
var All = []*Protocol{Responses, AzureResponses, AzureChat, Bedrock, Messages, Gemini, Chat}

// Fallback owns the calls no other protocol does: the OpenAI-compatible upstream
// receives them untouched.
var Fallback = Chat

// Match is the one place a call is matched to its protocol, among ps (All, or the
// ones whose upstream is configured, in All's order): the one whose augmented paths
// it is on, else the first that owns it, else the last of ps. It reports -1 for
// an empty ps.
func Match(ps []*Protocol, c Call) (i int, augmented bool) {
	for i, p := range ps {
		if p.Augments(c) {
			return i, true
		}
	}
	for i, p := range ps {
		if p.Owns != nil && p.Owns(c) {
			return i, false
		}
	}
	return len(ps) - 1, false
}

// ByExplain is the protocol task explain names name, or nil.
func ByExplain(name string) *Protocol {
	for _, p := range All {
		if p.Explain == name {
			return p
		}
	}
	return nil
}

// ExplainNames are task explain's --protocol choices, in All's order.
func ExplainNames() []string {
	names := make([]string, len(All))
	for i, p := range All {
		names[i] = p.Explain
	}
	return names
}

// Detect tells a body's protocol from its shape: the first protocol whose Sniff
// claims the top level, else the first whose SniffBlock claims a content block of
// its messages (blocks in order), else Fallback. A body plain enough to be several
// reads the same in each.
func Detect(body []byte) (*Protocol, error) {
	if _, _, err := jsontext.Object(body, nil); err != nil {
		return nil, err
	}
	root := gjson.ParseBytes(body)
	for _, p := range All {
		if p.Sniff != nil && p.Sniff(root) {
			return p, nil
		}
	}
	found := Fallback
	root.Get("messages").ForEach(func(_, m gjson.Result) bool {
		m.Get("content").ForEach(func(_, b gjson.Result) bool {
			for _, p := range All {
				if p.SniffBlock != nil && p.SniffBlock(b) {
					found = p
					return false
				}
			}
			return true
		})
		return found == Fallback
	})
	return found, nil
}

// PathCall is a Call of a path and its query alone, no headers (task explain, tests).
type PathCall string

func (p PathCall) Path() []byte {
	path, _, _ := strings.Cut(string(p), "?")
	return []byte(path)
}
func (p PathCall) RawPath() []byte    { return p.Path() }
func (PathCall) Header(string) []byte { return nil }
func (p PathCall) Query(name string) []byte {
	_, query, _ := strings.Cut(string(p), "?")
	q, err := url.ParseQuery(query)
	if err != nil || !q.Has(name) {
		return nil
	}
	return []byte(q.Get(name))
}

// pathIs augments exactly one decoded path.
func pathIs(p string) func(Call) bool {
	return func(c Call) bool { return string(c.Path()) == p }
}

// body adapts a parser that reads the body alone.
func body[R protocol.Request](parse func([]byte, []protocol.TaskRule) (R, error)) func([]byte, []protocol.TaskRule) (protocol.Request, error) {
	return func(b []byte, rules []protocol.TaskRule) (protocol.Request, error) {
		r, err := parse(b, rules)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
}

// bodyOnly is Parse for a protocol whose path adds nothing to the body.
func bodyOnly(parse func([]byte, []protocol.TaskRule) (protocol.Request, error)) func(Call, []byte, []protocol.TaskRule) (protocol.Request, error) {
	return func(_ Call, b []byte, rules []protocol.TaskRule) (protocol.Request, error) { return parse(b, rules) }
}
