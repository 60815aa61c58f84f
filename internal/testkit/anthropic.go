package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Anthropic is a scripted Anthropic Messages API: POST /v1/messages (JSON, or SSE with
// "stream": true) and POST /v1/messages/count_tokens.
type Anthropic struct {
	*httptest.Server

	// APIKey, when set, is the only x-api-key (or `Authorization: Bearer` token)
	// accepted; "" accepts any non-empty key.
	APIKey string

	// ReplyFn scripts the answer; nil = DefaultAnthropicReply. Reply.Status ≥ 400
	// answers an Anthropic error of the type that status has.
	ReplyFn func(body gjson.Result) Reply
	// BeforeEvent, if set, runs before each SSE event i is written (i from 0).
	BeforeEvent func(i int)
	// Delay before answering (headers included).
	Delay time.Duration
	// HangAfter > 0: after that many SSE events, stop sending and wait until the caller
	// goes away.
	HangAfter int
	// ErrorAfter > 0: after that many SSE events, send `event: error`
	// (overloaded_error, as the API does when it is overloaded mid-answer) and end.
	ErrorAfter int

	mu                sync.Mutex
	answers           atomic.Int64 // numbers each answer's message id, unique as the API's are
	callLog[Captured]              // Requests, Last, CancelledCount, Cancelled
}

// NewAnthropic starts a scripted Anthropic API on loopback.
func NewAnthropic() *Anthropic {
	a := &Anthropic{callLog: newCallLog[Captured]()}
	a.Server = httptest.NewServer(http.HandlerFunc(a.serve))
	return a
}

// Configure changes the fake's settings (the exported fields) under its lock: use it
// when requests may arrive from outside this process (a node script), so that the
// race detector sees the change happen before the handler reads it.
func (a *Anthropic) Configure(fn func(*Anthropic)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fn(a)
}

// anthropicSettings is a snapshot of the exported fields, read under the lock.
type anthropicSettings struct {
	apiKey                string
	replyFn               func(body gjson.Result) Reply
	beforeEvent           func(i int)
	delay                 time.Duration
	hangAfter, errorAfter int
}

func (a *Anthropic) settings() anthropicSettings {
	a.mu.Lock()
	defer a.mu.Unlock()
	return anthropicSettings{a.APIKey, a.ReplyFn, a.BeforeEvent, a.Delay, a.HangAfter, a.ErrorAfter}
}

// anthropicErrorType is the error type the API uses for a status.
func anthropicErrorType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 402:
		return "billing_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 504:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	default:
		return "api_error"
	}
}

func anthropicError(typ, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}, "request_id": "req_011CAnthropicFake"})
	return b
}

func writeAnthropicError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Should-Retry", fmt.Sprint(status == 429 || status >= 500))
	w.WriteHeader(status)
	_, _ = w.Write(anthropicError(anthropicErrorType(status), msg))
}

func (a *Anthropic) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	set := a.settings()
	a.add(Captured{Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body})
	w.Header().Set("Request-Id", "req_011CAnthropicFake")

	key := r.Header.Get("X-Api-Key")
	if key == "" {
		if tok, ok := bytes.CutPrefix([]byte(r.Header.Get("Authorization")), []byte("Bearer ")); ok {
			key = string(tok)
		}
	}
	if key == "" || (set.apiKey != "" && key != set.apiKey) {
		writeAnthropicError(w, http.StatusUnauthorized, "invalid x-api-key")
		return
	}
	if r.Header.Get("Anthropic-Version") == "" {
		writeAnthropicError(w, http.StatusBadRequest, "anthropic-version: header is required")
		return
	}
	if r.Method != http.MethodPost || (r.URL.Path != "/v1/messages" && r.URL.Path != "/v1/messages/count_tokens") {
		writeAnthropicError(w, http.StatusNotFound, "Not found")
		return
	}
	if !gjson.ValidBytes(body) {
		writeAnthropicError(w, http.StatusBadRequest, "There was an error parsing the body of your request.")
		return
	}
	req := gjson.ParseBytes(body)
	inTok := len(body) / 4
	if r.URL.Path == "/v1/messages/count_tokens" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"input_tokens":%d}`, inTok)
		return
	}
	rep, ok := scriptedReply(w, r, set.delay, a.noteCancel, set.replyFn, DefaultAnthropicReply, req)
	if !ok {
		return
	}
	if rep.Status >= 300 {
		writeAnthropicError(w, rep.Status, rep.ErrorMsg)
		return
	}
	w.Header().Set("Anthropic-Ratelimit-Requests-Remaining", "99")
	model := req.Get("model").String()
	// Each answer has its own message id: clients key their transcripts by it (Claude
	// Code merges the blocks of one id into one message).
	msgID := fmt.Sprintf("msg_01FakeAnthropic%04d", a.answers.Add(1))
	if req.Get("stream").Bool() {
		ev := AnthropicStreamEvents(model, rep.Content, rep.ToolCalls, inTok)
		ev[0].Data, _ = sjson.SetBytes(ev[0].Data, "message.id", msgID)
		a.stream(set, w, r, ev)
		return
	}
	m := AnthropicMessage(model, rep.Content, rep.ToolCalls, inTok)
	m["id"] = msgID
	out, _ := json.Marshal(m)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// DefaultAnthropicReply calls the request's first tool (or "lookup") on the first turn
// and answers in text once a tool_result is in.
func DefaultAnthropicReply(body gjson.Result) Reply {
	r := DefaultBedrockReply(BedrockInvoke, "", body)
	return Reply{Content: r.Content, ToolCalls: r.ToolCalls}
}

// AnthropicMessage is a Messages API answer (also Bedrock InvokeModel's for Claude).
func AnthropicMessage(model, text string, calls []ToolCall, inputTokens int) map[string]any {
	content := []any{}
	if text != "" {
		content = append(content, map[string]any{"type": "text", "text": text})
	}
	for _, c := range calls {
		content = append(content, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": toolInput(c.Arguments)})
	}
	stop := "end_turn"
	if len(calls) > 0 {
		stop = "tool_use"
	}
	return map[string]any{
		"id": "msg_01FakeAnthropic", "type": "message", "role": "assistant", "model": model,
		"content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": inputTokens, "output_tokens": 7, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
	}
}

// AnthropicEvent is one Messages stream event: its type (the SSE event name) and JSON.
type AnthropicEvent struct {
	Type string
	Data []byte
}

// AnthropicStreamEvents renders a reply as the Messages stream events, in order:
// message_start, per block content_block_start / content_block_delta… /
// content_block_stop, message_delta, message_stop (no ping: the SSE server adds it).
func AnthropicStreamEvents(model, text string, calls []ToolCall, inputTokens int) []AnthropicEvent {
	var ev []AnthropicEvent
	add := func(v map[string]any) {
		b, _ := json.Marshal(v)
		ev = append(ev, AnthropicEvent{Type: v["type"].(string), Data: b})
	}
	add(map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_01FakeAnthropic", "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": inputTokens, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
	}})
	idx := 0
	if text != "" {
		add(map[string]any{"type": "content_block_start", "index": idx, "content_block": map[string]any{"type": "text", "text": ""}})
		for _, word := range splitKeep(text) {
			add(map[string]any{"type": "content_block_delta", "index": idx, "delta": map[string]any{"type": "text_delta", "text": word}})
		}
		add(map[string]any{"type": "content_block_stop", "index": idx})
		idx++
	}
	for _, c := range calls {
		add(map[string]any{"type": "content_block_start", "index": idx, "content_block": map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": map[string]any{}}})
		for _, f := range append([]string{""}, fragments(string(toolInput(c.Arguments)))...) {
			add(map[string]any{"type": "content_block_delta", "index": idx, "delta": map[string]any{"type": "input_json_delta", "partial_json": f}})
		}
		add(map[string]any{"type": "content_block_stop", "index": idx})
		idx++
	}
	stop := "end_turn"
	if len(calls) > 0 {
		stop = "tool_use"
	}
	add(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 7}})
	add(map[string]any{"type": "message_stop"})
	return ev
}

func (a *Anthropic) stream(set anthropicSettings, w http.ResponseWriter, r *http.Request, events []AnthropicEvent) {
	// The API sends a ping right after message_start.
	events = append(events[:1:1], append([]AnthropicEvent{{Type: "ping", Data: []byte(`{"type": "ping"}`)}}, events[1:]...)...)
	if set.errorAfter > 0 && set.errorAfter < len(events) {
		events = append(events[:set.errorAfter:set.errorAfter], AnthropicEvent{Type: "error", Data: anthropicError("overloaded_error", "Overloaded")})
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fl.Flush()
	var b bytes.Buffer
	for i, e := range events {
		if set.beforeEvent != nil {
			set.beforeEvent(i)
		}
		if r.Context().Err() != nil {
			a.noteCancel()
			return
		}
		b.Reset()
		b.WriteString("event: ")
		b.WriteString(e.Type)
		b.WriteString("\ndata: ")
		b.Write(e.Data)
		b.WriteString("\n\n")
		if _, err := w.Write(b.Bytes()); err != nil {
			a.noteCancel()
			return
		}
		fl.Flush()
		if set.hangAfter > 0 && i+1 == set.hangAfter {
			select {
			case <-r.Context().Done():
				a.noteCancel()
			case <-time.After(30 * time.Second):
			}
			return
		}
	}
}

// scriptedReply is a fake's answer to a call: it waits out the scripted delay (false
// when the client left first: noteCancel has counted it), runs the reply script (def
// when none is set) and sets the reply's extra headers.
func scriptedReply(w http.ResponseWriter, r *http.Request, delay time.Duration, noteCancel func(),
	script, def func(gjson.Result) Reply, req gjson.Result) (Reply, bool) {
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			noteCancel()
			return Reply{}, false
		}
	}
	if script == nil {
		script = def
	}
	rep := script(req)
	for k, vs := range rep.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	return rep, true
}
