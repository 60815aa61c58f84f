package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/openai"
)

// buildRoutes makes the augmented routes of the configured upstreams.
func (s *Server) buildRoutes() {
	s.openaiRoute = &route{proto: "openai", up: s.openai, style: StyleOpenAI,
		parse: func(_ *fasthttp.RequestCtx, body []byte) (protocol.Request, error) {
			return openai.Parse(body, s.rules)
		}}
}

// route returns the augmented route a call belongs to, or nil for passthrough.
// Bedrock is routed on the raw path: model ids arrive percent-encoded.
func (s *Server) route(fc *fasthttp.RequestCtx) *route {
	switch string(fc.Path()) {
	case "/v1/chat/completions":
		return s.openaiRoute
	}
	return nil
}

// passUpstream picks the upstream of a call camproxy does not augment.
func (s *Server) passUpstream(fc *fasthttp.RequestCtx) *Upstream {
	if s.bedrock != nil && bytes.HasPrefix(fc.URI().PathOriginal(), []byte("/model/")) {
		return s.bedrock
	}
	if s.anthropic != nil && len(fc.Request.Header.Peek("Anthropic-Version")) > 0 {
		return s.anthropic
	}
	return s.openai
}
