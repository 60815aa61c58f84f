package anthropic

import (
	"bytes"
	"encoding/base64"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
)

// sse frames one event the way Anthropic does.
func sseEvent(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }

// realisticEvents are the events of a streamed answer with thinking, text, two tool
// calls whose inputs arrive in fragments (with spaces, as the model writes them),
// pings, an unknown event and a malformed one; realisticStream frames them as SSE.
var realisticEvents = []string{
	`{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":34,"cache_creation_input_tokens":1000,"cache_read_input_tokens":200,"output_tokens":1}}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
	`{"type": "ping"}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The user wants"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}`,
	`{"type":"content_block_stop","index":0}`,
	`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Let me "}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"check \"that\" — é."}}`,
	`{"type":"content_block_stop","index":1}`,
	`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_a","name":"get_user_details","input":{}}}`,
	`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}`,
	`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"user_id\": "}}`,
	`{"type":"future_event","index":2,"delta":{"type":"text_delta","text":"IGNORED"}}`,
	`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"mia_li_3668\"}"}}`,
	`{"type":"content_block_stop","index":2}`,
	`{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"BROKEN"`,
	`{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_b","name":"search_direct_flight","input":{}}}`,
	`{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"origin\": \"JFK\", "}}`,
	`{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"\"destination\": \"SEA\"}"}}`,
	`{"type":"content_block_stop","index":3}`,
	`{"type":"content_block_start","index":4,"content_block":{"type":"text","text":"And flights."}}`,
	`{"type":"content_block_stop","index":4}`,
	`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":56}}`,
	`{"type":"message_stop"}`,
}

var realisticStream = func() string {
	var b strings.Builder
	for _, e := range realisticEvents {
		name := "unknown"
		if i := strings.Index(e, `"type":`); i >= 0 {
			name, _, _ = strings.Cut(strings.Trim(e[i+7:], ` "`), `"`)
		}
		b.WriteString(sseEvent(name, e))
	}
	return b.String()
}()

// decodeChunks feeds stream to a new decoder in chunks of the given sizes and
// returns it.
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

// answer is what the decoders under test expose.
type answer interface {
	Message() protocol.Message
	Usage() protocol.Usage
	Finished() bool
}

func checkDecoded(t *testing.T, d answer, msg protocol.Message, usage protocol.Usage, finished bool) {
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

func TestStreamMatchesJSONAnswer(t *testing.T) {
	// The same answer streamed or not normalises to the same message: stitching
	// hashes one and finds it again in the next request.
	msg, usage, err := DecodeResponse([]byte(realisticResponse))
	if err != nil {
		t.Fatal(err)
	}
	checkDecoded(t, decodeChunks([]byte(realisticStream), func() int { return 9 }), msg, usage, true)
}

func TestStreamDecoderFraming(t *testing.T) {
	one := func() int { return 1 }
	tests := []struct {
		name   string
		stream string
	}{
		{"CRLF", strings.ReplaceAll(realisticStream, "\n", "\r\n")},
		{"CR", strings.ReplaceAll(realisticStream, "\n", "\r")},
		{"no space after the colons", strings.ReplaceAll(strings.ReplaceAll(realisticStream, "data: ", "data:"), "event: ", "event:")},
		{"byte order mark", "\uFEFF" + realisticStream},
		{"no event fields", dropEventLines(realisticStream)},
		{"other fields and comments", strings.ReplaceAll(realisticStream, "data: ", "id: 7\n: note\nretry: 10\ndata: ")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkDecoded(t, decodeChunks([]byte(tt.stream), one), realisticMessage, realisticUsage, true)
			checkDecoded(t, decodeChunks([]byte(tt.stream), func() int { return len(tt.stream) }), realisticMessage, realisticUsage, true)
		})
	}
}

func dropEventLines(s string) string {
	var b strings.Builder
	for line := range strings.SplitAfterSeq(s, "\n") {
		if !strings.HasPrefix(line, "event:") {
			b.WriteString(line)
		}
	}
	return b.String()
}

func TestStreamDecoderEventNameFallback(t *testing.T) {
	// Data without a type takes the event field's; a type in the data wins.
	stream := sseEvent("content_block_delta", `{"index":0,"delta":{"type":"text_delta","text":"a"}}`) +
		sseEvent("message_stop", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"b"}}`) +
		"event: message_stop\n\n" + // no data: no event
		sseEvent(strings.Repeat("x", 64+1), `{}`) +
		"event: message_stop\ndata: {}\n\n"
	checkDecoded(t, decodeChunks([]byte(stream), func() int { return 3 }), protocol.Message{Role: "assistant", Content: "ab"}, protocol.Usage{}, true)
	// An event field with no dispatched data does not leak into the next event.
	stream = "event: message_stop\n\n" + "data: {}\n\n"
	checkDecoded(t, decodeChunks([]byte(stream), func() int { return 1 }), protocol.Message{Role: "assistant"}, protocol.Usage{}, false)
}

func TestStreamDecoderMultiLineData(t *testing.T) {
	stream := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\r\ndata:\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n" +
		"data: {\"type\":\"content_block_delta\",\"index\":0,\ndata\ndata: \"delta\":{\"type\":\"text_delta\",\"text\":\"b\"}}\n\n"
	checkDecoded(t, decodeChunks([]byte(stream), func() int { return 3 }), protocol.Message{Role: "assistant", Content: "ab"}, protocol.Usage{}, false)
}

func TestStreamDecoderEndings(t *testing.T) {
	stop := sseEvent("message_stop", `{"type":"message_stop"}`)
	errEvent := sseEvent("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	tests := []struct {
		name     string
		stream   string
		finished bool
	}{
		{"message_stop", stop, true},
		{"message_stop without the blank line", strings.TrimSuffix(stop, "\n"), false},
		{"message_delta only", sseEvent("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}`), false},
		{"error", errEvent, false},
		{"error then message_stop", errEvent + stop, false},
		{"content_block_stop only", sseEvent("content_block_stop", `{"type":"content_block_stop","index":0}`), false},
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

func TestStreamDecoderOddBlocks(t *testing.T) {
	ev := func(s string) string { return sseEvent("x", s) }
	stream := ev(`{"type":"content_block_delta","index":5,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`) + // a delta before its start
		ev(`{"type":"content_block_start","index":5,"content_block":{"type":"tool_use","id":"t5","name":"f","input":{}}}`) +
		ev(`{"type":"content_block_delta","index":5,"delta":{"type":"input_json_delta","partial_json":"1}"}}`) +
		ev(`{"type":"content_block_delta","index":5,"delta":{"type":"text_delta","text":"wrong kind"}}`) +
		ev(`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t2","name":"g","input":{"k": [1, 2]}}}`) + // no deltas: the start's input
		ev(`{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"t3","name":"h","input":{}}}`) +
		ev(`{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"cut"}}`) + // invalid JSON kept as is
		ev(`{"type":"content_block_delta","delta":{"type":"text_delta","text":"no index"}}`) +
		ev(`{"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use","id":"s","name":"web_search","input":{}}}`) +
		ev(`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"other kind"}}`)
	want := protocol.Message{Role: "assistant", Content: "no index", ToolCalls: []protocol.ToolCall{
		{ID: "t2", Type: "function", Name: "g", Arguments: `{"k":[1,2]}`},
		{ID: "t3", Type: "function", Name: "h", Arguments: `{"cut`},
		{ID: "t5", Type: "function", Name: "f", Arguments: `{"a":1}`},
	}, Raw: []protocol.RawJSON{`{"type":"server_tool_use","id":"s","name":"web_search","input":{}}`}}
	checkDecoded(t, decodeChunks([]byte(stream), func() int { return 5 }), want, protocol.Usage{}, false)
}

func TestStreamDecoderManyBlocks(t *testing.T) {
	// Past mapBlocks the blocks are found by a map; fragments must still join.
	var b strings.Builder
	var want []protocol.ToolCall
	for i := 20; i >= 0; i-- {
		n := strconv.Itoa(i)
		b.WriteString(sseEvent("content_block_start", `{"type":"content_block_start","index":`+n+`,"content_block":{"type":"tool_use","id":"t`+n+`","name":"f","input":{}}}`))
		b.WriteString(sseEvent("content_block_delta", `{"type":"content_block_delta","index":`+n+`,"delta":{"type":"input_json_delta","partial_json":"{"}}`))
	}
	for i := 0; i <= 20; i++ {
		n := strconv.Itoa(i)
		b.WriteString(sseEvent("content_block_delta", `{"type":"content_block_delta","index":`+n+`,"delta":{"type":"input_json_delta","partial_json":"}"}}`))
		want = append(want, protocol.ToolCall{ID: "t" + n, Type: "function", Name: "f", Arguments: "{}"})
	}
	var d StreamDecoder
	_, _ = d.Write([]byte(b.String()))
	first := d.Message()
	checkDecoded(t, &d, protocol.Message{Role: "assistant", ToolCalls: want}, protocol.Usage{}, false)
	// Message sorts a copy: a later delta must still find its block.
	_, _ = d.Write([]byte(sseEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"x"}}`)))
	if got := d.Message().ToolCalls[0].Arguments; got != "{}x" || first.ToolCalls[0].Arguments != "{}" {
		t.Fatalf("arguments after Message = %q", got)
	}
}

func TestStreamDecoderUsageUpdates(t *testing.T) {
	stream := sseEvent("message_start", `{"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1}}}`) +
		sseEvent("message_delta", `{"type":"message_delta","delta":{},"usage":{"output_tokens":7}}`) +
		sseEvent("message_delta", `{"type":"message_delta","delta":{},"usage":{"input_tokens":12,"cache_read_input_tokens":5,"output_tokens":9}}`)
	checkDecoded(t, decodeChunks([]byte(stream), func() int { return 4 }), protocol.Message{Role: "assistant"}, protocol.Usage{InputTokens: 17, OutputTokens: 9}, false)
}

// TestStreamDecoderOversizedEvent: an event longer than the framer holds for the limit
// (protocol.EventBound) — here a server tool's result block — is skipped: the answer
// is cut there, and the events after it still end it and give its usage.
func TestStreamDecoderOversizedEvent(t *testing.T) {
	const limit = 1 << 10
	before := sseEvent("message_start", `{"type":"message_start","message":{"usage":{"input_tokens":5,"output_tokens":1}}}`) +
		sseEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`) +
		sseEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"kept"}}`)
	huge := sseEvent("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"web_fetch_tool_result","tool_use_id":"srvtoolu_1",`+
		`"content":{"type":"web_fetch_result","content":{"type":"document","source":{"type":"text","data":"`+strings.Repeat("x", protocol.EventBound(limit))+`"}}}}}`)
	after := sseEvent("content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}`) +
		sseEvent("content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"lost"}}`) +
		sseEvent("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}`) +
		sseEvent("message_stop", `{"type":"message_stop"}`)
	stream := before + huge + after
	for _, size := range []int{len(stream), 4096} {
		var d StreamDecoder
		d.Limit(limit)
		for b := []byte(stream); len(b) > 0; b = b[min(size, len(b)):] {
			_, _ = d.Write(b[:min(size, len(b))])
		}
		checkDecoded(t, &d, protocol.Message{Role: "assistant", Content: "kept"}, protocol.Usage{InputTokens: 5, OutputTokens: 7}, true)
		if d.Truncated() < int64(protocol.EventBound(limit)) {
			t.Fatalf("size %d: truncated %d, want at least the block's", size, d.Truncated())
		}
	}
}

func TestStreamDecoderIgnoresGarbage(t *testing.T) {
	stream := []byte("data: {\"type\":\n\ndata: [1,2]\n\ndata: \"s\"\n\ndata: {\"type\":\"message_start\",\"message\":7}\n\n" +
		"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":[]}\n\n" +
		"data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":\"text\"}\n\n" +
		"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":\"x\"}}\n\n" +
		"data: " + strings.Repeat("[", 10001) + "\n\n" + "nonsense line\n\n" +
		sseEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}`))
	checkDecoded(t, decodeChunks(stream, func() int { return 7 }), protocol.Message{Role: "assistant", Content: "ok"}, protocol.Usage{}, false)
}

func TestStreamDecoderBigEvent(t *testing.T) {
	var d StreamDecoder
	d.Limit(2 << 20) // the event, not the answer's cap, is under test
	big := sseEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+strings.Repeat("z", 1<<20)+`"}}`)
	for i := 0; i < len(big); i += 1000 {
		_, _ = d.Write([]byte(big[i:min(i+1000, len(big))]))
	}
	if !bytes.Equal([]byte(d.Message().Content), bytes.Repeat([]byte("z"), 1<<20)) {
		t.Fatal("content lost")
	}
}

func TestEventDecoder(t *testing.T) {
	var d EventDecoder
	for i, e := range realisticEvents {
		if d.Finished() {
			t.Fatalf("finished before event %d", i)
		}
		// Bedrock carries each event base64-encoded; the caller decodes it.
		raw, err := base64.StdEncoding.DecodeString(base64.StdEncoding.EncodeToString([]byte(e)))
		if err != nil {
			t.Fatal(err)
		}
		d.Event(raw)
	}
	checkDecoded(t, &d, realisticMessage, realisticUsage, true)
}

func TestEventDecoderBedrockMetrics(t *testing.T) {
	// Bedrock's invocation metrics stand in for usage only when the stream had none.
	stop := `{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":40,"outputTokenCount":8,"invocationLatency":900,"firstByteLatency":300}}`
	var d EventDecoder
	d.Event([]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`))
	d.Event([]byte(stop))
	checkDecoded(t, &d, protocol.Message{Role: "assistant", Content: "hi"}, protocol.Usage{InputTokens: 40, OutputTokens: 8}, true)

	var e EventDecoder
	e.Event([]byte(`{"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}`))
	e.Event([]byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`))
	e.Event([]byte(stop))
	checkDecoded(t, &e, protocol.Message{Role: "assistant"}, protocol.Usage{InputTokens: 3, OutputTokens: 2}, true)

	var f EventDecoder
	f.Event([]byte(`{"type":"error","error":{"type":"overloaded_error"}}`))
	f.Event([]byte(`not json`))
	f.Event(nil)
	checkDecoded(t, &f, protocol.Message{Role: "assistant"}, protocol.Usage{}, false)
}
