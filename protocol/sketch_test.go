package protocol_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/anthropic"
	"github.com/camproxy/camproxy/protocol/bedrock"
	"github.com/camproxy/camproxy/protocol/openai"
	"github.com/camproxy/camproxy/protocol/responses"
)

func sketchOf(m protocol.Message) uint64 {
	var s protocol.Sketch
	s.Of(&m)
	return s.Sum64()
}

// TestSketchText: the text is kept whitespace collapsed, in any chunking and split
// into blocks anyhow, up to protocol.SketchText bytes; a word changed within them
// changes the sketch, one changed past them does not.
func TestSketchText(t *testing.T) {
	long := strings.Repeat("word ", 2*protocol.SketchText/5)
	base := sketchOf(protocol.Message{Role: "assistant", Content: "Let me write it.\n\n" + long})
	same := []string{
		" Let me  write it. " + long,
		"Let me\twrite\u00a0it.\n" + long + "\n\n",
		"Let me write it. " + long + "and then some more",
	}
	for _, s := range same {
		if got := sketchOf(protocol.Message{Role: "assistant", Content: s}); got != base {
			t.Errorf("%.40q…: sketch differs from the text's with other whitespace or past the kept bytes", s)
		}
	}
	for _, s := range []string{"Let me write  it!" + long, "Let mewrite it. " + long, "Let me write it."} {
		if sketchOf(protocol.Message{Role: "assistant", Content: s}) == base {
			t.Errorf("%.40q…: a different text within the kept bytes sketches alike", s)
		}
	}
	// Fed as a decoder feeds it: any pieces, texts of several blocks.
	whole := "Let me write it.\n\n" + long
	for _, step := range []int{1, 3, 7, 64} {
		var s protocol.Sketch
		for i := 0; i < len(whole); i += step {
			s.Text(0, whole[i:min(i+step, len(whole))])
		}
		if s.Sum64() != base {
			t.Errorf("fed %d bytes at a time: sketch differs", step)
		}
	}
	var blocks protocol.Sketch
	blocks.Text(0, "Let me write")
	blocks.Text(2, "it.")
	blocks.Text(2, "")
	blocks.Text(5, long)
	if blocks.Sum64() != base {
		t.Error("texts of blocks joined with \"\\n\" and fed block by block sketch differently")
	}
	var glued protocol.Sketch
	glued.Text(0, "Let me write")
	glued.Text(0, "it. "+long)
	if glued.Sum64() == base {
		t.Error("pieces of one text were kept apart")
	}
}

// TestSketchCalls: calls count by id and name in index order, whatever order they
// arrive in; the first protocol.SketchCalls are kept.
func TestSketchCalls(t *testing.T) {
	var calls []protocol.ToolCall
	for i := range protocol.SketchCalls + 3 {
		calls = append(calls, protocol.ToolCall{ID: fmt.Sprintf("call_%d", i), Type: "function", Name: "f", Arguments: fmt.Sprintf(`{"i":%d}`, i)})
	}
	m := protocol.Message{Role: "assistant", Content: "go", ToolCalls: calls}
	want := sketchOf(m)

	var s protocol.Sketch
	s.Text(0, "go")
	for _, i := range []int{9, 3, 0, 10, 1, 2, 8, 4, 5, 6, 7} { // indexes as a stream could bring them
		s.Call(int64(i)*2+1, calls[i].ID, "")
		s.Call(int64(i)*2+1, "", calls[i].Name)
	}
	if s.Sum64() != want {
		t.Error("calls fed out of order, id and name apart, sketch differently from the message's")
	}

	past := m
	past.ToolCalls = append([]protocol.ToolCall(nil), calls...)
	past.ToolCalls[protocol.SketchCalls].ID = "call_other"
	if sketchOf(past) != want {
		t.Error("a call past the kept ones changed the sketch")
	}
	args := m
	args.ToolCalls = append([]protocol.ToolCall(nil), calls...)
	args.ToolCalls[0].Arguments = `{"i":"re-spelt"}`
	if sketchOf(args) != want {
		t.Error("arguments changed the sketch; they are not kept")
	}
	for name, mutate := range map[string]func(tc *protocol.ToolCall){
		"id":   func(tc *protocol.ToolCall) { tc.ID = "call_other" },
		"name": func(tc *protocol.ToolCall) { tc.Name = "g" },
	} {
		other := m
		other.ToolCalls = append([]protocol.ToolCall(nil), calls...)
		mutate(&other.ToolCalls[1])
		if sketchOf(other) == want {
			t.Errorf("a call's %s changed and the sketch did not", name)
		}
	}
	if sketchOf(protocol.Message{Role: "assistant", Content: "go"}) == want {
		t.Error("an answer without its calls sketches like one with them")
	}
}

// sketchCase is one decoder's answer whose start (reasoning, where the protocol has
// it) is longer than the limit: the budget is spent before the text and the tool
// call arrive.
type sketchCase struct {
	name   string
	req    func(t *testing.T) protocol.Request
	answer func(t *testing.T) []byte
}

// The answer every case gives: reasoning, a text with runs of whitespace, a tool call
// with large arguments.
var (
	skReasoning = strings.Repeat("think ", 200)
	skText      = `I'll write the file now.  It holds the report. ` + strings.Repeat("Lorem ipsum dolor. ", 30)
	skArgs      = `{"file_path":"/tmp/report.md","content":"` + strings.Repeat("x", 4000) + `"}`
)

// pieces cuts s in n pieces (the last takes the rest).
func pieces(s string, n int) []string {
	var out []string
	step := len(s)/n + 1
	for i := 0; i < len(s); i += step {
		out = append(out, s[i:min(i+step, len(s))])
	}
	return out
}

// jsonString is s as a JSON string's content (the fixtures hold no character that
// needs more than quotes escaped).
func jsonString(s string) string { return strings.ReplaceAll(s, `"`, `\"`) }

var sketchCases = []sketchCase{
	{"openai stream", parsed(openai.Parse, chatBody), func(*testing.T) []byte {
		b := sse(`{"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"` + skReasoning + `"}}]}`)
		for _, p := range pieces(skText, 5) {
			b = append(b, sse(`{"choices":[{"index":0,"delta":{"content":"`+p+`"}}]}`)...)
		}
		b = append(b, sse(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_w1","type":"function","function":{"name":"write","arguments":""}}]}}]}`)...)
		for _, p := range pieces(skArgs, 4) {
			b = append(b, sse(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"`+jsonString(p)+`"}}]}}]}`)...)
		}
		return append(b, sse(`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`)...)
	}},
	{"openai", parsed(openai.Parse, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`), func(*testing.T) []byte {
		return []byte(`{"choices":[{"index":0,"message":{"role":"assistant","reasoning_content":"` + skReasoning + `","content":"` + skText +
			`","tool_calls":[{"id":"call_w1","type":"function","function":{"name":"write","arguments":"` + jsonString(skArgs) + `"}}]}}]}`)
	}},
	{"anthropic stream", parsed(anthropic.Parse, `{"model":"c","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"hi"}]}`), func(*testing.T) []byte {
		return anthropicEvents(func(ev string) []byte { return sse(ev) })
	}},
	{"anthropic", parsed(anthropic.Parse, `{"model":"c","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`), func(*testing.T) []byte {
		return []byte(`{"type":"message","role":"assistant","content":[{"type":"thinking","thinking":"` + skReasoning + `","signature":"sig"},` +
			`{"type":"text","text":"` + skText + `"},{"type":"tool_use","id":"toolu_w1","name":"Write","input":` + skArgs + `}],"usage":{"input_tokens":5,"output_tokens":7}}`)
	}},
	{"responses stream", parsed(responses.Parse, `{"model":"m","stream":true,"input":"hi"}`), func(*testing.T) []byte {
		return responsesEvents(true)
	}},
	{"responses stream without final output", parsed(responses.Parse, `{"model":"m","stream":true,"input":"hi"}`), func(*testing.T) []byte {
		return responsesEvents(false)
	}},
	{"responses", parsed(responses.Parse, `{"model":"m","input":"hi"}`), func(*testing.T) []byte {
		return []byte(`{"id":"resp_1","output":` + responsesFull() + `,"usage":{"input_tokens":5,"output_tokens":7}}`)
	}},
	{"bedrock converse stream", bedrockReq(bedrock.ConverseStream, "anthropic.claude-3", `{"messages":[{"role":"user","content":[{"text":"hi"}]}]}`), func(t *testing.T) []byte {
		b := frame(t, "messageStart", `{"role":"assistant"}`)
		b = append(b, frame(t, "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"`+skReasoning+`"}}}`)...)
		for _, p := range pieces(skText, 5) {
			b = append(b, frame(t, "contentBlockDelta", `{"contentBlockIndex":1,"delta":{"text":"`+p+`"}}`)...)
		}
		b = append(b, frame(t, "contentBlockStart", `{"contentBlockIndex":2,"start":{"toolUse":{"toolUseId":"tooluse_w1","name":"Write"}}}`)...)
		for _, p := range pieces(skArgs, 4) {
			b = append(b, frame(t, "contentBlockDelta", `{"contentBlockIndex":2,"delta":{"toolUse":{"input":"`+jsonString(p)+`"}}}`)...)
		}
		return append(b, frame(t, "messageStop", `{"stopReason":"tool_use"}`)...)
	}},
	{"bedrock converse", bedrockReq(bedrock.Converse, "anthropic.claude-3", `{"messages":[{"role":"user","content":[{"text":"hi"}]}]}`), func(*testing.T) []byte {
		return []byte(`{"output":{"message":{"role":"assistant","content":[{"reasoningContent":{"reasoningText":{"text":"` + skReasoning + `"}}},` +
			`{"text":"` + skText + `"},{"toolUse":{"toolUseId":"tooluse_w1","name":"Write","input":` + skArgs + `}}]}},"usage":{"inputTokens":5,"outputTokens":7}}`)
	}},
	{"bedrock claude invoke stream", bedrockReq(bedrock.InvokeStream, "anthropic.claude-3", `{"anthropic_version":"bedrock-2023-05-31","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`), func(t *testing.T) []byte {
		return anthropicEvents(func(ev string) []byte { return chunkFrame(t, ev) })
	}},
	{"bedrock llama invoke stream", bedrockReq(bedrock.InvokeStream, "meta.llama3-8b-instruct-v1:0", `{"prompt":"hi"}`), func(t *testing.T) []byte {
		var b []byte
		for _, p := range pieces(skReasoning+skText+skText, 9) { // no reasoning nor tools: a long text
			b = append(b, chunkFrame(t, `{"generation":"`+p+`"}`)...)
		}
		return append(b, chunkFrame(t, `{"generation":"","stop_reason":"stop"}`)...)
	}},
}

// anthropicEvents is the Messages stream of the answer, each event framed by frame.
func anthropicEvents(frame func(string) []byte) []byte {
	b := frame(`{"type":"message_start","message":{"role":"assistant","usage":{"input_tokens":5,"output_tokens":1}}}`)
	b = append(b, frame(`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`)...)
	b = append(b, frame(`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"`+skReasoning+`"}}`)...)
	b = append(b, frame(`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`)...)
	for _, p := range pieces(skText, 5) {
		b = append(b, frame(`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"`+p+`"}}`)...)
	}
	b = append(b, frame(`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_w1","name":"Write","input":{}}}`)...)
	for _, p := range pieces(skArgs, 4) {
		b = append(b, frame(`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"`+jsonString(p)+`"}}`)...)
	}
	b = append(b, frame(`{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}`)...)
	return append(b, frame(`{"type":"message_stop"}`)...)
}

const responsesOutput = `[{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"` + "think think" + `"}],"encrypted_content":"ENC"},` +
	`{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"TEXT"}]},` +
	`{"type":"function_call","id":"fc_1","call_id":"call_w1","name":"write","arguments":"ARGS"}]`

// responsesFull is the answer's output items.
func responsesFull() string {
	return strings.NewReplacer("think think", skReasoning, "TEXT", skText, "ARGS", jsonString(skArgs)).Replace(responsesOutput)
}

// responsesEvents is the Responses stream of the answer; withFinal: the final event
// repeats the output, else its output is empty (as some backends send it).
func responsesEvents(withFinal bool) []byte {
	reasoning := `{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"` + skReasoning + `"}]}`
	b := sse(`{"type":"response.created","response":{"id":"resp_1","output":[]}}`)
	b = append(b, sse(`{"type":"response.output_item.added","output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[]}}`)...)
	b = append(b, sse(`{"type":"response.output_item.done","output_index":0,"item":`+reasoning+`}`)...)
	b = append(b, sse(`{"type":"response.output_item.added","output_index":1,"item":{"type":"message","id":"msg_1","role":"assistant","content":[]}}`)...)
	for _, p := range pieces(skText, 5) {
		b = append(b, sse(`{"type":"response.output_text.delta","output_index":1,"content_index":0,"delta":"`+p+`"}`)...)
	}
	b = append(b, sse(`{"type":"response.output_item.done","output_index":1,"item":{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"`+skText+`"}]}}`)...)
	b = append(b, sse(`{"type":"response.output_item.added","output_index":2,"item":{"type":"function_call","id":"fc_1","call_id":"call_w1","name":"write","arguments":""}}`)...)
	for _, p := range pieces(skArgs, 4) {
		b = append(b, sse(`{"type":"response.function_call_arguments.delta","output_index":2,"delta":"`+jsonString(p)+`"}`)...)
	}
	output := "[]"
	if withFinal {
		output = responsesFull()
	}
	return append(b, sse(`{"type":"response.completed","response":{"id":"resp_1","output":`+output+`,"usage":{"input_tokens":5,"output_tokens":7}}}`)...)
}

// TestSketchBesideBudget: whatever the limit cut — the reasoning that comes first
// eating it all, or the arguments — every decoder's sketch is the whole answer's, the
// one its echo in the next call gives; and it differs from the cut answer's own.
func TestSketchBesideBudget(t *testing.T) {
	for _, tc := range sketchCases {
		t.Run(tc.name, func(t *testing.T) {
			answer := tc.answer(t)
			whole := tc.req(t).Decoder()
			_, _ = whole.Write(answer)
			if !whole.Finished() || whole.Truncated() != 0 {
				t.Fatalf("the whole answer: finished %v, truncated %d", whole.Finished(), whole.Truncated())
			}
			m := whole.Message()
			if !strings.HasPrefix(m.Content, "I'll write") && !strings.HasPrefix(m.Content, "think") {
				t.Fatalf("the whole answer's text: %.40q", m.Content)
			}
			want := sketchOf(m)
			// Less than the reasoning (but room for an item's accumulator), up to the
			// text, up to the arguments.
			for _, limit := range []int{300, len(skReasoning) + 100, len(skReasoning) + len(skText) + 40} {
				dec := tc.req(t).Decoder()
				dec.Limit(limit)
				for i := 0; i < len(answer); i += 61 { // any chunking
					_, _ = dec.Write(answer[i:min(i+61, len(answer))])
				}
				if !dec.Finished() || dec.Truncated() == 0 {
					t.Fatalf("limit %d: finished %v, truncated %d", limit, dec.Finished(), dec.Truncated())
				}
				sk := dec.Sketch()
				if sk == nil || sk.Sum64() != want {
					t.Errorf("limit %d: the sketch is not the whole answer's (kept %q, %d calls)", limit, dec.Message().Content, len(dec.Message().ToolCalls))
				}
				// The reasoning came first and took the budget: the text's bytes the
				// sketch needs are not in the cut answer (Llama has no reasoning).
				if limit == 300 && !strings.HasPrefix(m.Content, "think") && sketchOf(dec.Message()) == want {
					t.Errorf("limit %d: the cut answer sketches like the whole one: the test cuts too little", limit)
				}
			}
		})
	}
}

// FuzzSketchText: a text fed in pieces (cut between characters, as decoded deltas
// are) sketches like the text whole, and so does the text with whitespace around it.
func FuzzSketchText(f *testing.F) {
	f.Add("Let me  write\n it.", uint8(3))
	f.Add("é\u00a0x\u2003 y\t", uint8(1))
	f.Add(strings.Repeat("ab  ", 100), uint8(7))
	f.Fuzz(func(t *testing.T, text string, step uint8) {
		want := sketchOf(protocol.Message{Role: "assistant", Content: text})
		var s protocol.Sketch
		for i := 0; i < len(text); {
			j := min(i+int(step)+1, len(text))
			for j < len(text) && !utf8.RuneStart(text[j]) {
				j++
			}
			s.Text(0, text[i:j])
			i = j
		}
		if s.Sum64() != want {
			t.Fatalf("%q fed %d bytes at a time sketches differently", text, int(step)+1)
		}
		if sketchOf(protocol.Message{Role: "assistant", Content: " \n" + text + "\t "}) != want {
			t.Fatalf("whitespace around %q changed its sketch", text)
		}
	})
}
