package bedrock

import (
	"reflect"
	"regexp"
	"testing"

	"github.com/camproxy/camproxy/protocol"
)

// converseBody has every block kind: system texts and a cache point, a user text
// and image, an assistant text and toolUse, a user toolResult (text and json) with
// a text after it, a document.
const converseBody = `{
  "system": [{"text": "You are an airline agent."}, {"text": "Be terse."}, {"cachePoint": {"type": "default"}}],
  "messages": [
    {"role": "user", "content": [{"text": "Hi.\nTask: change my flight \u00e9"}, {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}}]},
    {"role": "assistant", "content": [{"text": "Let me look."}, {"toolUse": {"toolUseId": "tu_1", "name": "get_reservation", "input": {"id": "ABC", "opts": [1, 2]}}}]},
    {"role": "user", "content": [
      {"toolResult": {"toolUseId": "tu_1", "content": [{"text": "found"}, {"json": {"seat": "12A", "ok": true}}], "status": "success"}},
      {"toolResult": {"toolUseId": "tu_2", "content": [{"image": {}}], "status": "error"}},
      {"text": "Thanks"}
    ]},
    {"role": "assistant", "content": [{"reasoningContent": {"reasoningText": {"text": "hmm"}}}, {"text": "Done."}, {"text": "Bye."}]},
    {"role": "user", "content": [{"document": {"format": "txt", "name": "d", "source": {"bytes": "aGk="}}}]}
  ],
  "inferenceConfig": {"maxTokens": 512, "temperature": 0},
  "toolConfig": {"tools": [{"toolSpec": {"name": "get_reservation", "inputSchema": {"json": {"type": "object"}}}}]}
}`

func TestConverseNormalise(t *testing.T) {
	r, err := Parse(ConverseStream, "us.anthropic.claude-3-5-sonnet-20241022-v2:0", []byte(converseBody), testRules)
	if err != nil {
		t.Fatal(err)
	}
	v := r.Parsed()
	want := []protocol.Message{
		{Role: "system", Content: "You are an airline agent.\nBe terse."},
		{Role: "user", Content: "Hi.\nTask: change my flight é", Parts: []protocol.Part{
			{Type: "text", Text: "Hi.\nTask: change my flight é"},
			{Type: "image_url", Media: &protocol.Media{MediaType: "image/png", Data: "iVBORw0KGgo="}}}},
		{Role: "assistant", Content: "Let me look.", ToolCalls: []protocol.ToolCall{{ID: "tu_1", Type: "function", Name: "get_reservation", Arguments: `{"id":"ABC","opts":[1,2]}`}}},
		{Role: "tool", ToolCallID: "tu_1", Content: "found\n{\"seat\":\"12A\",\"ok\":true}"},
		{Role: "tool", ToolCallID: "tu_2", Parts: []protocol.Part{{Type: "image", Raw: `{"image": {}}`}}},
		{Role: "user", Content: "Thanks"},
		{Role: "assistant", Content: "Done.\nBye.", Raw: []protocol.RawJSON{`{"reasoningContent": {"reasoningText": {"text": "hmm"}}}`}},
		{Role: "user", Parts: []protocol.Part{{Type: "file", Media: &protocol.Media{MediaType: "text/plain", Filename: "d", Data: "aGk="}}}},
	}
	if !reflect.DeepEqual(v.Messages, want) {
		t.Errorf("messages:\n got %#v\nwant %#v", v.Messages, want)
	}
	if v.Model != "us.anthropic.claude-3-5-sonnet-20241022-v2:0" || !v.Stream || v.Task != "change my flight é" {
		t.Errorf("view = %q %v %q", v.Model, v.Stream, v.Task)
	}
}

func TestConverseToolResultOnly(t *testing.T) {
	body := `{"messages":[{"role":"user","content":[{"text":"go"}]},{"role":"assistant","content":[{"toolUse":{"toolUseId":"a","name":"f","input":{}}}]},{"role":"user","content":[{"toolResult":{"toolUseId":"a","content":[{"json":[1, 2]}]}}]}]}`
	r, err := Parse(Converse, "m", []byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []protocol.Message{
		{Role: "user", Content: "go"},
		{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: "a", Type: "function", Name: "f", Arguments: "{}"}}},
		{Role: "tool", ToolCallID: "a", Content: "[1,2]"},
	}
	if v := r.Parsed(); !reflect.DeepEqual(v.Messages, want) || v.Task != "" || v.Stream {
		t.Errorf("view = %#v", v)
	}
}

func TestConverseSplice(t *testing.T) {
	const ctx = "\n\nContext: \"x\""
	tests := []struct {
		name  string
		body  string
		rules []protocol.TaskRule
		p     protocol.Placement
		want  string
		task  string
	}{
		{
			name: "append regex in user text",
			body: `{"messages":[{"role":"user","content":[{"text":"Hi\nTask: fly\u00e9"},{"text":"more"}]}]}`,
			p:    protocol.AppendToTask, task: "flyé",
			want: `{"messages":[{"role":"user","content":[{"text":"Hi\nTask: fly\u00e9\n\nContext: \"x\""},{"text":"more"}]}]}`,
		},
		{
			name:  "append first user: after its last text",
			body:  `{"messages":[{"role":"user","content":[{"image":{}}]},{"role":"assistant","content":[{"text":"?"}]},{"role":"user","content":[{"text":"a"},{"image":{}},{"text":"b"}]}]}`,
			rules: protocol.DefaultTaskRules(),
			p:     protocol.AppendToTask, task: "a\nb",
			want: `{"messages":[{"role":"user","content":[{"image":{}}]},{"role":"assistant","content":[{"text":"?"}]},{"role":"user","content":[{"text":"a"},{"image":{}},{"text":"b\n\nContext: \"x\""}]}]}`,
		},
		{
			name: "append regex in system",
			body: `{"system":[{"text":"Policy.\nTask: rebook"}],"messages":[{"role":"user","content":[{"text":"hi"}]}]}`,
			p:    protocol.AppendToTask, task: "rebook",
			want: `{"system":[{"text":"Policy.\nTask: rebook\n\nContext: \"x\""}],"messages":[{"role":"user","content":[{"text":"hi"}]}]}`,
		},
		{
			name: "system appended as a block",
			body: `{"system":[{"text":"S"},{"cachePoint":{"type":"default"}}],"messages":[]}`,
			p:    protocol.System,
			want: `{"system":[{"text":"S"},{"cachePoint":{"type":"default"}},{"text":"Context: \"x\""}],"messages":[]}`,
		},
		{
			name: "system into an empty array",
			body: `{"system": [ ],"messages":[]}`,
			p:    protocol.System,
			want: `{"system": [ {"text":"Context: \"x\""}],"messages":[]}`,
		},
		{
			name: "system added at the front",
			body: ` {"messages":[{"role":"user","content":[{"text":"hi"}]}]}`,
			p:    protocol.System, task: "hi",
			want: ` {"system":[{"text":"Context: \"x\""}],"messages":[{"role":"user","content":[{"text":"hi"}]}]}`,
		},
		{
			name: "system null: unchanged",
			body: `{"system":null,"messages":[]}`,
			p:    protocol.System,
			want: `{"system":null,"messages":[]}`,
		},
		{
			name: "new message: a block at the end of the task message",
			body: `{"messages":[{"role":"user","content":[{"toolResult":{"toolUseId":"a","content":[]}},{"text":"do it"},{"cachePoint":{"type":"default"}}]},{"role":"assistant","content":[{"text":"ok"}]}]}`,
			p:    protocol.NewMessage, task: "do it",
			want: `{"messages":[{"role":"user","content":[{"toolResult":{"toolUseId":"a","content":[]}},{"text":"do it"},{"cachePoint":{"type":"default"}},{"text":"Context: \"x\""}]},{"role":"assistant","content":[{"text":"ok"}]}]}`,
		},
		{
			name: "new message, task in system: a block in front of the first user message",
			body: `{"system":[{"text":"\nTask: t"}],"messages":[{"role":"user","content":[{"text":"hi"}]}]}`,
			p:    protocol.NewMessage, task: "t",
			want: `{"system":[{"text":"\nTask: t"}],"messages":[{"role":"user","content":[{"text":"Context: \"x\""},{"text":"hi"}]}]}`,
		},
		{
			name: "new message, task in system, no messages",
			body: `{"system":[{"text":"\nTask: t"}],"messages":[]}`,
			p:    protocol.NewMessage, task: "t",
			want: `{"system":[{"text":"\nTask: t"}],"messages":[{"role":"user","content":[{"text":"Context: \"x\""}]}]}`,
		},
		{
			name: "new message, task in system, first message not a user's",
			body: `{"system":[{"text":"\nTask: t"}],"messages":[{"role":"assistant","content":[]}]}`,
			p:    protocol.NewMessage, task: "t",
			want: `{"system":[{"text":"\nTask: t"}],"messages":[{"role":"user","content":[{"text":"Context: \"x\""}]},{"role":"assistant","content":[]}]}`,
		},
		{
			name: "no task: append unchanged",
			body: `{"messages":[{"role":"user","content":[{"image":{}}]}]}`,
			p:    protocol.AppendToTask,
			want: `{"messages":[{"role":"user","content":[{"image":{}}]}]}`,
		},
		{
			name: "no task: new message unchanged",
			body: `{"messages":[{"role":"assistant","content":[{"text":"x"}]}]}`,
			p:    protocol.NewMessage,
			want: `{"messages":[{"role":"assistant","content":[{"text":"x"}]}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules := tt.rules
			if rules == nil {
				rules = testRules
			}
			body := []byte(tt.body)
			r, err := Parse(Converse, "m", body, rules)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Parsed().Task; got != tt.task {
				t.Errorf("task = %q, want %q", got, tt.task)
			}
			out := r.SpliceTo(nil, body, tt.p, ctx)
			if string(out) != tt.want {
				t.Fatalf("splice:\n got %s\nwant %s", out, tt.want)
			}
			if string(body) != tt.body {
				t.Fatal("body modified")
			}
			if tt.want != tt.body {
				checkInsertion(t, body, out)
				if _, err := Parse(Converse, "m", out, rules); err != nil {
					t.Fatalf("output does not parse: %v", err)
				}
			}
		})
	}
}

func TestConverseSpliceGuards(t *testing.T) {
	body := []byte(`{"messages":[{"role":"user","content":[{"text":"hi"}]}]}`)
	r, err := Parse(Converse, "m", body, protocol.DefaultTaskRules())
	if err != nil {
		t.Fatal(err)
	}
	if out := r.SpliceTo(nil, append(body, ' '), protocol.AppendToTask, "x"); string(out) != string(body)+" " {
		t.Error("a different body was spliced")
	}
	for _, text := range []string{"", " \n "} {
		if out := r.SpliceTo(nil, body, protocol.System, text); string(out) != string(body) {
			t.Errorf("blank %q spliced: %s", text, out)
		}
	}
	if out := r.SpliceTo(nil, body, "elsewhere", "x"); string(out) != string(body) {
		t.Error("unknown placement spliced")
	}
	// The view of the spliced body has the task followed by the text.
	out := r.SpliceTo(nil, body, protocol.AppendToTask, "\n\nctx")
	r2, err := Parse(Converse, "m", out, protocol.DefaultTaskRules())
	if err != nil || r2.Parsed().Task != "hi\n\nctx" {
		t.Fatalf("re-parse: %v %q", err, r2.Parsed().Task)
	}
}

// novaBody is an InvokeModel body of Amazon Nova (messages-v1).
const novaBody = `{"schemaVersion":"messages-v1","system":[{"text":"Be brief."}],"messages":[{"role":"user","content":[{"text":"Summarise: the cat sat."}]},{"role":"assistant","content":[{"text":"A cat sat."}]},{"role":"user","content":[{"text":"Shorter."}]}],"inferenceConfig":{"maxTokens":300,"topP":0.1}}`

func TestNova(t *testing.T) {
	body := []byte(novaBody)
	r, err := Parse(InvokeStream, "us.amazon.nova-lite-v1:0", body, []protocol.TaskRule{{Regex: regexp.MustCompile(`Summarise: (.+)`)}})
	if err != nil {
		t.Fatal(err)
	}
	v := r.Parsed()
	want := []protocol.Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "Summarise: the cat sat."},
		{Role: "assistant", Content: "A cat sat."},
		{Role: "user", Content: "Shorter."},
	}
	if !reflect.DeepEqual(v.Messages, want) || v.Task != "the cat sat." || !v.Stream || v.Model != "us.amazon.nova-lite-v1:0" {
		t.Fatalf("view = %#v", v)
	}
	for p, w := range map[protocol.Placement]string{
		protocol.AppendToTask: `{"schemaVersion":"messages-v1","system":[{"text":"Be brief."}],"messages":[{"role":"user","content":[{"text":"Summarise: the cat sat.\n\nC"}]},{"role":"assistant","content":[{"text":"A cat sat."}]},{"role":"user","content":[{"text":"Shorter."}]}],"inferenceConfig":{"maxTokens":300,"topP":0.1}}`,
		protocol.System:       `{"schemaVersion":"messages-v1","system":[{"text":"Be brief."},{"text":"C"}],"messages":[{"role":"user","content":[{"text":"Summarise: the cat sat."}]},{"role":"assistant","content":[{"text":"A cat sat."}]},{"role":"user","content":[{"text":"Shorter."}]}],"inferenceConfig":{"maxTokens":300,"topP":0.1}}`,
		protocol.NewMessage:   `{"schemaVersion":"messages-v1","system":[{"text":"Be brief."}],"messages":[{"role":"user","content":[{"text":"Summarise: the cat sat."},{"text":"C"}]},{"role":"assistant","content":[{"text":"A cat sat."}]},{"role":"user","content":[{"text":"Shorter."}]}],"inferenceConfig":{"maxTokens":300,"topP":0.1}}`,
	} {
		if out := r.SpliceTo(nil, body, p, "\n\nC"); string(out) != w {
			t.Errorf("%s:\n got %s\nwant %s", p, out, w)
		}
	}
}
