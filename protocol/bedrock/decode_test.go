package bedrock

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"

	"github.com/camproxy/camproxy/protocol"
)

// encodeFrame encodes one event stream frame with the SDK's encoder.
func encodeFrame(t testing.TB, headers eventstream.Headers, payload string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := eventstream.NewEncoder().Encode(&b, eventstream.Message{Headers: headers, Payload: []byte(payload)}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// event is a frame of an event named typ.
func event(t testing.TB, typ, payload string) []byte {
	return encodeFrame(t, eventstream.Headers{
		{Name: ":event-type", Value: eventstream.StringValue(typ)},
		{Name: ":content-type", Value: eventstream.StringValue("application/json")},
		{Name: ":message-type", Value: eventstream.StringValue("event")},
	}, payload)
}

// chunk is an InvokeModelWithResponseStream chunk frame carrying js.
func chunk(t testing.TB, js string) []byte {
	return event(t, "chunk", `{"bytes":"`+base64.StdEncoding.EncodeToString([]byte(js))+`","p":"abcdefgh"}`)
}

// exception is an exception frame.
func exception(t testing.TB, typ, msg string) []byte {
	return encodeFrame(t, eventstream.Headers{
		{Name: ":exception-type", Value: eventstream.StringValue(typ)},
		{Name: ":content-type", Value: eventstream.StringValue("application/json")},
		{Name: ":message-type", Value: eventstream.StringValue("exception")},
	}, `{"message":"`+msg+`"}`)
}

// converseStream is a ConverseStream answer: text in two deltas, a tool call whose
// input arrives in fragments, a second text block, the stop and the metadata.
func converseStream(t testing.TB) []byte {
	var b []byte
	for _, f := range [][2]string{
		{"messageStart", `{"p":"abc","role":"assistant"}`},
		{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Let me "},"p":"ab"}`},
		{"contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"check. \u00e9"},"p":"ab"}`},
		{"contentBlockStop", `{"contentBlockIndex":0,"p":"abcd"}`},
		{"contentBlockStart", `{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"tooluse_1","name":"get_weather"}},"p":"a"}`},
		{"contentBlockDelta", `{"contentBlockIndex":1,"delta":{"toolUse":{"input":""}}}`},
		{"contentBlockDelta", `{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"city\": \"Pa"}}}`},
		{"contentBlockDelta", `{"contentBlockIndex":1,"delta":{"toolUse":{"input":"ris\", \"unit\": "}}}`},
		{"contentBlockDelta", `{"contentBlockIndex":1,"delta":{"toolUse":{"input":"\"C\"}"}}}`},
		{"contentBlockStop", `{"contentBlockIndex":1}`},
		{"contentBlockStart", `{"contentBlockIndex":2,"start":{"toolUse":{"toolUseId":"tooluse_2","name":"now"}}}`},
		{"contentBlockStop", `{"contentBlockIndex":2}`},
		{"contentBlockDelta", `{"contentBlockIndex":3,"delta":{"text":"Done."}}`},
		{"contentBlockStop", `{"contentBlockIndex":3}`},
		{"messageStop", `{"stopReason":"tool_use","p":"abcdefg"}`},
		{"metadata", `{"usage":{"inputTokens":42,"outputTokens":17,"totalTokens":59},"metrics":{"latencyMs":812},"p":"ab"}`},
	} {
		b = append(b, event(t, f[0], f[1])...)
	}
	return b
}

var converseWant = protocol.Message{
	Role:    "assistant",
	Content: "Let me check. é\nDone.",
	ToolCalls: []protocol.ToolCall{
		{ID: "tooluse_1", Type: "function", Name: "get_weather", Arguments: `{"city":"Paris","unit":"C"}`},
		{ID: "tooluse_2", Type: "function", Name: "now", Arguments: `{}`},
	},
}

// feed writes stream to d in the given chunking: 0 whole, 1 byte by byte, else
// random sizes up to that.
func feed(d protocol.Decoder, stream []byte, chunking int, rng *rand.Rand) {
	switch chunking {
	case 0:
		d.Write(stream)
	case 1:
		for i := range stream {
			d.Write(stream[i : i+1])
		}
	default:
		for len(stream) > 0 {
			n := min(1+rng.IntN(chunking), len(stream))
			d.Write(stream[:n])
			stream = stream[n:]
		}
	}
}

// checkDecode feeds stream in several chunkings to fresh decoders and compares.
func checkDecode(t *testing.T, newDec func() protocol.Decoder, stream []byte, want protocol.Message, usage protocol.Usage, finished bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, chunking := range []int{0, 1, 2, 7, 64, 1000} {
		for range 3 {
			d := newDec()
			feed(d, stream, chunking, rng)
			if got := d.Message(); !reflect.DeepEqual(got, want) {
				t.Fatalf("chunking %d: message\n got %#v\nwant %#v", chunking, got, want)
			}
			if got := d.Usage(); got != usage {
				t.Fatalf("chunking %d: usage %+v, want %+v", chunking, got, usage)
			}
			if d.Finished() != finished {
				t.Fatalf("chunking %d: finished = %v", chunking, d.Finished())
			}
			if chunking <= 1 {
				break
			}
		}
	}
}

func TestConverseStreamDecoder(t *testing.T) {
	r, err := Parse(ConverseStream, "amazon.nova-pro-v1:0", []byte(`{"messages":[]}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	stream := converseStream(t)
	checkDecode(t, r.Decoder, stream, converseWant, protocol.Usage{InputTokens: 42, OutputTokens: 17}, true)

	// Cut before messageStop: not finished.
	d := r.Decoder()
	cut := bytes.Index(stream, []byte(`"stopReason"`))
	d.Write(stream[:cut])
	if d.Finished() {
		t.Error("finished before messageStop")
	}
	// An exception ends the stream unfinished, and later frames are ignored.
	d = r.Decoder()
	exc := exception(t, "throttlingException", "slow down")
	d.Write(event(t, "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Hi"}}`))
	d.Write(exc)
	d.Write(event(t, "messageStop", `{"stopReason":"end_turn"}`))
	if d.Finished() || d.Message().Content != "Hi" {
		t.Errorf("after exception: finished %v, message %#v", d.Finished(), d.Message())
	}
	d = r.Decoder()
	d.Write(stream)
	d.Write(exc)
	if d.Finished() {
		t.Error("an exception after messageStop still leaves the stream finished")
	}
}

// claudeChunks are Anthropic stream events as Bedrock sends them in chunks.
var claudeChunks = []string{
	`{"type":"message_start","message":{"id":"msg_bdrk_1","type":"message","role":"assistant","model":"claude-3-5-sonnet-20241022","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":1}}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" there"}}`,
	`{"type":"content_block_stop","index":0}`,
	`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"lookup","input":{}}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"q\": "}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"x\"}"}}`,
	`{"type":"content_block_stop","index":1}`,
	`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":15}}`,
	`{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":25,"outputTokenCount":15,"invocationLatency":900,"firstByteLatency":300}}`,
}

// novaChunks are an Amazon Nova InvokeModel stream.
var novaChunks = []string{
	`{"messageStart":{"role":"assistant"}}`,
	`{"contentBlockDelta":{"delta":{"text":"Paris is "},"contentBlockIndex":0}}`,
	`{"contentBlockDelta":{"delta":{"text":"the capital."},"contentBlockIndex":0}}`,
	`{"contentBlockStop":{"contentBlockIndex":0}}`,
	`{"messageStop":{"stopReason":"end_turn"}}`,
	`{"metadata":{"usage":{"inputTokens":11,"outputTokens":6},"metrics":{},"trace":{}},"amazon-bedrock-invocationMetrics":{"inputTokenCount":11,"outputTokenCount":6,"invocationLatency":300,"firstByteLatency":120}}`,
}

func TestNovaStreamDecoder(t *testing.T) {
	r, err := Parse(InvokeStream, "us.amazon.nova-micro-v1:0", []byte(novaBody), nil)
	if err != nil {
		t.Fatal(err)
	}
	var stream []byte
	for _, c := range novaChunks {
		stream = append(stream, chunk(t, c)...)
	}
	checkDecode(t, r.Decoder, stream, protocol.Message{Role: "assistant", Content: "Paris is the capital."}, protocol.Usage{InputTokens: 11, OutputTokens: 6}, true)
}

// llamaChunks are a Llama InvokeModel stream.
var llamaChunks = []string{
	`{"generation":"Roses","prompt_token_count":9,"generation_token_count":1,"stop_reason":null}`,
	`{"generation":" are red","prompt_token_count":null,"generation_token_count":3,"stop_reason":null}`,
	`{"generation":".","prompt_token_count":null,"generation_token_count":4,"stop_reason":"stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":9,"outputTokenCount":4,"invocationLatency":200,"firstByteLatency":90}}`,
}

func TestLlamaStreamDecoder(t *testing.T) {
	r, err := Parse(InvokeStream, "meta.llama3-8b-instruct-v1:0", []byte(`{"prompt":"x"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var stream []byte
	for _, c := range llamaChunks {
		stream = append(stream, chunk(t, c)...)
	}
	want := protocol.Message{Role: "assistant", Content: "Roses are red."}
	checkDecode(t, r.Decoder, stream, want, protocol.Usage{InputTokens: 9, OutputTokens: 4}, true)
	last := bytes.LastIndex(stream, chunk(t, llamaChunks[2]))
	checkDecode(t, r.Decoder, stream[:last], protocol.Message{Role: "assistant", Content: "Roses are red"}, protocol.Usage{InputTokens: 9, OutputTokens: 3}, false)
}

func TestJSONDecoders(t *testing.T) {
	tests := []struct {
		name, model string
		op          Op
		req, answer string
		want        protocol.Message
		usage       protocol.Usage
	}{
		{
			name: "converse", model: "amazon.nova-pro-v1:0", op: Converse, req: `{"messages":[]}`,
			answer: `{"output":{"message":{"role":"assistant","content":[{"text":"Sure."},{"toolUse":{"toolUseId":"t1","name":"f","input":{"a": 1}}},{"text":"More."}]}},"stopReason":"tool_use","usage":{"inputTokens":30,"outputTokens":12,"totalTokens":42},"metrics":{"latencyMs":500}}`,
			want:   protocol.Message{Role: "assistant", Content: "Sure.\nMore.", ToolCalls: []protocol.ToolCall{{ID: "t1", Type: "function", Name: "f", Arguments: `{"a":1}`}}},
			usage:  protocol.Usage{InputTokens: 30, OutputTokens: 12},
		},
		{
			name: "nova invoke", model: "amazon.nova-lite-v1:0", op: Invoke, req: novaBody,
			answer: `{"output":{"message":{"content":[{"text":"A cat."}],"role":"assistant"}},"stopReason":"end_turn","usage":{"inputTokens":20,"outputTokens":3,"totalTokens":23}}`,
			want:   protocol.Message{Role: "assistant", Content: "A cat."},
			usage:  protocol.Usage{InputTokens: 20, OutputTokens: 3},
		},
		{
			name: "llama invoke", model: "meta.llama3-70b-instruct-v1:0", op: Invoke, req: `{"prompt":"hi"}`,
			answer: `{"generation":"Hello!","prompt_token_count":5,"generation_token_count":3,"stop_reason":"stop"}`,
			want:   protocol.Message{Role: "assistant", Content: "Hello!"},
			usage:  protocol.Usage{InputTokens: 5, OutputTokens: 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse(tt.op, tt.model, []byte(tt.req), nil)
			if err != nil {
				t.Fatal(err)
			}
			checkDecode(t, r.Decoder, []byte(tt.answer+"\n"), tt.want, tt.usage, true)
			// An error body is no answer.
			d := r.Decoder()
			d.Write([]byte(`{"message":"The security token included in the request is invalid."}`))
			if d.Finished() || d.Message().Role != "assistant" {
				t.Error("an error body finished the answer")
			}
			// A truncated body is no answer.
			d = r.Decoder()
			d.Write([]byte(tt.answer[:len(tt.answer)-1]))
			if d.Finished() {
				t.Error("a truncated body finished the answer")
			}
		})
	}
}

func TestJSONDecoderCap(t *testing.T) {
	d := newJSONDecoder(decodeConverseResponse)
	big := bytes.Repeat([]byte(" "), 1<<20)
	for range 17 {
		d.Write(big)
	}
	d.Write([]byte(`{"output":{"message":{"content":[{"text":"x"}]}}}`))
	if d.Finished() || d.buf != nil {
		t.Error("a body past the cap was kept")
	}
}

// TestFrameReaderSkipsLongFrames: a frame longer than Max is skipped unread, in any
// chunking, once its prelude's CRC vouches for its length; the frames after it are
// decoded, and the reader holds no more than Max meanwhile. A skipped frame's corrupt
// prelude stops the reader.
func TestFrameReaderSkipsLongFrames(t *testing.T) {
	const limit = 4 << 10
	small := event(t, "messageStart", `{"role":"assistant"}`)
	long := event(t, "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"`+strings.Repeat("x", 64<<10)+`"}}`)
	stream := slices.Concat(small, long, small)
	for _, size := range []int{len(stream), 4096, 5, 1} {
		var frames, skipped []int
		f := FrameReader{Max: limit, Frame: func(m eventstream.Message) { frames = append(frames, len(m.Payload)) },
			Skipped: func(n int) { skipped = append(skipped, n) }}
		for b := stream; len(b) > 0; b = b[min(size, len(b)):] {
			f.Write(b[:min(size, len(b))])
			if cap(f.buf) > limit {
				t.Fatalf("size %d: holds %d bytes, bound %d", size, cap(f.buf), limit)
			}
		}
		if len(frames) != 2 || !slices.Equal(skipped, []int{len(long)}) || f.Broken() {
			t.Fatalf("size %d: frames %v, skipped %v, broken %v", size, frames, skipped, f.Broken())
		}
	}
	bad := slices.Concat(small, long, small)
	bad[len(small)+9] ^= 1 // the long frame's prelude CRC
	for _, size := range []int{len(bad), 3} {
		n := 0
		f := FrameReader{Max: limit, Frame: func(eventstream.Message) { n++ }, Skipped: func(int) { t.Fatal("a corrupt frame was skipped") }}
		for b := bad; len(b) > 0; b = b[min(size, len(b)):] {
			f.Write(b[:min(size, len(b))])
		}
		if n != 1 || !f.Broken() {
			t.Fatalf("size %d: a corrupt prelude: frames %d, broken %v", size, n, f.Broken())
		}
	}
}

func TestFrameReaderBounds(t *testing.T) {
	var n int
	f := FrameReader{Frame: func(eventstream.Message) { n++ }}
	frame := event(t, "messageStart", `{"role":"assistant"}`)
	f.Write(frame)
	if n != 1 || f.Broken() {
		t.Fatalf("frames %d, broken %v", n, f.Broken())
	}
	// A length past the cap stops the reader without buffering.
	var huge [4]byte
	binary.BigEndian.PutUint32(huge[:], maxFrame+1)
	f.Write(huge[:2])
	f.Write(huge[2:])
	f.Write(frame)
	if n != 1 || !f.Broken() || f.buf != nil {
		t.Fatalf("after a huge length: frames %d, broken %v, buffered %d", n, f.Broken(), len(f.buf))
	}
	// A corrupt CRC stops it too.
	f = FrameReader{Frame: func(eventstream.Message) { n++ }}
	bad := bytes.Clone(frame)
	bad[len(bad)-1] ^= 1
	f.Write(bad)
	if !f.Broken() {
		t.Fatal("a bad CRC did not break the reader")
	}
	// A short length as well.
	f = FrameReader{}
	f.Write([]byte{0, 0, 0, 3, 1, 2, 3})
	if !f.Broken() {
		t.Fatal("a short length did not break the reader")
	}
}
