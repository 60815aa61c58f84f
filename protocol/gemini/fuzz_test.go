package gemini

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/protocol"
)

// FuzzParse: any body either fails to parse or gives a view whose splices keep the
// body valid JSON with every original byte in place around the insertion.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"first.json", "tool-result.json", "side-router.json"} {
		if b, err := os.ReadFile("../testdata/harness/gemini-cli/" + name); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"system_instruction":{"parts":[]},"contents":[{"parts":[{"text":"a\u00e9\"b"},{"inlineData":{"mimeType":"audio/wav","data":"AA=="}}]},{"role":"model","parts":[{"functionCall":{"name":"f"}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}]}`))
	f.Add([]byte(`{"systemInstruction":"s","contents":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Parse(body, protocol.DefaultTaskRules(), "m", FrameArray)
		if err != nil {
			return
		}
		for _, p := range []protocol.Placement{protocol.AppendToTask, protocol.System, protocol.NewMessage} {
			out := r.SpliceTo(nil, body, p, "ctx \"x\"")
			if !json.Valid(out) {
				t.Fatalf("%s splice of %q is not JSON: %q", p, body, out)
			}
			if _, err := Parse(out, protocol.DefaultTaskRules(), "m", FrameArray); err != nil {
				t.Fatalf("%s splice does not parse: %v", p, err)
			}
		}
		_, _ = json.Marshal(r.Messages)
	})
}

// FuzzDecoders: any bytes in any chunking never panic, and the same bytes fed whole
// or byte by byte decode alike in every framing.
func FuzzDecoders(f *testing.F) {
	calls := []testkit.ToolCall{{Name: "f", Arguments: `{"a":1}`}}
	for _, fr := range []Framing{FrameJSON, FrameSSE, FrameArray} {
		f.Add(byte(fr), answerBytes(fr, "t", "hello world", calls, 0))
		f.Add(byte(fr), answerBytes(fr, "", "hello world", nil, 1))
	}
	f.Add(byte(FrameArray), []byte(`[{"candidates":[{"content":{"parts":[{"text":"a]}\"{"}]}}]},`))
	f.Fuzz(func(t *testing.T, fr byte, data []byte) {
		framing := Framing(fr % 3)
		whole := NewDecoder(framing)
		_, _ = whole.Write(data)
		bytewise := NewDecoder(framing)
		for i := range data {
			_, _ = bytewise.Write(data[i : i+1])
		}
		a, b := whole.Message(), bytewise.Message()
		if framing != FrameJSON && (a.Content != b.Content || len(a.ToolCalls) != len(b.ToolCalls) || whole.Finished() != bytewise.Finished() || whole.Usage() != bytewise.Usage()) {
			t.Fatalf("chunking changed the answer: %+v vs %+v", a, b)
		}
	})
}
