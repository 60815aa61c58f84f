// Package testkit holds the scripted model servers camproxy's tests and benchmarks
// talk to: an OpenAI-compatible upstream that speaks real JSON, SSE and the
// Responses WebSocket mode (tool calls, errors, slow and hanging answers) and a
// CAM. No model runs here; these are faithful fakes.
package testkit

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
)

// Reply is what the scripted upstream answers to one chat call.
type Reply struct {
	Content   string
	ToolCalls []ToolCall
	Status    int    // non-2xx: answer an OpenAI error with this status
	ErrorMsg  string // message of that error
	ErrorCode string // its code (OpenAI's error.code), e.g. websocket_connection_limit_reached; "" = null
	Header    http.Header
}

// ToolCall is one function call the fake model makes.
type ToolCall struct {
	ID, Name, Arguments string
	// Custom makes it a Responses custom (freeform) tool call, as Codex's apply_patch
	// is: Arguments is then the raw input text, not JSON. Chat and Anthropic ignore it.
	Custom bool
}

// Captured is one request the upstream received.
type Captured struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// Upstream is a scripted OpenAI-compatible server.
type Upstream struct {
	*httptest.Server

	// Reply scripts the answer to a chat call; nil = DefaultReply.
	Reply func(body gjson.Result) Reply
	// ReplyFor, when set, is used instead of Reply and also sees the request headers
	// (tests that replay recorded conversations name the run in a header).
	ReplyFor func(h http.Header, body gjson.Result) Reply
	// BeforeChunk, if set, runs before each SSE event i is written (i from 0): tests use
	// it to pace a stream or wait for the client.
	BeforeChunk func(i int)
	// Delay before answering (headers included).
	Delay time.Duration
	// HangAfter > 0: after writing that many SSE events, stop sending and wait until the
	// caller goes away (a model that stalls mid-answer).
	HangAfter int
	// ResetAfter > 0: after writing that many SSE events, drop the connection without
	// ending the response (a crash or a reset mid-stream).
	ResetAfter int
	// Drip > 0: write a non-streaming answer one byte at a time, Drip apart.
	Drip time.Duration
	// RespondTo scripts the answer to a /v1/responses call given the whole
	// conversation (the stored items of previous_response_id's chain, then this call's
	// input items); nil = DefaultResponsesReply.
	RespondTo func(body gjson.Result, conversation []gjson.Result) Reply
	// RefuseUpgrade, when non-zero, answers every WebSocket upgrade with this status
	// (405, 404, 426 …), as an upstream without WebSocket mode does (vLLM: 405);
	// zero serves /v1/responses' WebSocket mode, as OpenAI and xAI do.
	RefuseUpgrade int

	mu                sync.Mutex
	upgrades          int                          // WebSocket upgrades asked for, refused ones included
	sockets           []*socketState               // accepted sockets, in order
	stored            map[string][]json.RawMessage // response id → its conversation, output included
	responseSeq       int
	chatSeq           int    // numbers each chat completion's id, unique as OpenAI's are
	azureKey          string // SetAzureKey
	callLog[Captured]        // Requests, Last, CancelledCount, Cancelled
}

// NewUpstream starts a scripted upstream on loopback.
func NewUpstream() *Upstream {
	u := &Upstream{callLog: newCallLog[Captured]()}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	return u
}

// Configure changes the script while requests may be in flight (from another process,
// for instance): plain field writes would race with the handlers.
func (u *Upstream) Configure(fn func(*Upstream)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	fn(u)
}

func (u *Upstream) serve(w http.ResponseWriter, r *http.Request) {
	if websocket.IsWebSocketUpgrade(r) {
		u.serveSocket(w, r) // logged apart: Requests holds the HTTP calls
		return
	}
	body, _ := io.ReadAll(r.Body)
	u.add(Captured{Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body})
	u.mu.Lock() // the script may change under Configure while calls arrive
	delay := u.Delay
	u.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			u.noteCancel()
			return
		}
	}
	if u.azure(w, r, body) {
		return
	}
	switch r.URL.Path {
	case "/v1/chat/completions":
		u.chat(w, r, body)
	case "/v1/responses":
		u.responses(w, r, body)
	case "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "req_models_1")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"gpt-4o","object":"model","created":1700000000,"owned_by":"openai"}]}`)
	case "/v1/embeddings":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]}],"model":"e","usage":{"prompt_tokens":1,"total_tokens":1}}`)
	default:
		writeOpenAIError(w, http.StatusNotFound, "unknown path "+r.URL.Path)
	}
}

func writeOpenAIError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": nil, "code": nil}})
	_, _ = w.Write(b)
}

// DefaultReply calls the request's first tool (or "lookup") on the first turn and
// answers in text once a tool result is in.
func DefaultReply(body gjson.Result) Reply {
	msgs := body.Get("messages").Array()
	if len(msgs) > 0 && msgs[len(msgs)-1].Get("role").String() == "tool" {
		return Reply{Content: fmt.Sprintf("Done after %d messages.", len(msgs))}
	}
	name := body.Get("tools.0.function.name").String()
	if name == "" {
		name = "lookup"
	}
	return Reply{ToolCalls: []ToolCall{{ID: fmt.Sprintf("call_%d", len(msgs)), Name: name, Arguments: `{"query":"flight status","limit":3}`}}}
}

func (u *Upstream) chat(w http.ResponseWriter, r *http.Request, body []byte) {
	req := gjson.ParseBytes(body)
	u.mu.Lock()
	replyFn, replyFor := u.Reply, u.ReplyFor
	u.chatSeq++
	// Each completion has its own id: frameworks key messages by it (LangGraph's
	// message reducer replaces a message whose id it has seen).
	id := fmt.Sprintf("chatcmpl-%d", u.chatSeq)
	u.mu.Unlock()
	var rep Reply
	switch {
	case replyFor != nil:
		rep = replyFor(r.Header, req)
	case replyFn != nil:
		rep = replyFn(req)
	default:
		rep = DefaultReply(req)
	}
	w.Header().Set("X-Request-Id", "req_chat_1")
	w.Header().Set("X-Ratelimit-Remaining-Requests", "99")
	for k, vs := range rep.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if rep.Status >= 300 {
		writeOpenAIError(w, rep.Status, rep.ErrorMsg)
		return
	}
	model := req.Get("model").String()
	if req.Get("stream").Bool() {
		u.stream(w, r, id, model, rep, req.Get("stream_options.include_usage").Bool())
		return
	}
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	finish := "stop"
	if rep.Content != "" {
		msg["content"] = rep.Content
	}
	if len(rep.ToolCalls) > 0 {
		var calls []map[string]any
		for _, c := range rep.ToolCalls {
			calls = append(calls, map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
		}
		msg["tool_calls"] = calls
		finish = "tool_calls"
	}
	out, _ := json.Marshal(map[string]any{
		"id": id, "object": "chat.completion", "created": 1700000000, "model": model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": len(body) / 4, "completion_tokens": 7, "total_tokens": len(body)/4 + 7},
	})
	w.Header().Set("Content-Type", "application/json")
	u.mu.Lock()
	drip := u.Drip
	u.mu.Unlock()
	if drip <= 0 {
		_, _ = w.Write(out)
		return
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(out)))
	for i := range out {
		if _, err := w.Write(out[i : i+1]); err != nil {
			u.noteCancel()
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-time.After(drip):
		case <-r.Context().Done():
			u.noteCancel()
			return
		}
	}
}

// StreamEvents renders a reply as the SSE data payloads OpenAI sends, in order.
func StreamEvents(model string, rep Reply, usage bool, promptTokens int) []string {
	chunk := func(delta map[string]any, finish any) string {
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}})
		return string(b)
	}
	ev := []string{chunk(map[string]any{"role": "assistant", "content": ""}, nil)}
	for _, word := range splitKeep(rep.Content) {
		ev = append(ev, chunk(map[string]any{"content": word}, nil))
	}
	for i, c := range rep.ToolCalls {
		ev = append(ev, chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c.ID, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": ""}}}}, nil))
		// Arguments arrive in fragments, as real models stream them.
		a := c.Arguments
		for len(a) > 0 {
			n := min(7, len(a))
			ev = append(ev, chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": a[:n]}}}}, nil))
			a = a[n:]
		}
	}
	finish := "stop"
	if len(rep.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	ev = append(ev, chunk(map[string]any{}, finish))
	if usage {
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": model,
			"choices": []any{}, "usage": map[string]any{"prompt_tokens": promptTokens, "completion_tokens": 7, "total_tokens": promptTokens + 7}})
		ev = append(ev, string(b))
	}
	return append(ev, "[DONE]")
}

func splitKeep(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s[1:], ' ')
		if i < 0 {
			return append(out, s)
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

func (u *Upstream) stream(w http.ResponseWriter, r *http.Request, id, model string, rep Reply, usage bool) {
	events := StreamEvents(model, rep, usage, 42)
	frames := make([][]byte, len(events))
	for i, data := range events {
		if id != "chatcmpl-1" { // StreamEvents' chunks carry chatcmpl-1
			data = strings.Replace(data, `"id":"chatcmpl-1"`, `"id":"`+id+`"`, 1)
		}
		frames[i] = []byte("data: " + data + "\n\n")
	}
	u.writeSSE(w, r, frames)
}

// writeSSE writes SSE frames one at a time, flushing each, with the stream hooks:
// BeforeChunk before frame i, ResetAfter and HangAfter counted in frames. Every
// streaming API the fake serves goes through it.
func (u *Upstream) writeSSE(w http.ResponseWriter, r *http.Request, frames [][]byte) {
	u.mu.Lock()
	beforeChunk, hangAfter, resetAfter := u.BeforeChunk, u.HangAfter, u.ResetAfter
	u.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fl.Flush()
	for i, frame := range frames {
		if beforeChunk != nil {
			beforeChunk(i)
		}
		if r.Context().Err() != nil {
			u.noteCancel()
			return
		}
		if _, err := w.Write(frame); err != nil {
			u.noteCancel()
			return
		}
		fl.Flush()
		if resetAfter > 0 && i+1 == resetAfter {
			panic(http.ErrAbortHandler) // net/http closes the connection mid-body
		}
		if hangAfter > 0 && i+1 == hangAfter {
			select {
			case <-r.Context().Done():
				u.noteCancel()
			case <-time.After(30 * time.Second):
			}
			return
		}
	}
}
