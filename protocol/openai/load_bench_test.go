package openai

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/internal/memotest"
)

// BenchmarkLoadCalls is what the request body costs before forwarding on bench-load's
// saturation run: its bodies (64 callers, each running a tau-bench conversation turn by
// turn, its system prompt tagged with a session number of its own per run, then the
// next conversation) parsed, checked against the built-in side-call rules and hashed
// into the stitching chains, then its answer hashed for the episode's tip, in the
// order the proxy does it (cpu-ns/op: the process's CPU per call, the garbage
// collector's included, steadier than ns/op on a shared box).
func BenchmarkLoadCalls(b *testing.B) {
	raw, err := os.ReadFile(memotest.TauPath)
	if os.IsNotExist(err) {
		b.Skipf("%s absent", memotest.TauPath)
	}
	if err != nil {
		b.Fatal(err)
	}
	type conv struct {
		sys   []byte   // the system message without its closing `"}`
		msgs  [][]byte // compact JSON of the other messages
		turns []int    // indexes of the assistant messages: one call each
		// answers are those messages as the upstream answers them: each call's answer
		// is hashed for its episode's tip (setTips), and sent back in the next call.
		answers []protocol.Message
	}
	var convs []conv
	for _, run := range gjson.ParseBytes(raw).Array() {
		var c conv
		for i, m := range run.Get("traj").Array() {
			var buf bytes.Buffer
			if err := json.Compact(&buf, []byte(m.Raw)); err != nil {
				b.Fatal(err)
			}
			if i == 0 {
				c.sys = append([]byte(`{"role":"system","content":`), m.Get("content").Raw...)
				c.sys = c.sys[:len(c.sys)-1]
				continue
			}
			if m.Get("role").Str == "assistant" && i > 1 {
				c.turns = append(c.turns, i)
				a := protocol.Message{Role: "assistant", Content: m.Get("content").Str}
				for _, tc := range m.Get("tool_calls").Array() {
					a.ToolCalls = append(a.ToolCalls, protocol.ToolCall{ID: tc.Get("id").Str, Type: "function",
						Name: tc.Get("function.name").Str, Arguments: tc.Get("function.arguments").Str})
				}
				c.answers = append(c.answers, a)
			}
			c.msgs = append(c.msgs, buf.Bytes())
		}
		if len(c.turns) > 0 {
			convs = append(convs, c)
		}
	}
	rules, side := protocol.DefaultTaskRules(), protocol.BuiltinSideCalls()
	type slot struct{ c, turn, inst int }
	slots := make([]slot, 64)
	for i := range slots {
		slots[i] = slot{c: i, inst: i}
	}
	var body []byte
	k, inst := 0, len(slots)
	testkit.CPUPerOp(b, func() {
		sl := &slots[k%len(slots)]
		c := &convs[sl.c%len(convs)]
		if sl.turn == len(c.turns) {
			sl.c, sl.turn, sl.inst = sl.c+len(slots), 0, inst
			inst++
			c = &convs[sl.c%len(convs)]
		}
		t, answer := c.turns[sl.turn], &c.answers[sl.turn]
		sl.turn++
		body = append(body[:0], `{"model":"gpt-4o","messages":[`...)
		body = append(append(body, c.sys...), `\n\nSession `...)
		body = append(strconv.AppendInt(body, int64(sl.inst), 10), `"}`...)
		for _, m := range c.msgs[:t-1] {
			body = append(append(body, ','), m...)
		}
		body = append(body, `],"temperature":0}`...)
		k++
		r, err := Parse(body, rules)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := protocol.MatchSideCall(side, &r.View, body); ok {
			b.Fatal("a turn taken for a side call")
		}
		episode.Chains(&r.View, "default", "")
		episode.Digest(answer)
	})
}
