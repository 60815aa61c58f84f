package bedrock

import (
	"bytes"
	"errors"
	"regexp"
	"testing"

	"github.com/camproxy/camproxy/protocol"
)

func TestParsePath(t *testing.T) {
	const arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-haiku-20240307-v1:0"
	tests := []struct {
		raw   string
		model string
		op    Op
		bad   bool
	}{
		{raw: "/model/us.anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse", model: "us.anthropic.claude-3-5-sonnet-20241022-v2:0", op: Converse},
		{raw: "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-3-haiku-20240307-v1%3A0/invoke", model: arn, op: Invoke},
		{raw: "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream", model: arn, op: InvokeStream},
		{raw: "/model/amazon.nova-pro-v1:0/converse-stream", model: "amazon.nova-pro-v1:0", op: ConverseStream},
		{raw: "/model/meta.llama3-1-8b-instruct-v1%3A0/invoke?x=1", model: "meta.llama3-1-8b-instruct-v1:0", op: Invoke},
		// An ARN the client did not escape still routes: the op is the last segment.
		{raw: "/model/" + arn + "/converse", model: arn, op: Converse},
		{raw: "/model/abc%zz/converse", bad: true},
		{raw: "/model/abc%2/invoke", bad: true},
		{raw: "/model/abc%/invoke", bad: true},
		{raw: "/model/x/generate", bad: true},
		{raw: "/model/x/Converse", bad: true},
		{raw: "/model/x/converse/", bad: true},
		{raw: "/model//converse", bad: true},
		{raw: "/model/converse", bad: true},
		{raw: "/model/", bad: true},
		{raw: "/v1/chat/completions", bad: true},
		{raw: "", bad: true},
		{raw: "model/x/converse", bad: true},
	}
	for _, tt := range tests {
		model, op, err := ParsePath(tt.raw)
		if tt.bad {
			if !errors.Is(err, ErrBadPath) {
				t.Errorf("ParsePath(%q) = %q, %v, %v; want ErrBadPath", tt.raw, model, op, err)
			}
			continue
		}
		if err != nil || model != tt.model || op != tt.op {
			t.Errorf("ParsePath(%q) = %q, %v, %v; want %q, %v", tt.raw, model, op, err, tt.model, tt.op)
		}
	}
}

func TestOpString(t *testing.T) {
	for op, want := range map[Op]string{Converse: "converse", ConverseStream: "converse-stream", Invoke: "invoke", InvokeStream: "invoke-with-response-stream", 7: "Op(7)"} {
		if got := op.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(op), got, want)
		}
	}
	if Converse.Stream() || Invoke.Stream() || !ConverseStream.Stream() || !InvokeStream.Stream() {
		t.Error("Stream() is wrong")
	}
}

func TestFamilyOf(t *testing.T) {
	tests := map[string]family{
		"anthropic.claude-3-5-sonnet-20241022-v2:0":                                                          famClaude,
		"us.anthropic.claude-3-5-sonnet-20241022-v2:0":                                                       famClaude,
		"global.anthropic.claude-sonnet-4-5-20250929-v1:0":                                                   famClaude,
		"apac.anthropic.claude-3-haiku-20240307-v1:0":                                                        famClaude,
		"arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-haiku-20240307-v1:0": famClaude,
		"arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-v2":                                    famClaude,
		"amazon.nova-lite-v1:0":                                                                              famNova,
		"us.amazon.nova-pro-v1:0":                                                                            famNova,
		"meta.llama3-1-70b-instruct-v1:0":                                                                    famLlama,
		"us.meta.llama4-scout-17b-instruct-v1:0":                                                             famLlama,
		"amazon.titan-text-express-v1":                                                                       famUnknown,
		"mistral.mistral-large-2402-v1:0":                                                                    famUnknown,
		"cohere.command-r-v1:0":                                                                              famUnknown,
		"arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3":                        famUnknown,
		"anthropic":            famUnknown,
		"x.y.anthropic.claude": famUnknown,
	}
	for id, want := range tests {
		if got := familyOf(id); got != want {
			t.Errorf("familyOf(%q) = %d, want %d", id, got, want)
		}
	}
}

func TestParseUnsupported(t *testing.T) {
	rules := protocol.DefaultTaskRules()
	body := []byte(`{"inputText":"hi","textGenerationConfig":{}}`)
	for _, op := range []Op{Invoke, InvokeStream} {
		if _, err := Parse(op, "amazon.titan-text-express-v1", body, rules); !errors.Is(err, ErrUnsupported) {
			t.Errorf("titan %v: err = %v, want ErrUnsupported", op, err)
		}
		_, err := Parse(op, "amazon.nova-lite-v1:0", []byte(`{"messages":`), rules)
		if !errors.Is(err, ErrUnsupported) || !errors.Is(err, protocol.ErrInvalidJSON) {
			t.Errorf("nova bad JSON %v: err = %v, want ErrUnsupported and ErrInvalidJSON", op, err)
		}
		_, err = Parse(op, "meta.llama3-8b-instruct-v1:0", []byte(`{"messages":[]}`), rules)
		if !errors.Is(err, ErrUnsupported) || !errors.Is(err, protocol.ErrMissingMessages) {
			t.Errorf("llama no prompt %v: err = %v, want ErrUnsupported and ErrMissingMessages", op, err)
		}
		_, err = Parse(op, "anthropic.claude-3-haiku-20240307-v1:0", []byte(`{"anthropic_version":"bedrock-2023-05-31"}`), rules)
		if !errors.Is(err, ErrUnsupported) {
			t.Errorf("claude no messages %v: err = %v, want ErrUnsupported", op, err)
		}
	}
	for _, body := range []string{`{"messages":`, `[1]`, `{"messages":{}}`, `{}`, ``, `"x"`} {
		_, err := Parse(Converse, "amazon.nova-lite-v1:0", []byte(body), rules)
		if !errors.Is(err, protocol.ErrInvalidJSON) && !errors.Is(err, protocol.ErrMissingMessages) {
			t.Errorf("converse %q: err = %v", body, err)
		}
		if errors.Is(err, ErrUnsupported) {
			t.Errorf("converse %q: err = %v wraps ErrUnsupported", body, err)
		}
	}
	deep := bytes.Repeat([]byte("["), 20000)
	if _, err := Parse(Converse, "m", append([]byte(`{"messages":`), deep...), rules); !errors.Is(err, protocol.ErrInvalidJSON) {
		t.Errorf("deep: err = %v", err)
	}
}

// rules of the tests: a regex, then the first user message.
var testRules = []protocol.TaskRule{{Regex: regexp.MustCompile(`(?s)\nTask: (.+)$`)}, {FirstUserMessage: true}}

// checkInsertion fails unless out is body with one run of bytes inserted, so that
// deleting that run restores body.
func checkInsertion(t *testing.T, body, out []byte) {
	t.Helper()
	if len(out) <= len(body) {
		t.Fatalf("nothing inserted:\n%s", out)
	}
	n := len(out) - len(body)
	p := 0
	for p < len(body) && body[p] == out[p] {
		p++
	}
	if !bytes.Equal(body[p:], out[p+n:]) {
		// The run may start earlier when its first bytes repeat those before it.
		t.Fatalf("not a single insertion at %d:\nbody %s\nout  %s", p, body, out)
	}
}
