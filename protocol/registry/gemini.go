package registry

import (
	"bytes"
	"errors"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/gemini"
)

// Gemini is Google's Gemini API (generativelanguage's /v1beta/models/{m}:…) and
// Vertex AI's publisher paths of the same methods. generateContent and
// streamGenerateContent are augmented; it owns the rest of its API (countTokens,
// model listing, files, caches …) and Vertex's /v1/projects/ paths, which go to its
// upstream untouched.
var Gemini = &Protocol{Name: "gemini", Explain: "gemini", Provider: Google, Example: "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
	Augments: func(c Call) bool {
		p, ok := gemini.ParsePath(string(c.Path()))
		return ok && p.Augmented()
	},
	Owns: func(c Call) bool {
		path := c.Path()
		if _, ok := gemini.ParsePath(string(path)); ok {
			return true
		}
		for _, prefix := range [][]byte{[]byte("/v1beta/"), []byte("/v1alpha/"), []byte("/v1/projects/"), []byte("/v1beta1/projects/"), []byte("/upload/v1beta/")} {
			if bytes.HasPrefix(path, prefix) {
				return true
			}
		}
		return string(path) == "/v1beta"
	},
	Parse:     parseGemini,
	ParseBody: parseGeminiBody,
	// A top-level "contents" array and no "messages": nothing else is shaped so.
	Sniff: func(root gjson.Result) bool {
		return root.Get("contents").IsArray() && !root.Get("messages").Exists()
	},
	Errors: GoogleErrors,
	// streamGenerateContent without alt=sse answers a JSON array written element by
	// element: application/json that must be relayed as it comes. generateContent's
	// application/json is one object, buffered like every other JSON answer.
	Streams: []string{"application/json"},
	StreamsOn: func(c Call) bool {
		p, ok := gemini.ParsePath(string(c.Path()))
		return ok && p.Method == gemini.MethodStream
	},
}

// parseGemini reads the model and the answer's framing from the path (and its alt
// query parameter): neither is in a Gemini body.
func parseGemini(c Call, body []byte, rules []protocol.TaskRule) (protocol.Request, error) {
	p, ok := gemini.ParsePath(string(c.Path()))
	if !ok {
		return nil, errors.New("not a Gemini API model path")
	}
	return gemini.Parse(body, rules, p.Model, gemini.FramingOf(p.Method, string(c.Query("alt"))))
}

// parseGeminiBody reads a body without its path (task explain): no model, and the
// framing of generateContent, which the task does not depend on.
func parseGeminiBody(body []byte, rules []protocol.TaskRule) (protocol.Request, error) {
	return gemini.Parse(body, rules, "", gemini.FrameJSON)
}
