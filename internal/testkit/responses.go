package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// The scripted upstream's OpenAI Responses API (POST /v1/responses): response objects
// and SSE streams with `event:` lines and sequence numbers, as OpenAI sends them.
// Responses are stored by id (unless "store": false), so that a call with
// previous_response_id is answered knowing the earlier conversation; an unknown id is
// refused with OpenAI's 400. As at OpenAI, instructions are not carried over from the
// previous response.

// DefaultResponsesReply calls the request's first function tool (or "lookup") on the
// first turn and answers in text once a function_call_output ends the conversation.
func DefaultResponsesReply(body gjson.Result, conversation []gjson.Result) Reply {
	if n := len(conversation); n > 0 && conversation[n-1].Get("type").String() == "function_call_output" {
		return Reply{Content: fmt.Sprintf("Done after %d items.", n)}
	}
	name := ""
	for _, t := range body.Get("tools").Array() {
		if t.Get("type").String() == "function" {
			name = t.Get("name").String()
			break
		}
	}
	if name == "" {
		name = "lookup"
	}
	return Reply{ToolCalls: []ToolCall{{ID: fmt.Sprintf("call_%d", len(conversation)), Name: name, Arguments: `{"query":"flight status","limit":3}`}}}
}

// StoredResponse returns the conversation stored under a response id (its input items
// and output items), and whether the id is known.
func (u *Upstream) StoredResponse(id string) ([]json.RawMessage, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c, ok := u.stored[id]
	return append([]json.RawMessage(nil), c...), ok
}

// responseTurn is one Responses call as the fake answers it, whichever transport
// carried it (POST /v1/responses or a response.create on a socket).
type responseTurn struct {
	req      gjson.Result
	seq      int
	rep      Reply
	conv     []json.RawMessage // the previous response's conversation, then this call's input
	notFound string            // previous_response_id that names no known response
}

// prepareResponse reads a call and scripts its answer. prev, if set, is looked up
// first for previous_response_id (a socket's own state), then the stored responses.
func (u *Upstream) prepareResponse(body []byte, prev func(id string) ([]json.RawMessage, bool)) responseTurn {
	t := responseTurn{req: gjson.ParseBytes(body)}
	id := t.req.Get("previous_response_id").String()
	known := true
	if id != "" && prev != nil {
		var c []json.RawMessage
		if c, known = prev(id); known {
			t.conv = append(t.conv, c...)
		}
	}
	u.mu.Lock()
	if id != "" && (prev == nil || !known) {
		var c []json.RawMessage
		c, known = u.stored[id]
		t.conv = append(t.conv, c...)
	}
	u.responseSeq++
	t.seq = u.responseSeq
	respondTo := u.RespondTo
	u.mu.Unlock()
	if !known {
		t.notFound = id
		return t
	}
	switch in := t.req.Get("input"); {
	case in.Type == gjson.String:
		b, _ := json.Marshal(map[string]any{"role": "user", "content": in.Str})
		t.conv = append(t.conv, b)
	case in.IsArray():
		for _, it := range in.Array() {
			t.conv = append(t.conv, json.RawMessage(it.Raw))
		}
	}
	items := make([]gjson.Result, len(t.conv))
	for i, c := range t.conv {
		items[i] = gjson.ParseBytes(c)
	}
	if respondTo == nil {
		respondTo = DefaultResponsesReply
	}
	t.rep = respondTo(t.req, items)
	return t
}

// store keeps the answered conversation under the response's id (unless the call
// said "store": false) and returns it.
func (u *Upstream) store(t responseTurn, output []json.RawMessage) []json.RawMessage {
	whole := append(append([]json.RawMessage(nil), t.conv...), output...)
	if t.req.Get("store").Type != gjson.False {
		u.mu.Lock()
		if u.stored == nil {
			u.stored = map[string][]json.RawMessage{}
		}
		u.stored[responseID(t.seq)] = whole
		u.mu.Unlock()
	}
	return whole
}

// notFoundError is OpenAI's error for a previous_response_id it does not know.
func notFoundError(id string) map[string]any {
	return map[string]any{"message": fmt.Sprintf("Previous response with id '%s' not found.", id),
		"type": "invalid_request_error", "param": "previous_response_id", "code": "previous_response_not_found"}
}

func (u *Upstream) responses(w http.ResponseWriter, r *http.Request, body []byte) {
	t := u.prepareResponse(body, nil)
	if t.notFound != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		b, _ := json.Marshal(map[string]any{"error": notFoundError(t.notFound)})
		_, _ = w.Write(b)
		return
	}
	rep := t.rep
	w.Header().Set("X-Request-Id", fmt.Sprintf("req_resp_%d", t.seq))
	for k, vs := range rep.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if rep.Status >= 300 {
		writeOpenAIError(w, rep.Status, rep.ErrorMsg)
		return
	}
	output := responseOutput(t.seq, rep)
	u.store(t, output)
	if !t.req.Get("stream").Bool() {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(responseObject(responseID(t.seq), t.req, "completed", output, len(body)/4))
		return
	}
	u.writeSSE(w, r, responseFrames(t.req, t.seq, rep))
}

// streamedPrompt is the input_tokens of a streamed answer's usage.
const streamedPrompt = 42

func responseID(seq int) string { return fmt.Sprintf("resp_%04d", seq) }

// ResponseStream is the body the fake streams when it answers a /v1/responses call
// (req, the body it received) with rep as its seq-th response: the events of
// ResponseEvents as OpenAI frames them, each an `event:` and a `data:` line. Tests
// that serve the stream themselves compare what the agent got with it.
func ResponseStream(req gjson.Result, seq int, rep Reply) []byte {
	return bytes.Join(responseFrames(req, seq, rep), nil)
}

// responseFrames are the SSE frames of ResponseStream, one an event.
func responseFrames(req gjson.Result, seq int, rep Reply) [][]byte {
	events := responseEvents(req, seq, rep)
	frames := make([][]byte, len(events))
	for i, e := range events {
		frames[i] = []byte("event: " + e.Type + "\ndata: " + string(e.Data) + "\n\n")
	}
	return frames
}

// responseEvents are the events of the fake's seq-th response, rep, to req: what
// both transports send, as SSE frames or as WebSocket messages.
func responseEvents(req gjson.Result, seq int, rep Reply) []SSEEvent {
	id := responseID(seq)
	final := responseObject(id, req, "completed", responseOutput(seq, rep), streamedPrompt)
	return ResponseEvents(id, req, seq, rep, final)
}

// responseOutput renders a reply as the output items of a response: the message (if
// any text), then the function calls.
func responseOutput(seq int, rep Reply) []json.RawMessage {
	var out []json.RawMessage
	if rep.Content != "" {
		out = append(out, mustJSON(messageItem(fmt.Sprintf("msg_%04d_0", seq), "completed", rep.Content)))
	}
	for i, c := range rep.ToolCalls {
		out = append(out, mustJSON(callItem(callItemID(seq, i, c), "completed", c, c.Arguments)))
	}
	return out
}

func messageItem(id, status, text string) map[string]any {
	content := []any{}
	if status == "completed" {
		content = []any{textPart(text)}
	}
	return map[string]any{"id": id, "type": "message", "status": status, "role": "assistant", "content": content}
}

func textPart(text string) map[string]any {
	return map[string]any{"type": "output_text", "annotations": []any{}, "logprobs": []any{}, "text": text}
}

// callItemID names a call's output item: fc_ for a function call, ctc_ for a custom one.
func callItemID(seq, i int, c ToolCall) string {
	if c.Custom {
		return fmt.Sprintf("ctc_%04d_%d", seq, i+1)
	}
	return fmt.Sprintf("fc_%04d_%d", seq, i+1)
}

func callItem(id, status string, c ToolCall, args string) map[string]any {
	if c.Custom {
		return map[string]any{"id": id, "type": "custom_tool_call", "status": status, "call_id": c.ID, "name": c.Name, "input": args}
	}
	return map[string]any{"id": id, "type": "function_call", "status": status, "arguments": args, "call_id": c.ID, "name": c.Name}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// responseObject renders a response object; output nil and status "in_progress" give
// the one of response.created.
func responseObject(id string, req gjson.Result, status string, output []json.RawMessage, prompt int) json.RawMessage {
	raw := func(key string, def any) any {
		if v := req.Get(key); v.Exists() {
			return json.RawMessage(v.Raw)
		}
		return def
	}
	if output == nil {
		output = []json.RawMessage{}
	}
	var usage any
	if status == "completed" {
		usage = map[string]any{"input_tokens": prompt, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": 7, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": prompt + 7}
	}
	return mustJSON(map[string]any{
		"id": id, "object": "response", "created_at": 1700000000, "status": status, "background": false,
		"error": nil, "incomplete_details": nil, "instructions": raw("instructions", nil), "max_output_tokens": raw("max_output_tokens", nil),
		"model": req.Get("model").String(), "output": output, "parallel_tool_calls": raw("parallel_tool_calls", true),
		"previous_response_id": raw("previous_response_id", nil), "reasoning": map[string]any{"effort": nil, "summary": nil},
		"store": raw("store", true), "temperature": raw("temperature", 1.0), "text": map[string]any{"format": map[string]any{"type": "text"}, "verbosity": "medium"},
		"tool_choice": raw("tool_choice", "auto"), "tools": raw("tools", []any{}), "top_p": raw("top_p", 1.0), "truncation": "disabled",
		"usage": usage, "user": nil, "metadata": raw("metadata", map[string]any{}),
	})
}

// SSEEvent is one event of a Responses stream.
type SSEEvent struct {
	Type string
	Data json.RawMessage // carries "type" and "sequence_number"
}

// ResponseEvents renders a reply as the events OpenAI streams, in order: created,
// in_progress, each output item (added, its content part or argument deltas, done),
// completed (whose response is final).
func ResponseEvents(id string, req gjson.Result, seq int, rep Reply, final json.RawMessage) []SSEEvent {
	var ev []SSEEvent
	add := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = len(ev)
		ev = append(ev, SSEEvent{Type: typ, Data: mustJSON(fields)})
	}
	started := responseObject(id, req, "in_progress", nil, 0)
	add("response.created", map[string]any{"response": started})
	add("response.in_progress", map[string]any{"response": started})
	idx := 0
	if rep.Content != "" {
		itemID := fmt.Sprintf("msg_%04d_0", seq)
		add("response.output_item.added", map[string]any{"output_index": idx, "item": messageItem(itemID, "in_progress", "")})
		add("response.content_part.added", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0, "part": textPart("")})
		for _, word := range splitKeep(rep.Content) {
			add("response.output_text.delta", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0, "delta": word, "logprobs": []any{}})
		}
		add("response.output_text.done", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0, "text": rep.Content, "logprobs": []any{}})
		add("response.content_part.done", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0, "part": textPart(rep.Content)})
		add("response.output_item.done", map[string]any{"output_index": idx, "item": messageItem(itemID, "completed", rep.Content)})
		idx++
	}
	for i, c := range rep.ToolCalls {
		itemID := callItemID(seq, i, c)
		add("response.output_item.added", map[string]any{"output_index": idx, "item": callItem(itemID, "in_progress", c, "")})
		if c.Custom {
			// A freeform input streams as custom_tool_call_input deltas, then done.
			for a := c.Arguments; len(a) > 0; {
				n := min(16, len(a))
				for n < len(a) && !utf8.RuneStart(a[n]) { // deltas are whole characters
					n++
				}
				add("response.custom_tool_call_input.delta", map[string]any{"item_id": itemID, "output_index": idx, "delta": a[:n]})
				a = a[n:]
			}
			add("response.custom_tool_call_input.done", map[string]any{"item_id": itemID, "output_index": idx, "input": c.Arguments})
			add("response.output_item.done", map[string]any{"output_index": idx, "item": callItem(itemID, "completed", c, c.Arguments)})
			idx++
			continue
		}
		// Arguments arrive in fragments, as real models stream them.
		for a := c.Arguments; len(a) > 0; {
			n := min(7, len(a))
			add("response.function_call_arguments.delta", map[string]any{"item_id": itemID, "output_index": idx, "delta": a[:n]})
			a = a[n:]
		}
		add("response.function_call_arguments.done", map[string]any{"item_id": itemID, "output_index": idx, "name": c.Name, "arguments": c.Arguments})
		add("response.output_item.done", map[string]any{"output_index": idx, "item": callItem(itemID, "completed", c, c.Arguments)})
		idx++
	}
	add("response.completed", map[string]any{"response": final})
	return ev
}
