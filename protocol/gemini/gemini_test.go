package gemini

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/protocol"
)

func parse(t *testing.T, body string) *Request {
	t.Helper()
	r, err := Parse([]byte(body), protocol.DefaultTaskRules(), "gemini-2.5-pro", FrameSSE)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The captured first call of Gemini CLI: its <session_context> preamble is passed
// over and the prompt is the task; the second call (the tool round trip) has the
// same task, and the call's function response pairs with the call.
func TestGeminiCLICapture(t *testing.T) {
	for _, f := range []string{"first.json", "tool-result.json"} {
		body, err := os.ReadFile("../testdata/harness/gemini-cli/" + f)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Parse(body, protocol.DefaultTaskRules(), "gemini-3.8-flash", FrameSSE)
		if err != nil {
			t.Fatal(err)
		}
		if r.Task != "List the files in this folder." {
			t.Errorf("%s: task %q (rule %s)", f, r.Task, r.TaskRule)
		}
		out := r.SpliceTo(nil, body, protocol.AppendToTask, "\n\nCONTEXT")
		if !json.Valid(out) || !strings.Contains(string(out), `"List the files in this folder.\n\nCONTEXT"`) {
			t.Errorf("%s: AppendToTask did not land after the task", f)
		}
	}
	body, _ := os.ReadFile("../testdata/harness/gemini-cli/tool-result.json")
	r, _ := Parse(body, protocol.DefaultTaskRules(), "", FrameSSE)
	n := len(r.Messages)
	call, res := r.Messages[n-2], r.Messages[n-1]
	if len(call.ToolCalls) != 1 || res.Role != "tool" || res.ToolCallID != call.ToolCalls[0].ID {
		t.Fatalf("call %+v and response %+v do not pair", call, res)
	}
}

func TestParseShapes(t *testing.T) {
	body := `{"system_instruction":{"parts":[{"text":"Be brief."}]},"contents":[
	 {"role":"user","parts":[{"text":"Summarise the PDF."},{"inline_data":{"mime_type":"application/pdf","data":"JVBERg=="}},{"fileData":{"mimeType":"image/png","fileUri":"gs://b/x.png"}}]},
	 {"role":"model","parts":[{"text":"Let me ","thought":true},{"text":"Looking"},{"text":" now."},{"functionCall":{"name":"read","args":{"p": 1}}},{"functionCall":{"name":"read","args":{"p":2}},"thoughtSignature":"sig"}]},
	 {"role":"user","parts":[{"functionResponse":{"name":"read","response":{"r":1}}},{"functionResponse":{"name":"read","response":{"r":2}}}]}],
	 "generationConfig":{"temperature":0}}`
	r := parse(t, body)
	if r.Model != "gemini-2.5-pro" || !r.Stream || r.Task != "Summarise the PDF." {
		t.Fatalf("view %+v", r.View)
	}
	m := r.Messages
	if len(m) != 5 || m[0].Role != "system" || m[0].Content != "Be brief." {
		t.Fatalf("messages %+v", m)
	}
	if len(m[1].Parts) != 3 || m[1].Parts[1].Type != protocol.PartFile || m[1].Parts[1].Media.Data != "JVBERg==" ||
		m[1].Parts[2].Type != protocol.PartImage || m[1].Parts[2].Media.URL != "gs://b/x.png" {
		t.Errorf("media parts %+v", m[1].Parts)
	}
	a := m[2]
	if a.Role != "assistant" || a.Content != "Looking now." || len(a.ToolCalls) != 2 || a.ToolCalls[0].Arguments != `{"p":1}` ||
		a.ToolCalls[0].ID == a.ToolCalls[1].ID || len(a.Raw) != 2 || !strings.Contains(string(a.Raw[0]), `"thought":true`) {
		t.Errorf("model message %+v", a)
	}
	if m[3].ToolCallID != a.ToolCalls[0].ID || m[4].ToolCallID != a.ToolCalls[1].ID || m[4].Content != `{"r":2}` {
		t.Errorf("responses %+v %+v", m[3], m[4])
	}
}

func TestParseErrors(t *testing.T) {
	for _, body := range []string{`{`, `[]`, `{"contents":{}}`, `{"model":"x"}`} {
		if _, err := Parse([]byte(body), protocol.DefaultTaskRules(), "m", FrameJSON); err == nil {
			t.Errorf("%s: no error", body)
		}
	}
}

func TestSplice(t *testing.T) {
	user := `{"role":"user","parts":[{"text":"Fix the bug."}]}`
	cases := []struct {
		name, body string
		p          protocol.Placement
		want       string
	}{
		{"task", `{"contents":[` + user + `]}`, protocol.AppendToTask,
			`{"contents":[{"role":"user","parts":[{"text":"Fix the bug.CTX"}]}]}`},
		{"system new", `{"contents":[` + user + `]}`, protocol.System,
			`{"systemInstruction":{"parts":[{"text":"CTX"}]},"contents":[` + user + `]}`},
		{"system parts", `{"systemInstruction":{"parts":[{"text":"S"}]},"contents":[` + user + `]}`, protocol.System,
			`{"systemInstruction":{"parts":[{"text":"S"},{"text":"CTX"}]},"contents":[` + user + `]}`},
		{"system empty parts", `{"system_instruction":{"parts":[]},"contents":[` + user + `]}`, protocol.System,
			`{"system_instruction":{"parts":[{"text":"CTX"}]},"contents":[` + user + `]}`},
		{"system no parts", `{"systemInstruction":{},"contents":[` + user + `]}`, protocol.System,
			`{"systemInstruction":{"parts":[{"text":"CTX"}]},"contents":[` + user + `]}`},
		{"system null", `{"systemInstruction":null,"contents":[` + user + `]}`, protocol.System,
			`{"systemInstruction":null,"contents":[` + user + `],"systemInstruction":{"parts":[{"text":"CTX"}]}}`},
		{"new message", `{"contents":[` + user + `]}`, protocol.NewMessage,
			`{"contents":[` + user + `,{"role":"user","parts":[{"text":"CTX"}]}]}`},
	}
	for _, c := range cases {
		r := parse(t, c.body)
		got := string(r.SpliceTo(nil, []byte(c.body), c.p, "CTX"))
		if got != c.want {
			t.Errorf("%s:\n got  %s\n want %s", c.name, got, c.want)
		}
		if dst := r.SpliceTo([]byte("x"), []byte(c.body), c.p, "CTX"); string(dst) != "x"+c.want {
			t.Errorf("%s: SpliceTo %s", c.name, dst)
		}
	}
	// Escaping, and a body other than the parsed one is left alone.
	body := `{"contents":[{"parts":[{"text":"Fix \"it\"\u00e9"}]}]}`
	r := parse(t, body)
	if got := string(r.SpliceTo(nil, []byte(body), protocol.AppendToTask, "a\"b")); got != `{"contents":[{"parts":[{"text":"Fix \"it\"\u00e9a\"b"}]}]}` {
		t.Errorf("escaped: %s", got)
	}
	if got := r.SpliceTo(nil, []byte(body+" "), protocol.AppendToTask, "x"); string(got) != body+" " {
		t.Errorf("other body spliced")
	}
}

func TestPaths(t *testing.T) {
	p, ok := ParsePath("/v1beta/models/gemini-2.5-pro:streamGenerateContent")
	if !ok || p.Model != "gemini-2.5-pro" || p.Method != MethodStream || p.Vertex || !p.Augmented() {
		t.Errorf("%+v %v", p, ok)
	}
	p, ok = ParsePath("/v1/projects/my-p/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent")
	if !ok || !p.Vertex || p.Project != "my-p" || p.Location != "us-central1" || p.Model != "gemini-2.5-flash" {
		t.Errorf("%+v %v", p, ok)
	}
	if p, ok := ParsePath("/v1beta/models/gemini-2.5-pro:countTokens"); !ok || p.Augmented() {
		t.Errorf("countTokens %+v", p)
	}
	for _, bad := range []string{"/v1beta/models", "/v1/chat/completions", "/v1beta/models/:generateContent", "/v1/projects/p/locations/l/publishers/x/models/m:generateContent"} {
		if _, ok := ParsePath(bad); ok {
			t.Errorf("%s parsed", bad)
		}
	}
	if FramingOf(MethodStream, "sse") != FrameSSE || FramingOf(MethodStream, "") != FrameArray || FramingOf(MethodGenerate, "sse") != FrameJSON {
		t.Error("framing")
	}
	if b := ErrorBody(429, "slow \"down\""); !json.Valid(b) || !bytes.Contains(b, []byte(`"RESOURCE_EXHAUSTED"`)) {
		t.Errorf("error body %s", b)
	}
}

// answerBytes renders the fake's answer in a framing: what the decoders read.
func answerBytes(f Framing, thoughts, text string, calls []testkit.ToolCall, errAfter int) []byte {
	chunks := testkit.GeminiChunks("m", "r1", thoughts, text, calls, 12)
	if errAfter > 0 {
		chunks = append(chunks[:errAfter:errAfter], testkit.GeminiError(503, "overloaded"))
	}
	var b bytes.Buffer
	switch f {
	case FrameJSON:
		out, _ := json.Marshal(testkit.GeminiResponse("m", "r1", thoughts, text, calls, 12))
		return out
	case FrameSSE:
		for _, c := range chunks {
			b.WriteString("data: ")
			b.Write(c)
			b.WriteString("\r\n\r\n")
		}
	case FrameArray:
		for i, c := range chunks {
			if i == 0 {
				b.WriteString("[")
			} else {
				b.WriteString(",\r\n")
			}
			_ = json.Indent(&b, c, "", "  ")
		}
		b.WriteString("\n]")
	}
	return b.Bytes()
}

// Every framing, fed in every chunking, decodes to the answer; and the answer hashes
// as its echo in the next call does (the fields stitching reads).
func TestDecoders(t *testing.T) {
	calls := []testkit.ToolCall{{Name: "run_shell_command", Arguments: `{"command":"ls"}`}, {Name: "read", Arguments: `{"p":"a b"}`}}
	for _, f := range []Framing{FrameJSON, FrameSSE, FrameArray} {
		whole := answerBytes(f, "Thinking {hard}.", "I will look \"now\".", calls, 0)
		for _, step := range []int{1, 3, 17, len(whole)} {
			d := NewDecoder(f)
			for i := 0; i < len(whole); i += step {
				_, _ = d.Write(whole[i:min(i+step, len(whole))])
			}
			m := d.Message()
			if !d.Finished() || m.Content != "I will look \"now\"." || len(m.ToolCalls) != 2 || m.ToolCalls[1].Arguments != `{"p":"a b"}` {
				t.Fatalf("framing %d step %d: finished %v message %+v", f, step, d.Finished(), m)
			}
			if u := d.Usage(); u.InputTokens != 12 || u.OutputTokens != 7+4 {
				t.Errorf("framing %d: usage %+v", f, u)
			}
			if len(m.Raw) < 2 || !strings.Contains(string(m.Raw[0]), `"thought":true`) {
				t.Errorf("framing %d: raw %v", f, m.Raw)
			}
			// The echo: the answer's parts as the client sends them back.
			echo := `{"contents":[{"role":"user","parts":[{"text":"go"}]},{"role":"model","parts":` + modelParts(t, whole, f) + `}]}`
			r := parse(t, echo)
			e := r.Messages[1]
			if e.Content != m.Content || len(e.ToolCalls) != 2 || e.ToolCalls[0] != m.ToolCalls[0] || e.ToolCalls[1] != m.ToolCalls[1] {
				t.Errorf("framing %d: echo %+v differs from answer %+v", f, e, m)
			}
			var s protocol.Sketch
			s.Of(&e)
			if s.Sum64() != d.Sketch().Sum64() {
				t.Errorf("framing %d: sketches differ", f)
			}
		}
	}
}

// modelParts is the parts of the answer merged as Gemini CLI keeps them in its
// history: the text fragments merged, the calls as they came.
func modelParts(t *testing.T, _ []byte, _ Framing) string {
	t.Helper()
	return `[{"text":"Thinking {hard}.","thought":true},{"text":"I will "},{"text":"look \"now\"."},` +
		`{"functionCall":{"id":"run_shell_command_17957_0","name":"run_shell_command","args":{"command":"ls"}},"thoughtSignature":"x"},` +
		`{"functionCall":{"name":"read","args":{"p":"a b"}}}]`
}

// Faults: a stream cut short is not finished and keeps what came; an error object
// mid-stream (or an error body) means not finished; an answer past the budget is
// cut and counted.
func TestDecoderFaults(t *testing.T) {
	for _, f := range []Framing{FrameSSE, FrameArray, FrameJSON} {
		whole := answerBytes(f, "", "one two three four", nil, 0)
		d := NewDecoder(f)
		_, _ = d.Write(whole[:len(whole)-5])
		if d.Finished() {
			t.Errorf("framing %d: truncated stream finished", f)
		}
		if f != FrameJSON && !strings.HasPrefix(d.Message().Content, "one two") {
			t.Errorf("framing %d: truncated kept %q", f, d.Message().Content)
		}
		if f != FrameJSON {
			d = NewDecoder(f)
			_, _ = d.Write(answerBytes(f, "", "one two three four", nil, 2))
			if d.Finished() || d.Message().Content != "one two" {
				t.Errorf("framing %d: error mid-stream: finished %v, %q", f, d.Finished(), d.Message().Content)
			}
		}
		d = NewDecoder(f)
		_, _ = d.Write(testkit.GeminiError(400, "bad"))
		if d.Finished() {
			t.Errorf("framing %d: error body finished", f)
		}
		long := strings.Repeat("word ", 400)
		d = NewDecoder(f)
		d.Limit(100)
		_, _ = d.Write(answerBytes(f, "", long, nil, 0))
		if !d.Finished() || len(d.Message().Content) > 100 || d.Truncated() == 0 || d.Truncated()+int64(len(d.Message().Content)) != int64(len(long)) {
			t.Errorf("framing %d: oversized: finished %v kept %d truncated %d", f, d.Finished(), len(d.Message().Content), d.Truncated())
		}
	}
}

// An array element past the bound of what the decoder holds is skipped and counted,
// and the elements after it read.
func TestArrayOversizedElement(t *testing.T) {
	d := &ArrayDecoder{}
	d.Limit(10)
	big := `{"candidates":[{"content":{"parts":[{"text":"` + strings.Repeat("x", protocol.EventBound(10)) + `"}]}}]}`
	end := `{"candidates":[{"content":{"parts":[{"text":"tail"}]},"finishReason":"STOP"}]}`
	_, _ = d.Write([]byte("[" + big + ",\r\n" + end + "]"))
	if !d.Finished() || d.Truncated() == 0 || d.Message().Content != "" {
		t.Errorf("finished %v truncated %d content %q", d.Finished(), d.Truncated(), d.Message().Content)
	}
}
