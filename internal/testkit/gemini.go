package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"
)

// Gemini is a scripted Gemini API (generativelanguage v1beta) and its Vertex AI
// publisher paths:
//
//	POST /{v}/models/{model}:generateContent          one GenerateContentResponse
//	POST /{v}/models/{model}:streamGenerateContent    ?alt=sse: SSE, one chunk per event;
//	                                                  else a streamed JSON array of chunks
//	POST /{v}/models/{model}:countTokens              {"totalTokens": n}
//	GET  /{v}/models                                  the model list
//	/{v}/projects/{p}/locations/{l}/publishers/google/models/{model}:…  the same (Vertex)
//
// The API key comes in x-goog-api-key or ?key= (Vertex: Authorization: Bearer).
// Streams are framed as the API frames them: SSE events end in "\r\n\r\n", array
// elements are indented objects separated by ",\r\n"; text comes in word-sized
// chunks, each function call whole in one chunk with a thought signature (Gemini 3
// models sign their first call), and usageMetadata rides on every chunk.
type Gemini struct {
	*httptest.Server

	// APIKey, when set, is the only key (or Vertex bearer token) accepted; "" accepts
	// any non-empty one.
	APIKey string
	// ReplyFn scripts the answer; nil = DefaultGeminiReply. Reply.Status ≥ 400
	// answers a Google API error with that status.
	ReplyFn func(body gjson.Result) Reply
	// Thoughts, when set, is a thought summary the model streams before its answer
	// (a part with "thought": true), as with includeThoughts.
	Thoughts string
	// Delay before answering (headers included).
	Delay time.Duration
	// HangAfter > 0: after that many chunks, stop sending and wait until the caller
	// goes away.
	HangAfter int
	// ErrorAfter > 0: after that many chunks, send an error object (503 UNAVAILABLE,
	// as the API does when the model is overloaded mid-answer) and end the stream.
	ErrorAfter int
	// ResetAfter > 0: after that many chunks, drop the connection without ending the
	// body (no last chunk of the chunked encoding, no closing "]" of an array): a
	// stream cut short, as by a crashed backend or a dropped connection.
	ResetAfter int

	mu      sync.Mutex
	answers atomic.Int64 // numbers each answer's responseId
	callLog[Captured]
}

// NewGemini starts a scripted Gemini API on loopback.
func NewGemini() *Gemini {
	g := &Gemini{callLog: newCallLog[Captured]()}
	g.Server = httptest.NewServer(http.HandlerFunc(g.serve))
	return g
}

// Configure changes the fake's settings under its lock (see Anthropic.Configure).
func (g *Gemini) Configure(fn func(*Gemini)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fn(g)
}

type geminiSettings struct {
	apiKey                            string
	replyFn                           func(body gjson.Result) Reply
	thoughts                          string
	delay                             time.Duration
	hangAfter, errorAfter, resetAfter int
}

func (g *Gemini) settings() geminiSettings {
	g.mu.Lock()
	defer g.mu.Unlock()
	return geminiSettings{g.APIKey, g.ReplyFn, g.Thoughts, g.Delay, g.HangAfter, g.ErrorAfter, g.ResetAfter}
}

// GeminiError is a Google API error body.
func GeminiError(status int, msg string) []byte {
	names := map[int]string{400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
		404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
	name := names[status]
	if name == "" {
		name = "UNKNOWN"
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": status, "message": msg, "status": name}})
	return b
}

func writeGeminiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(GeminiError(status, msg))
}

// geminiRoute splits a path into its model and method; vertex says which form.
func geminiRoute(path string) (model, method string, vertex, ok bool) {
	rest := path
	if i := strings.Index(rest, "/publishers/google/models/"); i >= 0 && strings.Contains(rest[:i], "/projects/") {
		rest, vertex = rest[i+len("/publishers/google/models/"):], true
	} else if i := strings.Index(rest, "/models/"); i >= 0 {
		rest = rest[i+len("/models/"):]
	} else {
		return "", "", false, false
	}
	model, method, ok = strings.Cut(rest, ":")
	return model, method, vertex, ok
}

func (g *Gemini) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	set := g.settings()
	g.add(Captured{Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body})

	model, method, vertex, routed := geminiRoute(r.URL.Path)
	key := r.Header.Get("X-Goog-Api-Key")
	if key == "" {
		key = r.URL.Query().Get("key")
	}
	if vertex || key == "" {
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			key = tok
		}
	}
	switch {
	case key == "":
		writeGeminiError(w, http.StatusForbidden, "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.")
		return
	case set.apiKey != "" && key != set.apiKey:
		writeGeminiError(w, http.StatusBadRequest, "API key not valid. Please pass a valid API key.")
		return
	}
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models") {
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		_, _ = w.Write([]byte(`{"models":[{"name":"models/gemini-3-pro-preview","displayName":"Gemini 3 Pro Preview","supportedGenerationMethods":["generateContent","countTokens"]},` +
			`{"name":"models/gemini-2.5-flash","displayName":"Gemini 2.5 Flash","supportedGenerationMethods":["generateContent","countTokens"]}]}`))
		return
	}
	if r.Method != http.MethodPost || !routed {
		writeGeminiError(w, http.StatusNotFound, "Requested entity was not found.")
		return
	}
	if !gjson.ValidBytes(body) {
		writeGeminiError(w, http.StatusBadRequest, "Invalid JSON payload received.")
		return
	}
	req := gjson.ParseBytes(body)
	inTok := len(body) / 4
	switch method {
	case "countTokens":
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		_, _ = fmt.Fprintf(w, `{"totalTokens": %d}`, inTok)
		return
	case "generateContent", "streamGenerateContent":
	default:
		writeGeminiError(w, http.StatusNotFound, "Requested entity was not found.")
		return
	}
	if !req.Get("contents").IsArray() {
		writeGeminiError(w, http.StatusBadRequest, "* GenerateContentRequest.contents: contents is not specified")
		return
	}
	rep, ok := scriptedReply(w, r, set.delay, g.noteCancel, set.replyFn, DefaultGeminiReply, req)
	if !ok {
		return
	}
	if rep.Status >= 300 {
		writeGeminiError(w, rep.Status, rep.ErrorMsg)
		return
	}
	respID := fmt.Sprintf("fakeGeminiResp%04d", g.answers.Add(1))
	chunks := GeminiChunks(model, respID, set.thoughts, rep.Content, rep.ToolCalls, inTok)
	if method == "generateContent" {
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		out, _ := json.MarshalIndent(GeminiResponse(model, respID, set.thoughts, rep.Content, rep.ToolCalls, inTok), "", "  ")
		_, _ = w.Write(out)
		return
	}
	g.stream(set, w, r, chunks, r.URL.Query().Get("alt") == "sse")
}

// DefaultGeminiReply calls the request's first declared function (or "lookup") on
// the first turn and answers in text once a functionResponse is in.
func DefaultGeminiReply(body gjson.Result) Reply {
	contents := body.Get("contents").Array()
	if n := len(contents); n > 0 {
		for _, p := range contents[n-1].Get("parts").Array() {
			if p.Get("functionResponse").Exists() {
				return Reply{Content: fmt.Sprintf("Done after %d contents.", n)}
			}
		}
	}
	name := body.Get("tools.#.functionDeclarations.0.name").Array()
	tool := "lookup"
	if len(name) > 0 {
		tool = name[0].String()
	}
	return Reply{ToolCalls: []ToolCall{{Name: tool, Arguments: `{"query":"flight status","limit":3}`}}}
}

// geminiSignature is the thoughtSignature the fake puts on a function call part:
// opaque base64, as the API's.
const geminiSignature = "CiQBjz1rX2Zha2UtdGhvdWdodC1zaWduYXR1cmUtZm9yLXRlc3Rz"

// geminiParts is a reply's parts: the thought summary, the text, the calls.
func geminiParts(thoughts, text string, calls []ToolCall) []any {
	var parts []any
	if thoughts != "" {
		parts = append(parts, map[string]any{"text": thoughts, "thought": true})
	}
	if text != "" {
		parts = append(parts, map[string]any{"text": text})
	}
	for i, c := range calls {
		fc := map[string]any{"name": c.Name, "args": toolInput(c.Arguments)}
		if c.ID != "" {
			fc["id"] = c.ID
		}
		p := map[string]any{"functionCall": fc}
		if i == 0 {
			p["thoughtSignature"] = geminiSignature
		}
		parts = append(parts, p)
	}
	return parts
}

func geminiUsage(inTok, outTok int, thoughts string) map[string]any {
	u := map[string]any{"promptTokenCount": inTok, "totalTokenCount": inTok + outTok,
		"promptTokensDetails": []any{map[string]any{"modality": "TEXT", "tokenCount": inTok}}}
	if outTok > 0 {
		u["candidatesTokenCount"] = outTok
	}
	if thoughts != "" {
		u["thoughtsTokenCount"] = len(thoughts) / 4
		u["totalTokenCount"] = inTok + outTok + len(thoughts)/4
	}
	return u
}

// GeminiResponse is the generateContent answer for a reply.
func GeminiResponse(model, respID, thoughts, text string, calls []ToolCall, inputTokens int) map[string]any {
	return map[string]any{
		"candidates": []any{map[string]any{
			"content":      map[string]any{"parts": geminiParts(thoughts, text, calls), "role": "model"},
			"finishReason": "STOP", "index": 0,
		}},
		"usageMetadata": geminiUsage(inputTokens, 7, thoughts),
		"modelVersion":  model, "responseId": respID,
	}
}

// GeminiChunks renders a reply as the chunks of streamGenerateContent: the thought
// summary, the text word by word, each function call whole, and finishReason STOP on
// the last chunk, which carries the final usage.
func GeminiChunks(model, respID, thoughts, text string, calls []ToolCall, inputTokens int) [][]byte {
	var parts [][]any
	if thoughts != "" {
		parts = append(parts, geminiParts(thoughts, "", nil))
	}
	for _, word := range splitKeep(text) {
		parts = append(parts, []any{map[string]any{"text": word}})
	}
	for i, p := range geminiParts("", "", calls) {
		if i == 0 || len(calls) == 0 {
			parts = append(parts, []any{p})
			continue
		}
		parts[len(parts)-1] = append(parts[len(parts)-1], p) // parallel calls come together
	}
	if len(parts) == 0 {
		parts = append(parts, []any{map[string]any{"text": ""}})
	}
	out := make([][]byte, len(parts))
	for i, ps := range parts {
		cand := map[string]any{"content": map[string]any{"parts": ps, "role": "model"}, "index": 0}
		outTok := 0
		if i == len(parts)-1 {
			cand["finishReason"] = "STOP"
			outTok = 7
		}
		out[i], _ = json.Marshal(map[string]any{
			"candidates": []any{cand}, "usageMetadata": geminiUsage(inputTokens, outTok, thoughts),
			"modelVersion": model, "responseId": respID,
		})
	}
	return out
}

// stream writes chunks as SSE events or as the elements of a JSON array.
func (g *Gemini) stream(set geminiSettings, w http.ResponseWriter, r *http.Request, chunks [][]byte, sse bool) {
	if set.errorAfter > 0 && set.errorAfter < len(chunks) {
		chunks = append(chunks[:set.errorAfter:set.errorAfter], GeminiError(503, "The model is overloaded. Please try again later."))
	}
	if sse {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	}
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fl.Flush()
	var b bytes.Buffer
	for i, c := range chunks {
		if r.Context().Err() != nil {
			g.noteCancel()
			return
		}
		b.Reset()
		if sse {
			b.WriteString("data: ")
			b.Write(c)
			b.WriteString("\r\n\r\n")
		} else {
			if i == 0 {
				b.WriteString("[")
			} else {
				b.WriteString(",\r\n")
			}
			_ = json.Indent(&b, c, "", "  ")
			if i == len(chunks)-1 {
				b.WriteString("\n]")
			}
		}
		if _, err := w.Write(b.Bytes()); err != nil {
			g.noteCancel()
			return
		}
		fl.Flush()
		if set.resetAfter > 0 && i+1 == set.resetAfter {
			panic(http.ErrAbortHandler) // net/http closes the connection mid-body
		}
		if set.hangAfter > 0 && i+1 == set.hangAfter {
			select {
			case <-r.Context().Done():
				g.noteCancel()
			case <-time.After(30 * time.Second):
			}
			return
		}
	}
}
