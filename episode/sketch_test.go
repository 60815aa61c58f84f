package episode

import (
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/anthropic"
	"github.com/camproxy/camproxy/protocol/openai"
)

// bigFile is what a coding agent writes through a tool call: more than the limit.
var bigFile = strings.Repeat("line of the report\\n", 400)

// claudeWrite is Claude Code's Write as the upstream streams it: a text block, then a
// tool_use whose input comes in pieces, keys in the model's order.
func claudeWrite(id string) []byte {
	ev := func(s string) string { return "event: x\ndata: " + s + "\n\n" }
	var b strings.Builder
	b.WriteString(ev(`{"type":"message_start","message":{"role":"assistant","usage":{"input_tokens":5,"output_tokens":1}}}`))
	b.WriteString(ev(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
	b.WriteString(ev(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"I'll write the report\n\nnow."}}`))
	b.WriteString(ev(`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"` + id + `","name":"Write","input":{}}}`))
	input := `{"file_path": "/w/r\u00e9port.md", "content": "` + bigFile + `"}`
	for i := 0; i < len(input); i += 500 {
		b.WriteString(ev(`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":` +
			string(protocol.AppendString(nil, input[i:min(i+500, len(input))])) + `}}`))
	}
	b.WriteString(ev(`{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}`))
	b.WriteString(ev(`{"type":"message_stop"}`))
	return []byte(b.String())
}

const claudeTurn1 = `{"model":"claude","max_tokens":9,"stream":true,"system":"You write reports.","messages":[` +
	`{"role":"user","content":"Write the report."}]}`

// claudeTurn2 is the next call as the SDK re-serialises it: the answer whole, its
// text as sent, its input an object with the keys in another order and "é" unescaped.
func claudeTurn2(id string) string {
	return `{"model":"claude","max_tokens":9,"stream":true,"system":"You write reports.","messages":[` +
		`{"role":"user","content":"Write the report."},` +
		`{"role":"assistant","content":[{"type":"text","text":"I'll write the report\n\nnow."},` +
		`{"type":"tool_use","id":"` + id + `","name":"Write","input":{"content":"` + bigFile + `","file_path":"/w/réport.md"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + id + `","content":"written"}]}]}`
}

// decodeCut decodes answer with a limit it exceeds.
func decodeCut(t *testing.T, r protocol.Request, answer []byte, limit int) (protocol.Message, *protocol.Sketch) {
	t.Helper()
	dec := r.Decoder()
	dec.Limit(limit)
	_, _ = dec.Write(answer)
	if !dec.Finished() || dec.Truncated() == 0 {
		t.Fatalf("finished %v, truncated %d: the answer must exceed the limit", dec.Finished(), dec.Truncated())
	}
	return dec.Message(), dec.Sketch()
}

// TestSketchTipEcho: the tip stored for an answer whose recorded copy was cut is the
// one its echo in the next call gives, re-serialised as the SDK does, where the strict
// chain cannot find it; another run's answer (another tool-call id) gives another.
func TestSketchTipEcho(t *testing.T) {
	t.Run("anthropic tool call", func(t *testing.T) {
		r1, err := anthropic.Parse([]byte(claudeTurn1), protocol.DefaultTaskRules())
		if err != nil {
			t.Fatal(err)
		}
		cut, sk := decodeCut(t, r1, claudeWrite("toolu_A"), 1024)
		prev := Chain(r1.Messages)[len(r1.Messages)-1]

		r2, err := anthropic.Parse([]byte(claudeTurn2("toolu_A")), protocol.DefaultTaskRules())
		if err != nil {
			t.Fatal(err)
		}
		chain := Chain(r2.Messages)
		asst := len(r1.Messages) // the answer's place in the next call
		if r2.Messages[asst].Role != "assistant" {
			t.Fatalf("message %d is %q", asst, r2.Messages[asst].Role)
		}
		if Extend(prev, &cut) == chain[asst] {
			t.Fatal("the cut answer's chain tip matches: nothing to test")
		}
		whole := r2.Messages[asst]
		if Extend(prev, &whole) != chain[asst] {
			t.Fatal("the whole answer's chain tip does not survive this re-serialisation: the sketch need not either")
		}
		tips, ends := SketchCandidates(r2.Messages, chain, 0)
		if len(tips) != 1 || ends[0] != asst+1 || tips[0] != SketchTip(prev, sk) {
			t.Fatalf("the echo's sketch tips %v (ends %v) miss the stored %x", tips, ends, SketchTip(prev, sk))
		}
		_, other := decodeCut(t, r1, claudeWrite("toolu_B"), 1024)
		if SketchTip(prev, other) == tips[0] {
			t.Fatal("another run's answer, with another tool-call id, has the same tip")
		}
	})
	t.Run("openai long text", func(t *testing.T) {
		text := "Here is the story.  " + strings.Repeat("Once upon a time. ", 200)
		body1 := `{"model":"m","stream":true,"messages":[{"role":"user","content":"Tell a story."}]}`
		r1, err := openai.Parse([]byte(body1), protocol.DefaultTaskRules())
		if err != nil {
			t.Fatal(err)
		}
		var answer []byte
		for i := 0; i < len(text); i += 40 {
			answer = append(answer, `data: {"choices":[{"index":0,"delta":{"content":"`+text[i:min(i+40, len(text))]+`"}}]}`+"\n\n"...)
		}
		answer = append(answer, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"...)
		_, sk := decodeCut(t, r1, answer, 100)
		prev := Chain(r1.Messages)[0]
		body2 := `{"model":"m","stream":true,"messages":[{"role":"user","content":"Tell a story."},` +
			`{"role":"assistant","content":"` + text + `","refusal":null},{"role":"user","content":"Another."}]}`
		r2, err := openai.Parse([]byte(body2), protocol.DefaultTaskRules())
		if err != nil {
			t.Fatal(err)
		}
		tips, _ := SketchCandidates(r2.Messages, Chain(r2.Messages), 0)
		if len(tips) != 1 || tips[0] != SketchTip(prev, sk) {
			t.Fatal("the echo of a cut text answer misses its sketch tip")
		}
	})
}

// TestSketchTipReserialised: what the chain hash survives (whitespace, arguments
// re-spelt, content null or "") the sketch tip survives; what changes an answer's
// text within the sketch, its calls' ids or names, or its history, changes the tip.
// A sketch tip is never the chain tip of the same history and answer.
func TestSketchTipReserialised(t *testing.T) {
	base := protocol.Message{Role: "assistant", Content: "Booking  it.\n", ToolCalls: []protocol.ToolCall{
		{ID: "call_1", Type: "function", Name: "book", Arguments: `{"city":"Zürich","n":1.0}`}}}
	tip := func(prev uint64, m protocol.Message) uint64 {
		var s protocol.Sketch
		s.Of(&m)
		return SketchTip(prev, &s)
	}
	want := tip(7, base)
	if want == Extend(7, &base) {
		t.Fatal("a sketch tip equals the chain tip")
	}
	for name, mutate := range map[string]func(m *protocol.Message){
		"whitespace": func(m *protocol.Message) { m.Content = " Booking it. " },
		"arguments":  func(m *protocol.Message) { m.ToolCalls[0].Arguments = `{"n":1,"city":"Z\u00fcrich"}` },
	} {
		m := base
		m.ToolCalls = append([]protocol.ToolCall(nil), base.ToolCalls...)
		mutate(&m)
		if Extend(7, &m) != Extend(7, &base) {
			t.Fatalf("%s: the chain hash does not survive it", name)
		}
		if tip(7, m) != want {
			t.Errorf("%s: the chain hash survives it, the sketch tip does not", name)
		}
	}
	if tip(8, base) == want {
		t.Error("another history, the same tip")
	}
	for name, mutate := range map[string]func(m *protocol.Message){
		"text":    func(m *protocol.Message) { m.Content = "Booked it." },
		"call id": func(m *protocol.Message) { m.ToolCalls[0].ID = "call_2" },
		"name":    func(m *protocol.Message) { m.ToolCalls[0].Name = "cancel" },
		"no call": func(m *protocol.Message) { m.ToolCalls = nil },
	} {
		m := base
		m.ToolCalls = append([]protocol.ToolCall(nil), base.ToolCalls...)
		mutate(&m)
		if tip(7, m) == want {
			t.Errorf("%s changed, the sketch tip did not", name)
		}
	}
}

// TestSketchCandidates: longest first, only answers past after, over the given chain.
func TestSketchCandidates(t *testing.T) {
	m := msgs("system", "s", "user", "u", "assistant", "a1", "tool", "t", "assistant", "a2", "user", "u2")
	for _, c := range []struct {
		after int
		ends  []int
	}{{0, []int{5, 3}}, {3, []int{5}}, {5, nil}} {
		tips, ends := SketchCandidates(m, Chain(m), c.after)
		if len(tips) != len(c.ends) || len(ends) != len(c.ends) {
			t.Fatalf("after %d: ends %v, want %v", c.after, ends, c.ends)
		}
		for i := range ends {
			if ends[i] != c.ends[i] {
				t.Fatalf("after %d: ends %v, want %v", c.after, ends, c.ends)
			}
		}
	}
	strict, _ := SketchCandidates(m, Chain(m), 0)
	loose, _ := SketchCandidates(m, LooseChain(m), 0)
	var s protocol.Sketch
	s.Of(&m[4])
	if strict[0] != SketchTip(Chain(m)[3], &s) || loose[0] != SketchTip(LooseChain(m)[3], &s) || strict[0] == loose[0] {
		t.Fatal("a candidate is not the sketch tip of the history before its answer, on its chain")
	}
}
