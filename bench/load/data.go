package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// conv is one conversation the load replays: a real tau-bench trajectory (or the
// synthetic 60-turn episode built from them). Turn t sends messages[0:turns[t]] and
// the fake upstream answers messages[turns[t]], the assistant message the agent really
// got, so that camproxy stitches turn t+1 onto the episode of turn t.
type conv struct {
	id        int
	sysPrefix []byte   // `{"role":"system","content":"…` without the closing quote
	msgs      [][]byte // compact JSON of every message; msgs[0] (system) is rebuilt per instance
	turns     []int    // indexes of the assistant messages: one call each
	replyJSON [][]byte // per turn: the non-streamed chat.completion
	replySSE  [][][]byte
}

// loadConvs reads the shared tau-bench trajectories.
func loadConvs(path string, streamChunks int) ([]*conv, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s (the shared tau-bench data set): %w", path, err)
	}
	var out []*conv
	for i, run := range gjson.ParseBytes(raw).Array() {
		var msgs [][]byte
		for _, m := range run.Get("traj").Array() {
			var b bytes.Buffer
			if err := json.Compact(&b, []byte(m.Raw)); err != nil {
				return nil, err
			}
			msgs = append(msgs, b.Bytes())
		}
		c, err := newConv(i, msgs, streamChunks)
		if err != nil {
			return nil, fmt.Errorf("trajectory %d: %w", i, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no trajectories", path)
	}
	return out, nil
}

func newConv(id int, msgs [][]byte, streamChunks int) (*conv, error) {
	if len(msgs) < 2 || gjson.GetBytes(msgs[0], "role").String() != "system" {
		return nil, fmt.Errorf("does not open with a system message")
	}
	sys := gjson.GetBytes(msgs[0], "content")
	if sys.Type != gjson.String {
		return nil, fmt.Errorf("system content is not a string")
	}
	c := &conv{id: id, msgs: msgs}
	c.sysPrefix = append([]byte(`{"role":"system","content":`), sys.Raw[:len(sys.Raw)-1]...)
	for i := 2; i < len(msgs); i++ {
		if gjson.GetBytes(msgs[i], "role").String() != "assistant" {
			continue
		}
		c.turns = append(c.turns, i)
		js, sse := renderReply(gjson.ParseBytes(msgs[i]), streamChunks)
		c.replyJSON = append(c.replyJSON, js)
		c.replySSE = append(c.replySSE, sse)
	}
	if len(c.turns) == 0 {
		return nil, fmt.Errorf("has no assistant message")
	}
	return c, nil
}

// body renders the request of turn t for one instance of the conversation: the
// system prompt carries the instance's session tag, so that every instance is its own
// episode while the task (the first user message) stays the one the cache was warmed on.
func (c *conv) body(dst []byte, t int, instance uint64, stream bool) []byte {
	dst = append(dst, `{"model":"gpt-4o","messages":[`...)
	dst = append(dst, c.sysPrefix...)
	dst = append(dst, `\n\nSession `...)
	dst = strconv.AppendUint(dst, instance, 10)
	dst = append(dst, `"}`...)
	for i := 1; i < c.turns[t]; i++ {
		dst = append(dst, ',')
		dst = append(dst, c.msgs[i]...)
	}
	dst = append(dst, `],"temperature":0`...)
	if stream {
		dst = append(dst, `,"stream":true`...)
	}
	return append(dst, '}')
}

// renderReply turns an assistant message into the upstream's answers: a
// chat.completion, and the SSE events of the same answer — a role chunk, the content
// in up to chunks pieces, each tool call's header and its arguments in fragments, the
// finish chunk and [DONE], as OpenAI streams them.
func renderReply(m gjson.Result, chunks int) ([]byte, [][]byte) {
	content := m.Get("content").String()
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	var calls []call
	for _, tc := range m.Get("tool_calls").Array() {
		calls = append(calls, call{ID: tc.Get("id").String(), Type: "function",
			Function: fn{Name: tc.Get("function.name").String(), Arguments: tc.Get("function.arguments").String()}})
	}
	finish := "stop"
	msg := map[string]any{"role": "assistant", "content": nil}
	if content != "" {
		msg["content"] = content
	}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
		finish = "tool_calls"
	}
	js, _ := json.Marshal(map[string]any{"id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000, "model": "gpt-4o",
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 4000, "completion_tokens": 60, "total_tokens": 4060}})

	var events [][]byte
	ev := func(delta map[string]any, fin any) {
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-4o",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": fin}}})
		events = append(events, []byte("data: "+string(b)+"\n\n"))
	}
	ev(map[string]any{"role": "assistant", "content": ""}, nil)
	for _, p := range pieces(content, chunks) {
		ev(map[string]any{"content": p}, nil)
	}
	for i, c := range calls {
		ev(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c.ID, "type": "function",
			"function": map[string]any{"name": c.Function.Name, "arguments": ""}}}}, nil)
		for _, p := range pieces(c.Function.Arguments, max(1, chunks/3)) {
			ev(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": p}}}}, nil)
		}
	}
	ev(map[string]any{}, finish)
	events = append(events, []byte("data: [DONE]\n\n"))
	return js, events
}

// pieces cuts s at spaces into at most n pieces of about equal size.
func pieces(s string, n int) []string {
	if s == "" {
		return nil
	}
	size := max(1, len(s)/n)
	var out []string
	for len(s) > 0 {
		if len(s) <= size || len(out) == n-1 {
			return append(out, s)
		}
		cut := strings.IndexByte(s[size:], ' ')
		if cut < 0 {
			return append(out, s)
		}
		cut += size + 1
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return out
}

// longConv builds an episode of turns calls from real messages: the system prompt and
// first user message of trajectory 0, then assistant tool calls and their tool results
// taken in order from all trajectories (ids renumbered so that each is unique), and a
// final text answer.
func longConv(convs []*conv, turns, streamChunks int) (*conv, error) {
	base := convs[0]
	msgs := [][]byte{base.msgs[0], base.msgs[1]}
	n := 0
	for _, c := range convs {
		for i := 2; i+1 < len(c.msgs) && n < turns-1; i++ {
			a, t := gjson.ParseBytes(c.msgs[i]), gjson.ParseBytes(c.msgs[i+1])
			if a.Get("role").String() != "assistant" || len(a.Get("tool_calls").Array()) != 1 || t.Get("role").String() != "tool" {
				continue
			}
			id := fmt.Sprintf("call_long_%03d", n)
			call := a.Get("tool_calls.0")
			am, _ := json.Marshal(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": id, "type": "function",
				"function": map[string]any{"name": call.Get("function.name").String(), "arguments": call.Get("function.arguments").String()}}}})
			tm, _ := json.Marshal(map[string]any{"role": "tool", "tool_call_id": id, "name": t.Get("name").String(), "content": t.Get("content").String()})
			msgs = append(msgs, am, tm)
			n++
			i++
		}
	}
	if n < turns-1 {
		return nil, fmt.Errorf("only %d tool calls in the data set; need %d", n, turns-1)
	}
	msgs = append(msgs, []byte(`{"role":"assistant","content":"Your reservation is updated and the refund goes to your original payment method."}`))
	return newConv(-1, msgs, streamChunks)
}
