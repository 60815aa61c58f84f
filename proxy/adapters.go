package proxy

import (
	"bytes"
	"errors"

	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/anthropic"
	"github.com/camproxy/camproxy/protocol/bedrock"
	"github.com/camproxy/camproxy/protocol/openai"
	"github.com/camproxy/camproxy/protocol/responses"
)

// adapter is one wire protocol as the data plane sees it. Adding a protocol is one
// package under protocol/ and one entry in adapters (plus its upstream's config block).
type adapter struct {
	name     string // metric label and the episode's protocol
	upstream string // the Options.Upstreams key its calls go to
	provider string // the GenAI semantic-conventions provider, for spans
	style    Style  // the error shape its SDKs read
	// owns says whether a call the pipeline does not take belongs to this protocol's
	// upstream (models, files, count-tokens …); nil: none but those it augments.
	owns func(fc *fasthttp.RequestCtx) bool
	// augments says whether an owned call goes through the pipeline; it is decided
	// on the path alone, before the body is touched.
	augments func(fc *fasthttp.RequestCtx) bool
	// parse reads an augmented call's body. errPass: a body camproxy does not read
	// (a model family it does not know), forwarded untouched.
	parse func(fc *fasthttp.RequestCtx, body []byte, rules []protocol.TaskRule) (protocol.Request, error)
}

// errPass marks a call camproxy forwards untouched because it cannot read its body.
var errPass = errors.New("body not understood; forwarded untouched")

// adapters are looked up in order; the last one owns every call the others do not.
var adapters = []*adapter{
	{name: "bedrock", upstream: "bedrock", provider: "aws.bedrock", style: StyleAWS,
		owns: func(fc *fasthttp.RequestCtx) bool { return bytes.HasPrefix(fc.URI().PathOriginal(), []byte("/model/")) },
		augments: func(fc *fasthttp.RequestCtx) bool {
			raw := fc.URI().PathOriginal()
			return bytes.HasPrefix(raw, []byte("/model/")) && isBedrockOp(raw)
		},
		parse: parseBedrock},
	{name: "anthropic", upstream: "anthropic", provider: "anthropic", style: StyleAnthropic,
		owns: func(fc *fasthttp.RequestCtx) bool {
			return bytes.HasPrefix(fc.Path(), []byte("/v1/messages")) || len(fc.Request.Header.Peek("Anthropic-Version")) > 0
		},
		augments: pathIs("/v1/messages"),
		parse:    body(anthropic.Parse)},
	{name: "openai", upstream: "openai", provider: "openai", style: StyleOpenAI,
		augments: pathIs("/v1/responses"), parse: body(responses.Parse)},
	{name: "openai", upstream: "openai", provider: "openai", style: StyleOpenAI,
		owns:     func(*fasthttp.RequestCtx) bool { return true },
		augments: pathIs("/v1/chat/completions"),
		parse:    body(openai.Parse)},
}

func pathIs(p string) func(*fasthttp.RequestCtx) bool {
	return func(fc *fasthttp.RequestCtx) bool { return string(fc.Path()) == p }
}

// body adapts a parser that reads the body alone.
func body[R protocol.Request](parse func([]byte, []protocol.TaskRule) (R, error)) func(*fasthttp.RequestCtx, []byte, []protocol.TaskRule) (protocol.Request, error) {
	return func(_ *fasthttp.RequestCtx, b []byte, rules []protocol.TaskRule) (protocol.Request, error) {
		r, err := parse(b, rules)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
}

// parseBedrock reads the operation and model id from the raw path (model ids arrive
// percent-encoded) and the body by model family.
func parseBedrock(fc *fasthttp.RequestCtx, body []byte, rules []protocol.TaskRule) (protocol.Request, error) {
	model, op, err := bedrock.ParsePath(string(fc.URI().PathOriginal()))
	if err != nil {
		return nil, err
	}
	req, err := bedrock.Parse(op, model, body, rules)
	if errors.Is(err, bedrock.ErrUnsupported) {
		return nil, errPass
	}
	return req, err
}

// isBedrockOp reports whether a raw /model/ path names one of the four augmented
// operations; others (count-tokens, async invoke …) are passed through.
func isBedrockOp(raw []byte) bool {
	for _, op := range [][]byte{[]byte("/converse"), []byte("/converse-stream"), []byte("/invoke"), []byte("/invoke-with-response-stream")} {
		if bytes.HasSuffix(raw, op) {
			return true
		}
	}
	return false
}

// route is an adapter bound to its configured upstream.
type route struct {
	*adapter
	up *Upstream
}

// buildRoutes binds each adapter whose upstream is configured. A protocol without
// one has no route: its calls fall to the next adapter that owns them (in the end
// the OpenAI-compatible upstream, which receives them untouched).
func buildRoutes(ups map[string]*Upstream) []route {
	var rs []route
	for _, ad := range adapters {
		if up := ups[ad.upstream]; up != nil {
			rs = append(rs, route{adapter: ad, up: up})
		}
	}
	return rs
}

// lookup is the one place a call is matched to its protocol: the route whose
// augmented paths it is on, else the first that owns it (the last owns every call).
func (s *Server) lookup(fc *fasthttp.RequestCtx) (rt *route, augmented bool) {
	for i := range s.routes {
		if s.routes[i].augments(fc) {
			return &s.routes[i], true
		}
	}
	for i := range s.routes {
		if own := s.routes[i].owns; own != nil && own(fc) {
			return &s.routes[i], false
		}
	}
	return &s.routes[len(s.routes)-1], false
}

// styleFor picks the error shape of a call by its protocol, for failures before the
// handler ran (too large, malformed HTTP).
func styleFor(fc *fasthttp.RequestCtx) Style {
	for _, ad := range adapters {
		if ad.augments(fc) || ad.owns != nil && ad.owns(fc) {
			return ad.style
		}
	}
	return StyleOpenAI
}
