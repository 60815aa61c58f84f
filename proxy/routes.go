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

// buildRoutes makes the augmented routes of the configured upstreams.
func (s *Server) buildRoutes() {
	s.openaiRoute = &route{proto: "openai", up: s.openai, style: StyleOpenAI, parse: parseOpenAI}
	if s.anthropic != nil {
		s.anthropicRoute = &route{proto: "anthropic", up: s.anthropic, style: StyleAnthropic,
			parse: func(_ *fasthttp.RequestCtx, body []byte, rules []protocol.TaskRule) (protocol.Request, error) {
				return anthropic.Parse(body, rules)
			}}
	}
	if s.bedrock != nil {
		s.bedrockRoute = &route{proto: "bedrock", up: s.bedrock, style: StyleAWS, parse: s.parseBedrock}
	}
}

// parseOpenAI reads a body of the OpenAI upstream's augmented paths: the Responses
// API or chat completions.
func parseOpenAI(fc *fasthttp.RequestCtx, body []byte, rules []protocol.TaskRule) (protocol.Request, error) {
	if string(fc.Path()) == "/v1/responses" {
		return responses.Parse(body, rules)
	}
	return openai.Parse(body, rules)
}

// parseBedrock reads the operation and model id from the raw path and the body by
// model family. A body of a family camproxy does not know is forwarded untouched.
func (s *Server) parseBedrock(fc *fasthttp.RequestCtx, body []byte, rules []protocol.TaskRule) (protocol.Request, error) {
	model, op, err := bedrock.ParsePath(string(fc.URI().PathOriginal()))
	if err != nil {
		return nil, err
	}
	req, err := bedrock.Parse(op, model, body, rules)
	if errors.Is(err, bedrock.ErrUnsupported) {
		return nil, errSkip
	}
	return req, err
}

// route returns the augmented route a call belongs to, or nil for passthrough.
// Bedrock is routed on the raw path: model ids arrive percent-encoded.
func (s *Server) route(fc *fasthttp.RequestCtx) *route {
	if s.bedrockRoute != nil && bytes.HasPrefix(fc.URI().PathOriginal(), []byte("/model/")) {
		if isBedrockOp(fc.URI().PathOriginal()) {
			return s.bedrockRoute
		}
		return nil
	}
	switch string(fc.Path()) {
	case "/v1/chat/completions", "/v1/responses":
		return s.openaiRoute
	case "/v1/messages":
		return s.anthropicRoute
	}
	return nil
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
