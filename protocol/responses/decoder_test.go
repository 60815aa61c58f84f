package responses

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/sse"
)

// jsonAnswer is a non-streamed response: reasoning, a message and two calls.
const jsonAnswer = `{"id":"resp_abc","object":"response","status":"completed","output":[
 {"type":"reasoning","id":"rs_1","summary":[]},
 {"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Checking.","annotations":[]},{"type":"refusal","refusal":"no"}]},
 {"type":"function_call","id":"fc_1","call_id":"call_1","name":"lookup","arguments":"{\"q\":\"UA12\"}","status":"completed"},
 {"type":"function_call","id":"fc_2","call_id":"call_2","name":"seat","arguments":"{}","status":"completed"}],
 "usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":0},"output_tokens":17,"total_tokens":137}}`

var jsonAnswerMsg = protocol.Message{Role: "assistant", Content: "Checking.",
	Parts: []protocol.Part{{Type: "text", Text: "Checking."}, {Type: "refusal", Text: "no"}},
	ToolCalls: []protocol.ToolCall{
		{ID: "call_1", Type: "function", Name: "lookup", Arguments: `{"q":"UA12"}`},
		{ID: "call_2", Type: "function", Name: "seat", Arguments: `{}`}},
	Raw: []protocol.RawJSON{`{"type":"reasoning","id":"rs_1","summary":[]}`}}

// realisticStream is a streamed text answer as OpenAI sends it (abridged objects).
const realisticStream = `event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_s1","object":"response","status":"in_progress","output":[],"usage":null}}

event: response.in_progress
data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_s1","object":"response","status":"in_progress","output":[],"usage":null}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}

event: response.content_part.added
data: {"type":"response.content_part.added","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Done "}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":5,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"after 3 items."}

event: response.output_text.done
data: {"type":"response.output_text.done","sequence_number":6,"item_id":"msg_1","output_index":0,"content_index":0,"text":"Done after 3 items."}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":7,"output_index":0,"item":{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"text":"Done after 3 items."}]}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":8,"output_index":1,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_9","name":"lookup"}}

event: response.function_call_arguments.delta
data: {"type":"response.function_call_arguments.delta","sequence_number":9,"item_id":"fc_1","output_index":1,"delta":"{\"q\":"}

event: response.function_call_arguments.delta
data: {"type":"response.function_call_arguments.delta","sequence_number":10,"item_id":"fc_1","output_index":1,"delta":"\"UA12\"}"}

event: response.function_call_arguments.done
data: {"type":"response.function_call_arguments.done","sequence_number":11,"item_id":"fc_1","output_index":1,"arguments":"{\"q\":\"UA12\"}"}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":12,"output_index":1,"item":{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"q\":\"UA12\"}","call_id":"call_9","name":"lookup"}}

event: response.completed
data: {"type":"response.completed","sequence_number":13,"response":{"id":"resp_s1","object":"response","status":"completed","output":[{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"text":"Done after 3 items."}]},{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"q\":\"UA12\"}","call_id":"call_9","name":"lookup"}],"usage":{"input_tokens":42,"output_tokens":7,"total_tokens":49}}}

`

var streamMsg = protocol.Message{Role: "assistant", Content: "Done after 3 items.",
	ToolCalls: []protocol.ToolCall{{ID: "call_9", Type: "function", Name: "lookup", Arguments: `{"q":"UA12"}`}}}

func TestJSONDecoder(t *testing.T) {
	r, _ := Parse([]byte(`{"input":"x"}`), nil)
	for _, chunk := range []int{len(jsonAnswer), 1, 7} {
		d := r.Decoder()
		for i := 0; i < len(jsonAnswer); i += chunk {
			if d.Finished() {
				t.Fatalf("chunk %d: finished at %d of %d bytes", chunk, i, len(jsonAnswer))
			}
			_, _ = d.Write([]byte(jsonAnswer[i:min(i+chunk, len(jsonAnswer))]))
		}
		if !d.Finished() || !reflect.DeepEqual(d.Message(), jsonAnswerMsg) || d.Usage() != (protocol.Usage{InputTokens: 120, OutputTokens: 17}) {
			t.Fatalf("chunk %d: %v %+v %+v", chunk, d.Finished(), d.Message(), d.Usage())
		}
		if id := d.(protocol.Identified).ResponseID(); id != "resp_abc" {
			t.Fatalf("id %q", id)
		}
	}
	// An error body is no answer.
	d := r.Decoder()
	_, _ = d.Write([]byte(`{"error":{"message":"bad","type":"invalid_request_error"}}`))
	if d.Finished() || d.Message().Role != "assistant" {
		t.Fatalf("error body decoded: %+v", d.Message())
	}
}

func TestStreamDecoder(t *testing.T) {
	r, _ := Parse([]byte(`{"input":"x","stream":true}`), nil)
	tests := []struct {
		name     string
		stream   string
		finished bool
		msg      protocol.Message
		usage    protocol.Usage
	}{
		{"whole", realisticStream, true, streamMsg, protocol.Usage{InputTokens: 42, OutputTokens: 7}},
		{"crlf", strings.ReplaceAll(realisticStream, "\n", "\r\n"), true, streamMsg, protocol.Usage{InputTokens: 42, OutputTokens: 7}},
		{"no event lines", dropEventLines(realisticStream), true, streamMsg, protocol.Usage{InputTokens: 42, OutputTokens: 7}},
		// Cut before response.completed: the answer is what the events built.
		{"cut after the arguments", realisticStream[:strings.Index(realisticStream, "event: response.function_call_arguments.done")], false,
			streamMsg, protocol.Usage{}},
		{"cut mid-text", realisticStream[:strings.Index(realisticStream, "event: response.output_text.done")], false,
			protocol.Message{Role: "assistant", Content: "Done after 3 items."}, protocol.Usage{}},
		{"failed", `event: response.created
data: {"type":"response.created","response":{"id":"resp_f","output":[]}}

event: response.failed
data: {"type":"response.failed","response":{"id":"resp_f","status":"failed","error":{"code":"server_error","message":"x"},"output":[],"usage":null}}

`, true, protocol.Message{Role: "assistant"}, protocol.Usage{}},
		// The Realtime API's name for the final event, which some backends send.
		{"done", `event: response.output_text.delta
data: {"type":"response.output_text.delta","output_index":0,"delta":"partial"}

event: response.done
data: {"type":"response.done","response":{"id":"resp_d","status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"whole"}]}],"usage":{"input_tokens":3,"output_tokens":2}}}

`, true, protocol.Message{Role: "assistant", Content: "whole"}, protocol.Usage{InputTokens: 3, OutputTokens: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, size := range []int{len(tt.stream), 1, 13} {
				d := r.Decoder()
				for i := 0; i < len(tt.stream); i += size {
					_, _ = d.Write([]byte(tt.stream[i:min(i+size, len(tt.stream))]))
				}
				if d.Finished() != tt.finished || !reflect.DeepEqual(d.Message(), tt.msg) || d.Usage() != tt.usage {
					t.Fatalf("size %d: finished %v\n got %+v %+v\nwant %+v %+v", size, d.Finished(), d.Message(), d.Usage(), tt.msg, tt.usage)
				}
				if id := d.(protocol.Identified).ResponseID(); id == "" || !strings.HasPrefix(id, "resp_") {
					t.Fatalf("size %d: id %q", size, id)
				}
			}
		})
	}
}

// TestAnswerStitchesWithEcho: an answer and the same items sent back as input (as
// SDKs do, with reasoning items and status fields) normalise to the same message.
func TestAnswerStitchesWithEcho(t *testing.T) {
	_, msg, _, ok := DecodeResponse([]byte(jsonAnswer))
	if !ok {
		t.Fatal("not decoded")
	}
	body := `{"input":[{"role":"user","content":[{"type":"input_text","text":"task"}]},` +
		`{"type":"reasoning","id":"rs_1","summary":[]},` +
		`{"role":"assistant","content":"Checking."},` +
		`{"type":"function_call","call_id":"call_1","name":"lookup","arguments":"{\"q\":\"UA12\"}"},` +
		`{"type":"function_call","call_id":"call_2","name":"seat","arguments":"{}"},` +
		`{"type":"function_call_output","call_id":"call_1","output":"x"}]}`
	r, err := Parse([]byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The SDK sent the text back without the refusal part: parts are not hashed.
	msg.Parts = nil
	if len(r.Messages) != 3 || !reflect.DeepEqual(r.Messages[1], msg) {
		t.Fatalf("echo %+v\nanswer %+v", r.Messages, msg)
	}
}

func dropEventLines(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "event:") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// longStream is a text answer streamed as OpenAI streams it, each event whole and its
// fields in OpenAI's order: response.created and the final event echo the
// instructions; with deltas, the text comes in 4 KiB deltas, then its done events and
// the final event repeat it whole; without, only the final event has it.
func longStream(instructions, text string, deltas bool) string {
	q := func(s string) string {
		b, _ := json.Marshal(s)
		return string(b)
	}
	var b strings.Builder
	seq := 0
	ev := func(typ, fields string) {
		fmt.Fprintf(&b, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", typ, typ, seq, fields)
		seq++
	}
	item := `{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"text":` + q(text) + `}]}`
	ev("response.created", `"response":{"id":"resp_big","object":"response","status":"in_progress","instructions":`+q(instructions)+`,"output":[],"usage":null}`)
	if deltas {
		ev("response.output_item.added", `"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}`)
		for rest := text; rest != ""; {
			n := min(4<<10, len(rest))
			ev("response.output_text.delta", `"item_id":"msg_1","output_index":0,"content_index":0,"delta":`+q(rest[:n]))
			rest = rest[n:]
		}
		ev("response.output_text.done", `"item_id":"msg_1","output_index":0,"content_index":0,"text":`+q(text))
		ev("response.output_item.done", `"output_index":0,"item":`+item)
	}
	ev("response.completed", `"response":{"id":"resp_big","object":"response","status":"completed","instructions":`+q(instructions)+
		`,"output":[`+item+`],"usage":{"input_tokens":42,"output_tokens":7,"total_tokens":49},"user":null,"metadata":{"k":"v"}}`)
	return b.String()
}

// TestStreamDecoderOversizedEvents: events longer than the framer holds for the limit
// (protocol.EventBound) are read from their head and tail. The final event still ends
// the answer with the response's id and usage, and the answer is what the deltas
// built: whole when they fit the limit, though every event that repeats it whole was
// too long to read (text of control characters, 6 bytes each as JSON); cut, when only
// the final event held it.
func TestStreamDecoderOversizedEvents(t *testing.T) {
	r, _ := Parse([]byte(`{"input":"x","stream":true}`), nil)
	instructions := strings.Repeat("Follow the repository's rules. ", 20000) // 600 KiB: response.created is cut too
	tests := []struct {
		name      string
		limit     int
		stream    string
		cuts      int // events too long to read
		msg       protocol.Message
		truncated func(int64) bool
	}{
		{"the deltas fit", 128 << 10, longStream(instructions, strings.Repeat("\x01", 120<<10), true), 4,
			protocol.Message{Role: "assistant", Content: strings.Repeat("\x01", 120<<10)}, func(n int64) bool { return n == 0 }},
		{"only the final event has the text", 64 << 10, longStream("", strings.Repeat("z", 500<<10), false), 1,
			protocol.Message{Role: "assistant"}, func(n int64) bool { return n >= 500<<10 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, size := range []int{len(tt.stream), 4093} {
				d := r.Decoder().(*StreamDecoder)
				d.Limit(tt.limit)
				cuts := 0
				d.sse.Event = d.onEvent
				d.sse.Oversized = func(name []byte, c sse.Cut) {
					cuts++
					d.onCut(name, c)
				}
				for i := 0; i < len(tt.stream); i += size {
					_, _ = d.Write([]byte(tt.stream[i:min(i+size, len(tt.stream))]))
				}
				if cuts != tt.cuts {
					t.Fatalf("size %d: %d events cut, want %d", size, cuts, tt.cuts)
				}
				if !d.Finished() || d.ResponseID() != "resp_big" || d.Usage() != (protocol.Usage{InputTokens: 42, OutputTokens: 7}) {
					t.Fatalf("size %d: finished %v, id %q, usage %+v", size, d.Finished(), d.ResponseID(), d.Usage())
				}
				if m := d.Message(); !reflect.DeepEqual(m, tt.msg) || !tt.truncated(d.Truncated()) {
					t.Fatalf("size %d: message of %d bytes (want %d), truncated %d", size, len(m.Content), len(tt.msg.Content), d.Truncated())
				}
			}
		})
	}
}
