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

func (u *Upstream) responses(w http.ResponseWriter, r *http.Request, body []byte) {
	req := gjson.ParseBytes(body)
	prev := req.Get("previous_response_id").String()
	u.mu.Lock()
	var conv []json.RawMessage
	known := true
	if prev != "" {
		var c []json.RawMessage
		c, known = u.stored[prev]
		conv = append(conv, c...)
	}
	u.responseSeq++
	seq := u.responseSeq
	respondTo := u.RespondTo
	u.mu.Unlock()
	if !known {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": fmt.Sprintf("Previous response with id '%s' not found.", prev),
			"type": "invalid_request_error", "param": "previous_response_id", "code": "previous_response_not_found"}})
		_, _ = w.Write(b)
		return
	}
	switch in := req.Get("input"); {
	case in.Type == gjson.String:
		b, _ := json.Marshal(map[string]any{"role": "user", "content": in.Str})
		conv = append(conv, b)
	case in.IsArray():
		for _, it := range in.Array() {
			conv = append(conv, json.RawMessage(it.Raw))
		}
	}
	items := make([]gjson.Result, len(conv))
	for i, c := range conv {
		items[i] = gjson.ParseBytes(c)
	}
	if respondTo == nil {
		respondTo = DefaultResponsesReply
	}
	rep := respondTo(req, items)
	w.Header().Set("X-Request-Id", fmt.Sprintf("req_resp_%d", seq))
	for k, vs := range rep.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if rep.Status >= 300 {
		writeOpenAIError(w, rep.Status, rep.ErrorMsg)
		return
	}
	id := responseID(seq)
	output := responseOutput(seq, rep)
	if req.Get("store").Type != gjson.False {
		stored := append(append([]json.RawMessage(nil), conv...), output...)
		u.mu.Lock()
		if u.stored == nil {
			u.stored = map[string][]json.RawMessage{}
		}
		u.stored[id] = stored
		u.mu.Unlock()
	}
	if !req.Get("stream").Bool() {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(responseObject(id, req, "completed", output, len(body)/4))
		return
	}
	u.writeSSE(w, r, responseFrames(req, seq, rep))
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
	id := responseID(seq)
	final := responseObject(id, req, "completed", responseOutput(seq, rep), streamedPrompt)
	events := ResponseEvents(id, req, seq, rep, final)
	frames := make([][]byte, len(events))
	for i, e := range events {
		frames[i] = []byte("event: " + e.Type + "\ndata: " + string(e.Data) + "\n\n")
	}
	return frames
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
