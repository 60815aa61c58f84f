package protocol_test

import (
	"bytes"
	"encoding/base64"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/anthropic"
	"github.com/camproxy/camproxy/protocol/bedrock"
	"github.com/camproxy/camproxy/protocol/openai"
	"github.com/camproxy/camproxy/protocol/responses"
)

// capCase is one adapter's answer of many text deltas: its request body, and the
// answer's head, one delta carrying text, and its tail (the final events, usage).
type capCase struct {
	name  string
	parse func(t *testing.T) protocol.Request
	head  func(t *testing.T) []byte
	delta func(t *testing.T, text string) []byte
	tail  func(t *testing.T, whole string) []byte // whole: the answer's text
	field func(m protocol.Message) string         // where the text lands
	id    string                                  // the response id Identified reports
}

const chatBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

func sse(data string) []byte { return []byte("data: " + data + "\n\n") }

func none(*testing.T) []byte { return nil }

func content(m protocol.Message) string { return m.Content }

// frame is an AWS event stream frame of an event named typ.
func frame(t *testing.T, typ, payload string) []byte {
	t.Helper()
	var b bytes.Buffer
	err := eventstream.NewEncoder().Encode(&b, eventstream.Message{Headers: eventstream.Headers{
		{Name: ":event-type", Value: eventstream.StringValue(typ)},
		{Name: ":message-type", Value: eventstream.StringValue("event")},
	}, Payload: []byte(payload)})
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func chunkFrame(t *testing.T, js string) []byte {
	return frame(t, "chunk", `{"bytes":"`+base64.StdEncoding.EncodeToString([]byte(js))+`"}`)
}

// parsed is a request an adapter's Parse reads from body.
func parsed[R protocol.Request](parse func([]byte, []protocol.TaskRule) (R, error), body string) func(*testing.T) protocol.Request {
	return func(t *testing.T) protocol.Request {
		r, err := parse([]byte(body), protocol.DefaultTaskRules())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
}

func bedrockReq(op bedrock.Op, model, body string) func(t *testing.T) protocol.Request {
	return func(t *testing.T) protocol.Request {
		r, err := bedrock.Parse(op, model, []byte(body), protocol.DefaultTaskRules())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
}

var capCases = []capCase{
	{
		name:  "openai stream content",
		parse: parsed(openai.Parse, chatBody),
		head:  none,
		delta: func(_ *testing.T, s string) []byte {
			return sse(`{"choices":[{"index":0,"delta":{"content":"` + s + `"}}]}`)
		},
		tail: func(*testing.T, string) []byte {
			return sse(`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":7}}`)
		},
		field: content,
	},
	{
		name:  "openai stream tool arguments",
		parse: parsed(openai.Parse, chatBody),
		head: func(*testing.T) []byte {
			return sse(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"write","arguments":""}}]}}]}`)
		},
		delta: func(_ *testing.T, s string) []byte {
			return sse(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"` + s + `"}}]}}]}`)
		},
		tail: func(*testing.T, string) []byte {
			return sse(`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":7}}`)
		},
		field: func(m protocol.Message) string {
			if len(m.ToolCalls) == 0 {
				return ""
			}
			return m.ToolCalls[0].Arguments
		},
	},
	{
		name:  "anthropic stream",
		parse: parsed(anthropic.Parse, `{"model":"c","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"hi"}]}`),
		head: func(*testing.T) []byte {
			return append(sse(`{"type":"message_start","message":{"role":"assistant","usage":{"input_tokens":5,"output_tokens":1}}}`),
				sse(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)...)
		},
		delta: func(_ *testing.T, s string) []byte {
			return sse(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + s + `"}}`)
		},
		tail: func(*testing.T, string) []byte {
			return append(sse(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}`), sse(`{"type":"message_stop"}`)...)
		},
		field: content,
	},
	{
		name:  "responses stream",
		parse: parsed(responses.Parse, `{"model":"m","stream":true,"input":"hi"}`),
		head: func(*testing.T) []byte {
			return append(sse(`{"type":"response.created","response":{"id":"resp_1","output":[]}}`),
				sse(`{"type":"response.output_item.added","output_index":0,"item":{"type":"message","role":"assistant","content":[]}}`)...)
		},
		delta: func(_ *testing.T, s string) []byte {
			return sse(`{"type":"response.output_text.delta","output_index":0,"content_index":0,"delta":"` + s + `"}`)
		},
		tail: func(_ *testing.T, whole string) []byte {
			return sse(`{"type":"response.completed","response":{"id":"resp_1","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"` +
				whole + `"}]}],"usage":{"input_tokens":5,"output_tokens":7}}}`)
		},
		field: content,
		id:    "resp_1",
	},
	{
		name:  "bedrock converse stream",
		parse: bedrockReq(bedrock.ConverseStream, "anthropic.claude-3", `{"messages":[{"role":"user","content":[{"text":"hi"}]}]}`),
		head:  func(t *testing.T) []byte { return frame(t, "messageStart", `{"role":"assistant"}`) },
		delta: func(t *testing.T, s string) []byte {
			return frame(t, "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"`+s+`"}}`)
		},
		tail: func(t *testing.T, _ string) []byte {
			return append(frame(t, "messageStop", `{"stopReason":"end_turn"}`),
				frame(t, "metadata", `{"usage":{"inputTokens":5,"outputTokens":7}}`)...)
		},
		field: content,
	},
	{
		name:  "bedrock claude invoke stream",
		parse: bedrockReq(bedrock.InvokeStream, "anthropic.claude-3", `{"anthropic_version":"bedrock-2023-05-31","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`),
		head: func(t *testing.T) []byte {
			return append(chunkFrame(t, `{"type":"message_start","message":{"role":"assistant","usage":{"input_tokens":5,"output_tokens":1}}}`),
				chunkFrame(t, `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)...)
		},
		delta: func(t *testing.T, s string) []byte {
			return chunkFrame(t, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+s+`"}}`)
		},
		tail: func(t *testing.T, _ string) []byte {
			return append(chunkFrame(t, `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}`),
				chunkFrame(t, `{"type":"message_stop"}`)...)
		},
		field: content,
	},
	{
		name:  "bedrock llama invoke stream",
		parse: bedrockReq(bedrock.InvokeStream, "meta.llama3-8b-instruct-v1:0", `{"prompt":"hi"}`),
		head:  none,
		delta: func(t *testing.T, s string) []byte { return chunkFrame(t, `{"generation":"`+s+`"}`) },
		tail: func(t *testing.T, _ string) []byte {
			return chunkFrame(t, `{"generation":"","prompt_token_count":5,"generation_token_count":7,"stop_reason":"stop"}`)
		},
		field: content,
	},
}

// TestAnswerCap streams 4 MiB of deltas through every adapter's decoder with a 64 KiB
// limit: the answer keeps a prefix within the limit and says it was cut, while the
// decoder still sees the end, the usage and the id.
func TestAnswerCap(t *testing.T) {
	const limit, total = 64 << 10, 4 << 20
	piece := strings.Repeat("abcdefgh", 128) // 1 KiB a delta
	whole := strings.Repeat(piece, total/len(piece))
	for _, tc := range capCases {
		t.Run(tc.name, func(t *testing.T) {
			var stream []byte
			stream = append(stream, tc.head(t)...)
			d := tc.delta(t, piece)
			for range total / len(piece) {
				stream = append(stream, d...)
			}
			stream = append(stream, tc.tail(t, whole)...)

			dec := tc.parse(t).Decoder()
			dec.Limit(limit)
			for i := 0; i < len(stream); i += 4093 { // any chunking
				_, _ = dec.Write(stream[i:min(i+4093, len(stream))])
			}
			if !dec.Finished() {
				t.Fatal("not finished: the cap must not stop the decoder reading the stream's end")
			}
			if u := dec.Usage(); u != (protocol.Usage{InputTokens: 5, OutputTokens: 7}) {
				t.Fatalf("usage %+v", u)
			}
			m := dec.Message()
			got := tc.field(m)
			if len(got) == 0 || len(got) > limit || !strings.HasPrefix(whole, got) {
				t.Fatalf("kept %d bytes (limit %d), a prefix of the answer: %v", len(got), limit, strings.HasPrefix(whole, got))
			}
			if tr := dec.Truncated(); tr < int64(total-limit) || tr > int64(total) {
				t.Fatalf("Truncated = %d, want between %d and %d", tr, total-limit, total)
			}
			if tc.id != "" {
				if got := dec.(protocol.Identified).ResponseID(); got != tc.id {
					t.Fatalf("response id %q", got)
				}
			}
		})
	}
}

// TestAnswerCapOversizedEvent: in every adapter, one delta longer than its framer holds
// for the limit (protocol.EventBound: an SSE event's data, an event stream frame) is
// skipped without losing the stream: the answer keeps what came before it and is
// marked cut there (nothing after it is kept: the record stays a prefix), while the
// events after it still give the end, the usage and the id.
func TestAnswerCapOversizedEvent(t *testing.T) {
	const limit = 1 << 10
	huge := strings.Repeat("x", 2*protocol.EventBound(limit))
	for _, tc := range capCases {
		t.Run(tc.name, func(t *testing.T) {
			stream := slices.Concat(tc.head(t), tc.delta(t, "kept"), tc.delta(t, huge), tc.delta(t, "after"), tc.tail(t, "kept"+huge+"after"))
			for _, size := range []int{len(stream), 4093} {
				dec := tc.parse(t).Decoder()
				dec.Limit(limit)
				for i := 0; i < len(stream); i += size {
					_, _ = dec.Write(stream[i:min(i+size, len(stream))])
				}
				if !dec.Finished() || dec.Usage() != (protocol.Usage{InputTokens: 5, OutputTokens: 7}) {
					t.Fatalf("size %d: finished %v, usage %+v", size, dec.Finished(), dec.Usage())
				}
				if got := tc.field(dec.Message()); got != "kept" || dec.Truncated() < int64(len(huge)) {
					t.Fatalf("size %d: kept %q, truncated %d (want ≥ %d)", size, got, dec.Truncated(), len(huge))
				}
				if tc.id != "" {
					if got := dec.(protocol.Identified).ResponseID(); got != tc.id {
						t.Fatalf("size %d: response id %q", size, got)
					}
				}
			}
		})
	}
}

// TestAnswerCapWhole: an answer within the limit is whole and not marked.
func TestAnswerCapWhole(t *testing.T) {
	piece := "hello"
	for _, tc := range capCases {
		t.Run(tc.name, func(t *testing.T) {
			stream := append(append(tc.head(t), tc.delta(t, piece)...), tc.tail(t, piece)...)
			dec := tc.parse(t).Decoder()
			dec.Limit(64 << 10)
			_, _ = dec.Write(stream)
			if !dec.Finished() || tc.field(dec.Message()) != piece || dec.Truncated() != 0 {
				t.Fatalf("finished %v, field %q, truncated %d", dec.Finished(), tc.field(dec.Message()), dec.Truncated())
			}
		})
	}
}

// TestAnswerCapJSON: a non-streamed answer is cut to the limit alike.
func TestAnswerCapJSON(t *testing.T) {
	const limit = 1 << 10
	text := strings.Repeat("z", 64<<10)
	tests := []struct {
		name  string
		req   func(t *testing.T) protocol.Request
		body  string
		usage protocol.Usage
	}{
		{"openai", parsed(openai.Parse, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`), `{"choices":[{"index":0,"message":{"role":"assistant","content":"` + text + `"}}],"usage":{"prompt_tokens":5,"completion_tokens":7}}`, protocol.Usage{InputTokens: 5, OutputTokens: 7}},
		{"anthropic", parsed(anthropic.Parse, `{"model":"c","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`), `{"type":"message","role":"assistant","content":[{"type":"text","text":"` + text + `"}],"usage":{"input_tokens":5,"output_tokens":7}}`, protocol.Usage{InputTokens: 5, OutputTokens: 7}},
		{"responses", parsed(responses.Parse, `{"model":"m","input":"hi"}`), `{"id":"resp_1","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"` + text + `"}]}],"usage":{"input_tokens":5,"output_tokens":7}}`, protocol.Usage{InputTokens: 5, OutputTokens: 7}},
		{"bedrock converse", bedrockReq(bedrock.Converse, "anthropic.claude-3", `{"messages":[{"role":"user","content":[{"text":"hi"}]}]}`),
			`{"output":{"message":{"role":"assistant","content":[{"text":"` + text + `"}]}},"usage":{"inputTokens":5,"outputTokens":7}}`, protocol.Usage{InputTokens: 5, OutputTokens: 7}},
		{"bedrock llama", bedrockReq(bedrock.Invoke, "meta.llama3-8b-instruct-v1:0", `{"prompt":"hi"}`),
			`{"generation":"` + text + `","prompt_token_count":5,"generation_token_count":7,"stop_reason":"stop"}`, protocol.Usage{InputTokens: 5, OutputTokens: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec := tt.req(t).Decoder()
			dec.Limit(limit)
			_, _ = dec.Write([]byte(tt.body))
			m := dec.Message()
			if !dec.Finished() || dec.Usage() != tt.usage {
				t.Fatalf("finished %v, usage %+v", dec.Finished(), dec.Usage())
			}
			if len(m.Content) != limit || dec.Truncated() != int64(len(text)-limit) {
				t.Fatalf("content %d bytes, truncated %d", len(m.Content), dec.Truncated())
			}
		})
	}
}
