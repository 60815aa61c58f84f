package bedrock

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/camproxy/camproxy/protocol"
)

// claudeBody is an InvokeModel body of Claude on Bedrock.
const claudeBody = `{"anthropic_version":"bedrock-2023-05-31","max_tokens":1024,"system":"You are an airline agent.","messages":[{"role":"user","content":"Hello.\nTask: cancel booking 7"},{"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"get","input":{"id": 7}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]}]}`

func TestClaudeInvoke(t *testing.T) {
	body := []byte(claudeBody)
	const arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-haiku-20240307-v1:0"
	r, err := Parse(InvokeStream, arn, body, testRules)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.(*ClaudeRequest); !ok {
		t.Fatalf("request is a %T", r)
	}
	v := r.Parsed()
	if v.Model != arn || !v.Stream || v.Task != "cancel booking 7" {
		t.Fatalf("view = %#v", v)
	}
	if len(v.Messages) < 3 || !reflect.DeepEqual(v.Messages[0], protocol.Message{Role: "system", Content: "You are an airline agent."}) ||
		v.Messages[1].Content != "Hello.\nTask: cancel booking 7" {
		t.Fatalf("messages = %#v", v.Messages)
	}
	want := map[protocol.Placement]string{
		protocol.AppendToTask: `"content":"Hello.\nTask: cancel booking 7\n\nC"}`,
		protocol.System:       `"system":"You are an airline agent.\n\nC"`,
	}
	for p, w := range want {
		out := r.SpliceTo(nil, body, p, "\n\nC")
		checkInsertion(t, body, out)
		if !bytes.Contains(out, []byte(w)) {
			t.Errorf("%s: %s lacks %s", p, out, w)
		}
	}
	out := r.SpliceTo(nil, body, protocol.NewMessage, "\n\nC")
	checkInsertion(t, body, out)
	if _, err := Parse(Invoke, arn, out, testRules); err != nil {
		t.Fatalf("new message output does not parse: %v\n%s", err, out)
	}

	r, err = Parse(Invoke, "anthropic.claude-3-5-sonnet-20240620-v1:0", body, testRules)
	if err != nil || r.Parsed().Stream {
		t.Fatalf("invoke: %v %#v", err, r)
	}
}

func TestClaudeStreamDecoder(t *testing.T) {
	r, err := Parse(InvokeStream, "us.anthropic.claude-3-5-sonnet-20241022-v2:0", []byte(claudeBody), nil)
	if err != nil {
		t.Fatal(err)
	}
	var stream []byte
	for _, c := range claudeChunks {
		stream = append(stream, chunk(t, c)...)
	}
	want := protocol.Message{Role: "assistant", Content: "Hello there", ToolCalls: []protocol.ToolCall{{ID: "toolu_1", Type: "function", Name: "lookup", Arguments: `{"q":"x"}`}}}
	checkDecode(t, r.Decoder, stream, want, protocol.Usage{InputTokens: 25, OutputTokens: 15}, true)

	// A modelStreamErrorException before message_stop: not finished.
	last := bytes.LastIndex(stream, chunk(t, claudeChunks[len(claudeChunks)-1]))
	d := r.Decoder()
	d.Write(stream[:last])
	d.Write(exception(t, "modelStreamErrorException", "boom"))
	d.Write(stream[last:])
	if d.Finished() {
		t.Error("finished after an exception")
	}
	if got := d.Message(); !reflect.DeepEqual(got, want) {
		t.Errorf("message after exception = %#v", got)
	}
}

func TestClaudeJSONDecoder(t *testing.T) {
	r, err := Parse(Invoke, "anthropic.claude-3-haiku-20240307-v1:0", []byte(claudeBody), nil)
	if err != nil {
		t.Fatal(err)
	}
	answer := `{"id":"msg_bdrk_01","type":"message","role":"assistant","model":"claude-3-haiku-20240307","content":[{"type":"text","text":"Cancelled."},{"type":"tool_use","id":"toolu_2","name":"notify","input":{"to": "me"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":50,"output_tokens":9}}`
	want := protocol.Message{Role: "assistant", Content: "Cancelled.", ToolCalls: []protocol.ToolCall{{ID: "toolu_2", Type: "function", Name: "notify", Arguments: `{"to":"me"}`}}}
	checkDecode(t, r.Decoder, []byte(answer), want, protocol.Usage{InputTokens: 50, OutputTokens: 9}, true)
	d := r.Decoder()
	d.Write([]byte(`{"message":"Too many requests, please wait before trying again."}`))
	if d.Finished() {
		t.Error("an error body finished the answer")
	}
}
