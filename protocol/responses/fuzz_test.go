package responses

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
)

// fuzzText is spliced by the fuzzers. It starts with a short escape, not a \u one:
// gjson would join a \u escape to a lone surrogate escape that ends the task (see
// jsontext.RawOffset), and the re-parse check would then see different text.
const fuzzText = "\n\nContext: \"é\" </>\t\u2028"

var seedBodies = []string{
	bodyString, bodyItems, bodyNoInstructions, bodyNullInstructions, bodyEmptyInstructions, bodyContinued,
	bodyInstructionsTask, bodyEmptyList, `{}`,
	`{"model":"gpt-4.1","input":"Task: refund order #1\u00e9","tools":[{"type":"function","name":"f"}]}`,
	`{"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":""}]},{"role":"user","content":"Task: b"}]}`,
	`{"input":[{"role":"user","content":[{"type":"input_text","text":"Task: x"},{"type":"input_image","image_url":"data:image/png;base64,AA=="}]},` +
		`{"type":"reasoning","id":"rs","summary":[]},{"type":"custom_tool_call","call_id":"c","name":"apply_patch","input":"*** Begin"},` +
		`{"type":"custom_tool_call_output","call_id":"c","output":"ok"},{"type":"web_search_call","id":"ws"},{"type":"x_output","call_id":"c2"},` +
		`{"type":"computer_call_output","call_id":"c3","output":{"type":"computer_screenshot","file_id":"f"}}]}`,
	`{"input":[{"role":"user","content":"Task: y"},{"type":"configuration_update","reasoning":{"effort":"low"}},` +
		`{"type":"reasoning","id":"rs"},{"type":"configuration_update"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"compaction_trigger"}]}`,
}

// FuzzParse: Parse never panics; when it accepts a body, every placement inserts one
// run of bytes (deleting it restores the input) that leaves valid JSON valid, and the
// output parses again with the text where the placement puts it.
func FuzzParse(f *testing.F) {
	for _, b := range seedBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rules := []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}, {FirstUserMessage: true}}
		r, err := Parse(body, rules)
		if err != nil {
			return
		}
		// Whatever the items, the messages encode (raw items are valid JSON) and read back.
		line, err := json.Marshal(r.Messages)
		if err != nil {
			t.Fatalf("messages do not encode: %v", err)
		}
		var back []protocol.Message
		if err := json.Unmarshal(line, &back); err != nil || len(back) != len(r.Messages) {
			t.Fatalf("messages do not read back: %v\n%s", err, line)
		}
		for _, p := range []protocol.Placement{protocol.AppendToTask, protocol.System, protocol.NewMessage} {
			out := r.SpliceTo(nil, body, p, fuzzText)
			checkInsertion(t, r, body, out, p)
			checkReparse(t, r, out, rules, p, fuzzText)
		}
		first := protocol.DefaultTaskRules()
		if r, err = Parse(body, first); err != nil {
			t.Fatalf("Parse with other rules: %v", err)
		}
		out := r.SpliceTo(nil, body, protocol.AppendToTask, fuzzText)
		checkInsertion(t, r, body, out, protocol.AppendToTask)
		checkReparse(t, r, out, first, protocol.AppendToTask, fuzzText)
	})
}

// FuzzStreamDecoder: any bytes in any chunking decode without panic, to the same
// answer as in one write.
func FuzzStreamDecoder(f *testing.F) {
	f.Add([]byte(realisticStream), []byte{1, 7, 64})
	f.Add([]byte(strings.ReplaceAll(realisticStream, "\n", "\r\n")), []byte{2})
	f.Add([]byte(strings.ReplaceAll(realisticStream, "\n", "\r")), []byte{3, 1})
	f.Add([]byte(dropEventLines(realisticStream)), []byte{5})
	call := `{"type":"custom_tool_call","id":"ctc_1","status":"completed","call_id":"call_p","name":"apply_patch","input":"*** Begin Patch\n*** End Patch\n"}`
	f.Add([]byte(customCallStream(call, "["+call+"]")), []byte{9, 3})
	f.Add([]byte(customCallStream(call, "[]")), []byte{4})
	f.Add([]byte("data: {\"type\":\"response.output_text.delta\",\"output_index\":0,\r\ndata:\"delta\":\"a\"}\r\r"), []byte{1})
	f.Fuzz(func(t *testing.T, stream, sizes []byte) {
		var whole StreamDecoder
		_, _ = whole.Write(stream)
		var chunked StreamDecoder
		for i, k := 0, 0; i < len(stream); k++ {
			n := 1
			if len(sizes) > 0 {
				n = max(1, int(sizes[k%len(sizes)]))
			}
			n = min(n, len(stream)-i)
			_, _ = chunked.Write(stream[i : i+n])
			i += n
		}
		if !reflect.DeepEqual(whole.Message(), chunked.Message()) || whole.Usage() != chunked.Usage() ||
			whole.Finished() != chunked.Finished() || whole.ResponseID() != chunked.ResponseID() {
			t.Fatalf("chunking changed the answer:\n%#v %+v %v\n%#v %+v %v",
				whole.Message(), whole.Usage(), whole.Finished(), chunked.Message(), chunked.Usage(), chunked.Finished())
		}
	})
}
