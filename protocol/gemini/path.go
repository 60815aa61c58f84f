// Package gemini is the adapter for Google's Gemini API (generativelanguage's
// /v1beta/models/{model}:generateContent and :streamGenerateContent, and Vertex AI's
// publisher paths of the same methods): it reads a request body into a protocol view
// normalised to the OpenAI chat shape, splices context into it by byte insertion,
// and decodes answers — a JSON body, an SSE stream (alt=sse) or a streamed JSON
// array (no alt) — into normalised messages.
//
// Nothing here re-marshals a body: values are read with their raw offsets
// (protocol/jsontext) and a splice is one insertion at such an offset, so that every
// byte the client sent reaches the upstream unchanged.
package gemini

import (
	"strconv"
	"strings"

	"github.com/camproxy/camproxy/protocol"
)

// Methods of the API that a path names after the model (":method").
const (
	MethodGenerate    = "generateContent"
	MethodStream      = "streamGenerateContent"
	MethodCountTokens = "countTokens"
)

// Path is what a Gemini API path says: the model and the method, and for Vertex AI
// the project and location.
type Path struct {
	Version string // "v1beta", "v1", "v1alpha"…
	Model   string // the model id, without "models/" ("gemini-2.5-pro")
	Method  string // generateContent, streamGenerateContent, countTokens…
	// Vertex is set for /v1/projects/{p}/locations/{l}/publishers/google/models/{m}:…
	Vertex            bool
	Project, Location string
}

// Augmented reports whether calls of the path's method carry a conversation that
// camproxy augments and records: generateContent and streamGenerateContent. Others
// (countTokens, embedContent…) pass through.
func (p Path) Augmented() bool { return p.Method == MethodGenerate || p.Method == MethodStream }

// ParsePath reads a Gemini API or Vertex AI path (without its query). Model listing
// (GET /v1beta/models) and other paths that name no model method give false: they
// pass through.
//
//	/{version}/models/{model}:{method}
//	/{version}/projects/{p}/locations/{l}/publishers/google/models/{model}:{method}
func ParsePath(path string) (Path, bool) {
	rest, ok := strings.CutPrefix(path, "/")
	if !ok {
		return Path{}, false
	}
	version, rest, ok := strings.Cut(rest, "/")
	if !ok || !strings.HasPrefix(version, "v1") {
		return Path{}, false
	}
	p := Path{Version: version}
	if after, ok := strings.CutPrefix(rest, "projects/"); ok {
		// projects/{p}/locations/{l}/publishers/google/models/{m}:{method}
		seg := strings.SplitN(after, "/", 6)
		if len(seg) != 6 || seg[1] != "locations" || seg[3] != "publishers" || seg[4] != "google" {
			return Path{}, false
		}
		p.Vertex, p.Project, p.Location = true, seg[0], seg[2]
		rest = seg[5]
	}
	rest, ok = strings.CutPrefix(rest, "models/")
	if !ok {
		return Path{}, false
	}
	p.Model, p.Method, ok = strings.Cut(rest, ":")
	if !ok || p.Model == "" || p.Method == "" || strings.Contains(p.Model, "/") || p.Project == "" && p.Vertex {
		return Path{}, false
	}
	return p, true
}

// Framing is how an answer is framed on the wire.
type Framing uint8

const (
	// FrameJSON is one GenerateContentResponse (generateContent).
	FrameJSON Framing = iota
	// FrameSSE is streamGenerateContent?alt=sse: one "data: {GenerateContentResponse}"
	// event per chunk.
	FrameSSE
	// FrameArray is streamGenerateContent without alt: a JSON array of
	// GenerateContentResponse objects, written element by element as they are made.
	FrameArray
)

// FramingOf is the framing of the answer to method called with the query parameter
// alt ("" when absent): streamGenerateContent streams SSE only with alt=sse.
func FramingOf(method, alt string) Framing {
	switch {
	case method != MethodStream:
		return FrameJSON
	case alt == "sse":
		return FrameSSE
	}
	return FrameArray
}

// ContentType is the Content-Type the API answers a framing with. The JSON array
// stream is application/json too: a client that reads it whole still reads JSON.
func (f Framing) ContentType() string {
	if f == FrameSSE {
		return "text/event-stream"
	}
	return "application/json; charset=UTF-8"
}

// Streamed reports whether the answer comes in chunks as they are made.
func (f Framing) Streamed() bool { return f != FrameJSON }

// Auth kinds Google's clients send a credential by.
const (
	// HeaderAPIKey is the Gemini API key header (@google/genai, Gemini CLI).
	HeaderAPIKey = "x-goog-api-key"
	// QueryAPIKey is the query parameter older clients and curl examples use (?key=).
	QueryAPIKey = "key"
	// Vertex AI clients send an OAuth access token: "Authorization: Bearer …".
)

// ErrorBody is the API's error body for an HTTP status and message, as Google's
// APIs write it ({"error":{"code","message","status"}}): what camproxy answers
// when it refuses a Gemini call, so that the client's SDK reads it as the API's.
func ErrorBody(status int, msg string) []byte {
	b := []byte(`{"error":{"code":`)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"message":`...)
	b = protocol.AppendString(b, msg)
	b = append(b, `,"status":`...)
	b = protocol.AppendString(b, StatusName(status))
	return append(b, "}}"...)
}

// StatusName is the google.rpc.Code name an HTTP status maps to in Google's APIs.
func StatusName(status int) string {
	switch status {
	case 400:
		return "INVALID_ARGUMENT"
	case 401:
		return "UNAUTHENTICATED"
	case 403:
		return "PERMISSION_DENIED"
	case 404:
		return "NOT_FOUND"
	case 409:
		return "ABORTED"
	case 429:
		return "RESOURCE_EXHAUSTED"
	case 499:
		return "CANCELLED"
	case 501:
		return "UNIMPLEMENTED"
	case 503:
		return "UNAVAILABLE"
	case 504:
		return "DEADLINE_EXCEEDED"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}
