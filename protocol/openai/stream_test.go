package openai

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// chunk wraps one chat.completion.chunk the way OpenAI frames it.
func chunk(choices, usage string) string {
	return `data: {"id":"chatcmpl-9x","object":"chat.completion.chunk","created":1718000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_1","choices":` +
		choices + `,"usage":` + usage + "}\n\n"
}

// realisticStream is a streamed answer with content, two parallel tool calls whose
// arguments arrive in fragments, a second choice to ignore, a keep-alive comment,
// a malformed event, the finish chunk, the usage chunk and [DONE].
var realisticStream = strings.Join([]string{
	": keep-alive\n\n",
	chunk(`[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]`, "null"),
	chunk(`[{"index":0,"delta":{"content":"Let me "},"logprobs":null,"finish_reason":null}]`, "null"),
	chunk(`[{"index":1,"delta":{"content":"IGNORED"},"logprobs":null,"finish_reason":null}]`, "null"),
	chunk(`[{"index":0,"delta":{"content":"check \"that\" — é."},"logprobs":null,"finish_reason":null}]`, "null"),
	chunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_user_details","arguments":""}}]},"logprobs":null,"finish_reason":null}]`, "null"),
	chunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"user"}}]},"logprobs":null,"finish_reason":null}]`, "null"),
	chunk(`[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"search_direct_flight","arguments":""}}]},"logprobs":null,"finish_reason":null}]`, "null"),
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"BROKEN\"\n\n",
	chunk(`[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"origin\":\"JFK\","}}]},"logprobs":null,"finish_reason":null}]`, "null"),
	chunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"_id\":\"mia_li_3668\"}"}}]},"logprobs":null,"finish_reason":null}]`, "null"),
	chunk(`[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"destination\":\"SEA\"}"}}]},"logprobs":null,"finish_reason":null}]`, "null"),
	chunk(`[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]`, "null"),
	chunk(`[]`, `{"prompt_tokens":1234,"completion_tokens":56,"total_tokens":1290,"prompt_tokens_details":{"cached_tokens":0}}`),
	"data: [DONE]\n\n",
}, "")

var realisticMessage = protocol.Message{
	Role:    "assistant",
	Content: "Let me check \"that\" — é.",
	ToolCalls: []protocol.ToolCall{
		{ID: "call_a", Type: "function", Name: "get_user_details", Arguments: `{"user_id":"mia_li_3668"}`},
		{ID: "call_b", Type: "function", Name: "search_direct_flight", Arguments: `{"origin":"JFK","destination":"SEA"}`},
	},
}

var realisticUsage = protocol.Usage{InputTokens: 1234, OutputTokens: 56}

// decodeChunks feeds stream to a new decoder in chunks of the given sizes
// (cycling) and returns it.
func decodeChunks(stream []byte, sizes func() int) *StreamDecoder {
	var d StreamDecoder
	for len(stream) > 0 {
		n := min(max(sizes(), 1), len(stream))
		if w, err := d.Write(stream[:n]); w != n || err != nil {
			panic("Write failed")
		}
		stream = stream[n:]
	}
	return &d
}

func TestStreamDecoderRealistic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	stream := []byte(realisticStream)
	feeds := map[string]func() int{
		"whole":        func() int { return len(stream) },
		"byte by byte": func() int { return 1 },
		"random":       func() int { return 1 + rng.IntN(64) },
		"random large": func() int { return 1 + rng.IntN(1024) },
	}
	for name, sizes := range feeds {
		t.Run(name, func(t *testing.T) {
			for range 20 {
				checkDecoded(t, decodeChunks(stream, sizes), realisticMessage, realisticUsage, true)
			}
		})
	}
}

func checkDecoded(t *testing.T, d *StreamDecoder, msg protocol.Message, usage protocol.Usage, finished bool) {
	t.Helper()
	if got := d.Message(); !reflect.DeepEqual(got, msg) {
		t.Fatalf("Message:\n got %#v\nwant %#v", got, msg)
	}
	if got := d.Usage(); got != usage {
		t.Fatalf("Usage = %+v; want %+v", got, usage)
	}
	if d.Finished() != finished {
		t.Fatalf("Finished = %v; want %v", d.Finished(), finished)
	}
}

func TestStreamDecoderFraming(t *testing.T) {
	one := func() int { return 1 }
	tests := []struct {
		name   string
		stream string
	}{
		{"CRLF", strings.ReplaceAll(realisticStream, "\n", "\r\n")},
		{"CR", strings.ReplaceAll(realisticStream, "\n", "\r")},
		{"no space after data:", strings.ReplaceAll(realisticStream, "data: ", "data:")},
		{"byte order mark", "\uFEFF" + realisticStream},
		{"other fields and comments", strings.ReplaceAll(realisticStream, "data: ", "event: message\nid: 7\n: note\nretry: 10\ndata: ")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkDecoded(t, decodeChunks([]byte(tt.stream), one), realisticMessage, realisticUsage, true)
			checkDecoded(t, decodeChunks([]byte(tt.stream), func() int { return len(tt.stream) }), realisticMessage, realisticUsage, true)
		})
	}
}

func TestStreamDecoderMultiLineData(t *testing.T) {
	stream := "data: {\"choices\":[{\"index\":0,\r\ndata:\"delta\":{\"content\":\"a\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":\ndata: {\"content\":\"b\"}}]}\n\n" +
		// A blank data line adds an empty line to the data: still one event.
		"data: {\"choices\":[{\"index\":0,\ndata\ndata: \"delta\":{\"content\":\"c\"}}]}\n\n"
	want := protocol.Message{Role: "assistant", Content: "abc"}
	checkDecoded(t, decodeChunks([]byte(stream), func() int { return 3 }), want, protocol.Usage{}, false)
}

func TestStreamDecoderEndings(t *testing.T) {
	tests := []struct {
		name     string
		stream   string
		finished bool
	}{
		{"finish_reason", chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, "null"), true},
		{"[DONE]", "data: [DONE]\n\n", true},
		{"[DONE] without the blank line", "data: [DONE]\n", true},
		{"finish_reason of another choice", chunk(`[{"index":1,"delta":{},"finish_reason":"stop"}]`, "null"), false},
		{"finish_reason null", chunk(`[{"index":0,"delta":{"content":"x"},"finish_reason":null}]`, "null"), false},
		{"cut mid-event", `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d StreamDecoder
			_, _ = d.Write([]byte(tt.stream))
			if d.Finished() != tt.finished {
				t.Fatalf("Finished = %v; want %v", d.Finished(), tt.finished)
			}
		})
	}
}

func TestStreamDecoderLegacyAndOddCalls(t *testing.T) {
	stream := chunk(`[{"delta":{"function_call":{"name":"f","arguments":"{\"a\""}}}]`, "null") +
		chunk(`[{"delta":{"function_call":{"arguments":":1}"}}}]`, "null") +
		// Tool calls without index take their position; an index arriving later
		// than a higher one still sorts first.
		chunk(`[{"index":0,"delta":{"tool_calls":[{"index":7,"id":"c7","function":{"name":"g","arguments":{"x":1}}}]}}]`, "null") +
		chunk(`[{"index":0,"delta":{"tool_calls":[{"index":3,"id":"c3","type":"function","function":{"name":"h"}}]}}]`, "null")
	want := protocol.Message{Role: "assistant", ToolCalls: []protocol.ToolCall{
		{Type: "function", Name: "f", Arguments: `{"a":1}`},
		{ID: "c3", Type: "function", Name: "h"},
		{ID: "c7", Type: "function", Name: "g", Arguments: `{"x":1}`},
	}}
	checkDecoded(t, decodeChunks([]byte(stream), func() int { return 5 }), want, protocol.Usage{}, false)
}

func TestStreamDecoderManyCalls(t *testing.T) {
	// Past mapCalls the calls are found by a map; fragments must still join.
	var b strings.Builder
	var want []protocol.ToolCall
	for i := 20; i >= 0; i-- {
		b.WriteString(chunk(`[{"index":0,"delta":{"tool_calls":[{"index":`+itoa(i)+`,"id":"c`+itoa(i)+`","function":{"name":"f","arguments":"{"}}]}}]`, "null"))
	}
	for i := 0; i <= 20; i++ {
		b.WriteString(chunk(`[{"index":0,"delta":{"tool_calls":[{"index":`+itoa(i)+`,"function":{"arguments":"}"}}]}}]`, "null"))
		want = append(want, protocol.ToolCall{ID: "c" + itoa(i), Type: "function", Name: "f", Arguments: "{}"})
	}
	var d StreamDecoder
	_, _ = d.Write([]byte(b.String()))
	first := d.Message()
	checkDecoded(t, &d, protocol.Message{Role: "assistant", ToolCalls: want}, protocol.Usage{}, false)
	// Message sorts a copy: a later delta must still find its call.
	_, _ = d.Write([]byte(chunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":" "}}]}}]`, "null")))
	if got := d.Message().ToolCalls[0].Arguments; got != "{} " || first.ToolCalls[0].Arguments != "{}" {
		t.Fatalf("arguments after Message = %q", got)
	}
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + itoa(i%10)
}

// TestStreamDecoderOversizedChunk: a chunk longer than the framer holds for the limit
// (protocol.EventBound) is skipped: its deltas are lost and the answer is cut there,
// while its finish_reason and usage, at its end, are read from its tail — the answer
// is finished without a [DONE] — and a chunk after it is read (and not kept).
func TestStreamDecoderOversizedChunk(t *testing.T) {
	const limit = 1 << 10
	before := chunk(`[{"index":0,"delta":{"content":"kept"}}]`, "null")
	huge := chunk(`[{"index":0,"delta":{"content":"`+strings.Repeat("x", protocol.EventBound(limit))+`"},"finish_reason":"stop"}]`,
		`{"prompt_tokens":5,"completion_tokens":7}`)
	after := chunk(`[{"index":0,"delta":{"content":"lost"}}]`, `{"prompt_tokens":6,"completion_tokens":8}`)
	for _, c := range []struct {
		stream string
		usage  protocol.Usage
	}{{before + huge, protocol.Usage{InputTokens: 5, OutputTokens: 7}}, {before + huge + after, protocol.Usage{InputTokens: 6, OutputTokens: 8}}} {
		for _, size := range []int{len(c.stream), 4096} {
			var d StreamDecoder
			d.Limit(limit)
			for b := []byte(c.stream); len(b) > 0; b = b[min(size, len(b)):] {
				_, _ = d.Write(b[:min(size, len(b))])
			}
			checkDecoded(t, &d, protocol.Message{Role: "assistant", Content: "kept"}, c.usage, true)
			if d.Truncated() < int64(len(huge)-len("data: \n\n")) {
				t.Fatalf("size %d: truncated %d, want the chunk's %d bytes", size, d.Truncated(), len(huge))
			}
		}
	}
}

func TestStreamDecoderIgnoresGarbage(t *testing.T) {
	stream := []byte("data: {\"choices\":\n\ndata: [1,2]\n\ndata: \"s\"\n\ndata: {\"choices\":{}}\n\ndata: {\"choices\":[7,{\"index\":0,\"delta\":[]}]}\n\n" +
		"data: " + strings.Repeat("[", jsontext.MaxDepth+1) + "\n\n" + "nonsense line\n\n" +
		chunk(`[{"index":0,"delta":{"content":"ok"}}]`, `{"prompt_tokens":"x"}`))
	d := decodeChunks(stream, func() int { return 7 })
	checkDecoded(t, d, protocol.Message{Role: "assistant", Content: "ok"}, protocol.Usage{}, false)
}

func TestStreamDecoderBigEvent(t *testing.T) {
	var d StreamDecoder
	big := chunk(`[{"index":0,"delta":{"content":"`+strings.Repeat("z", 1<<20)+`"}}]`, "null")
	for i := 0; i < len(big); i += 1000 {
		_, _ = d.Write([]byte(big[i:min(i+1000, len(big))]))
	}
	if !bytes.Equal([]byte(d.Message().Content), bytes.Repeat([]byte("z"), 1<<20)) {
		t.Fatal("content lost")
	}
}
