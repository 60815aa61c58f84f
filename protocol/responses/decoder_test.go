package responses

import (
	"reflect"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
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
