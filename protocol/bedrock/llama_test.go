package bedrock

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
)

// llamaPrompt is a Llama 3 chat prompt: system, user, assistant, tool output, user,
// then the cue for the answer.
const llamaPrompt = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>" +
	"<|start_header_id|>user<|end_header_id|>\n\nPlan a trip.\nTask: visit Rome\n<|eot_id|>" +
	"<|start_header_id|>assistant<|end_header_id|>\n\nLooking up.<|eot_id|>" +
	"<|start_header_id|>ipython<|end_header_id|>\n\n{\"ok\":true}<|eot_id|>" +
	"<|start_header_id|>user<|end_header_id|>\n\nThanks<|eot_id|>" +
	"<|start_header_id|>assistant<|end_header_id|>\n\n"

// llamaBody marshals a Llama body; html says whether < and > are escaped as
// encoding/json does by default.
func llamaBody(t *testing.T, prompt string, html bool) []byte {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	if err := enc.Encode(map[string]any{"prompt": prompt, "max_gen_len": 512, "temperature": 0.5}); err != nil {
		t.Fatal(err)
	}
	return []byte(strings.TrimSpace(b.String()))
}

// promptOf returns the prompt of a Llama body.
func promptOf(t *testing.T, body []byte) string {
	t.Helper()
	var v struct{ Prompt string }
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return v.Prompt
}

func TestLlamaTemplate(t *testing.T) {
	for _, html := range []bool{false, true} {
		body := llamaBody(t, llamaPrompt, html)
		r, err := Parse(Invoke, "meta.llama3-1-70b-instruct-v1:0", body, testRules)
		if err != nil {
			t.Fatal(err)
		}
		v := r.Parsed()
		want := []protocol.Message{
			{Role: "system", Content: "You are helpful."},
			{Role: "user", Content: "Plan a trip.\nTask: visit Rome"},
			{Role: "assistant", Content: "Looking up."},
			{Role: "tool", Content: `{"ok":true}`},
			{Role: "user", Content: "Thanks"},
		}
		if !reflect.DeepEqual(v.Messages, want) || v.Task != "visit Rome" || v.Stream || v.Model != "meta.llama3-1-70b-instruct-v1:0" {
			t.Fatalf("view = %#v", v)
		}
		const ctx = "\n\nContext: <b>"
		tests := map[protocol.Placement]string{
			protocol.AppendToTask: strings.Replace(llamaPrompt, "visit Rome\n", "visit Rome"+ctx+"\n", 1),
			protocol.System:       strings.Replace(llamaPrompt, "You are helpful.", "You are helpful."+ctx, 1),
			protocol.NewMessage: strings.Replace(llamaPrompt, "visit Rome\n<|eot_id|>",
				"visit Rome\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nContext: <b><|eot_id|>", 1),
		}
		for p, want := range tests {
			out := r.SpliceTo(nil, body, p, ctx)
			checkInsertion(t, body, out)
			if got := promptOf(t, out); got != want {
				t.Errorf("html %v %s:\n got %q\nwant %q", html, p, got, want)
			}
		}
	}
}

func TestLlamaFirstUserAndNoSystem(t *testing.T) {
	prompt := "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n  Write a haiku. <|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	body := llamaBody(t, prompt, false)
	r, err := Parse(InvokeStream, "us.meta.llama3-2-3b-instruct-v1:0", body, protocol.DefaultTaskRules())
	if err != nil {
		t.Fatal(err)
	}
	if v := r.Parsed(); v.Task != "Write a haiku." || !v.Stream || len(v.Messages) != 1 {
		t.Fatalf("view = %#v", v)
	}
	tests := map[protocol.Placement]string{
		protocol.AppendToTask: strings.Replace(prompt, "haiku.", "haiku.\n\nC", 1),
		protocol.System:       strings.Replace(prompt, "<|begin_of_text|>", "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nC<|eot_id|>", 1),
		protocol.NewMessage:   strings.Replace(prompt, "<|eot_id|>", "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nC<|eot_id|>", 1),
	}
	for p, want := range tests {
		out := r.SpliceTo(nil, body, p, "\n\nC")
		checkInsertion(t, body, out)
		if got := promptOf(t, out); got != want {
			t.Errorf("%s:\n got %q\nwant %q", p, got, want)
		}
	}
}

func TestLlama4Template(t *testing.T) {
	prompt := "<|begin_of_text|><|header_start|>system<|header_end|>\n\n<|eot|><|header_start|>user<|header_end|>\n\nFix the bug<|eot|><|header_start|>assistant<|header_end|>\n\n"
	body := llamaBody(t, prompt, false)
	r, err := Parse(Invoke, "us.meta.llama4-scout-17b-instruct-v1:0", body, protocol.DefaultTaskRules())
	if err != nil {
		t.Fatal(err)
	}
	want := []protocol.Message{{Role: "system"}, {Role: "user", Content: "Fix the bug"}}
	if v := r.Parsed(); v.Task != "Fix the bug" || !reflect.DeepEqual(v.Messages, want) {
		t.Fatalf("view = %#v", v)
	}
	tests := map[protocol.Placement]string{
		protocol.System:     strings.Replace(prompt, "system<|header_end|>\n\n", "system<|header_end|>\n\nC", 1),
		protocol.NewMessage: strings.Replace(prompt, "bug<|eot|>", "bug<|eot|><|header_start|>user<|header_end|>\n\nC<|eot|>", 1),
	}
	for p, want := range tests {
		if got := promptOf(t, r.SpliceTo(nil, body, p, "\n\nC")); got != want {
			t.Errorf("%s:\n got %q\nwant %q", p, got, want)
		}
	}
}

func TestLlamaPlain(t *testing.T) {
	tests := []struct {
		prompt string
		task   string
		want   map[protocol.Placement]string
	}{
		{
			prompt: "Translate to French: good morning",
			task:   "Translate to French: good morning",
			want: map[protocol.Placement]string{
				protocol.AppendToTask: "Translate to French: good morning\n\nC",
				protocol.System:       "C\n\nTranslate to French: good morning",
				protocol.NewMessage:   "Translate to French: good morning\n\nC",
			},
		},
		{
			prompt: "<s>[INST] Name a colour. [/INST] ",
			task:   "<s>[INST] Name a colour. [/INST] ",
			want: map[protocol.Placement]string{
				protocol.AppendToTask: "<s>[INST] Name a colour. [/INST] \n\nC",
				protocol.System:       "C\n\n<s>[INST] Name a colour. [/INST] ",
				protocol.NewMessage:   "<s>[INST] Name a colour. \n\nC[/INST] ",
			},
		},
		{
			// A header that never ends is no template.
			prompt: "<|start_header_id|>user",
			task:   "<|start_header_id|>user",
			want: map[protocol.Placement]string{
				protocol.System: "C\n\n<|start_header_id|>user",
			},
		},
	}
	for _, tt := range tests {
		body := llamaBody(t, tt.prompt, true)
		r, err := Parse(Invoke, "meta.llama2-13b-chat-v1", body, protocol.DefaultTaskRules())
		if err != nil {
			t.Fatal(err)
		}
		v := r.Parsed()
		if v.Task != tt.task || !reflect.DeepEqual(v.Messages, []protocol.Message{{Role: "user", Content: tt.prompt}}) {
			t.Fatalf("view = %#v", v)
		}
		for p, want := range tt.want {
			out := r.SpliceTo(nil, body, p, "\n\nC")
			checkInsertion(t, body, out)
			if got := promptOf(t, out); got != want {
				t.Errorf("%q %s:\n got %q\nwant %q", tt.prompt, p, got, want)
			}
		}
	}
}

func TestLlamaNoTask(t *testing.T) {
	body := llamaBody(t, "", false)
	r, err := Parse(Invoke, "meta.llama3-8b-instruct-v1:0", body, protocol.DefaultTaskRules())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []protocol.Placement{protocol.AppendToTask, protocol.NewMessage} {
		if out := r.SpliceTo(nil, body, p, "x"); string(out) != string(body) {
			t.Errorf("%s spliced without a task: %s", p, out)
		}
	}
	// A task block left open (no end of turn) takes no new message.
	body = llamaBody(t, "<|start_header_id|>user<|end_header_id|>\n\nhi", false)
	r, err = Parse(Invoke, "meta.llama3-8b-instruct-v1:0", body, protocol.DefaultTaskRules())
	if err != nil || r.Parsed().Task != "hi" {
		t.Fatalf("%v %#v", err, r)
	}
	if out := r.SpliceTo(nil, body, protocol.NewMessage, "x"); string(out) != string(body) {
		t.Errorf("new message after an open block: %s", out)
	}
}
