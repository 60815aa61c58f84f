package openai

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
)

// fuzzText is spliced by the fuzzers. It starts with a short escape, not a \u one:
// gjson would join a \u escape to a lone surrogate escape that ends the task
// (see jsontext.RawOffset), and the re-parse check would then see different text.
const fuzzText = "\n\nContext: \"é\" </>\t\u2028"

// seedBodies are realistic request bodies for the fuzz corpora.
func seedBodies(f *testing.F) []string {
	airline, err := os.ReadFile("testdata/airline16k.json")
	if err != nil {
		f.Fatal(err)
	}
	return []string{
		bodyFirstUser, bodyRegex, bodyParts, bodyNoText, bodyEmptyParts, bodyNullSystem, bodyEmpty,
		string(airline),
		`{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"developer","content":"Be terse."},{"role":"user","content":"Task: refund order #1\u00e9"}]}`,
		`{"model":"m","tools":[],"max_tokens":"1","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}],"max_completion_tokens":3,"max_tokens":2,"inferenceConfig":{"maxTokens":1}}`,
		`{"toolConfig":{"tools":[ ]},"messages":[],"input":[{"type":"additional_tools"}],"max_output_tokens":1e2}`,
		`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}]}`,
	}
}

// FuzzParse: Parse never panics; when it accepts a body, every placement inserts one
// run of bytes that leaves valid JSON valid, and the output parses again with the
// text where the placement puts it.
func FuzzParse(f *testing.F) {
	for _, b := range seedBodies(f) {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rules := []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}, {FirstUserMessage: true}}
		r, err := Parse(body, rules)
		if err != nil {
			return
		}
		// The side facts collected on the parse's walk are those a walk of their own reads.
		if want := protocol.ReadSideFacts(body); r.Side != want {
			t.Fatalf("side facts %+v, read alone %+v", r.Side, want)
		}
		// Whatever the messages hold, they encode (raw items are valid JSON) and read back.
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
			if _, err := Parse(out, rules); err != nil {
				t.Fatalf("%s: output does not parse: %v\n%s", p, err, out)
			}
		}
		checkAppendedTask(t, r, body, rules)
	})
}

// checkAppendedTask fails unless, after AppendToTask, the task message holds the
// task immediately followed by the text.
func checkAppendedTask(t *testing.T, r *Request, body []byte, rules []protocol.TaskRule) {
	t.Helper()
	if r.Task == "" {
		return
	}
	out := r.SpliceTo(nil, body, protocol.AppendToTask, fuzzText)
	r2, err := Parse(out, rules)
	if err != nil {
		t.Fatal(err)
	}
	if got := r2.Messages[r.task.msg].Content; !strings.Contains(got, r.Task+fuzzText) {
		t.Fatalf("task message %q lacks task+text %q\n%s", got, r.Task+fuzzText, out)
	}
}

// FuzzSpliceRegex: any regex rule on any body finds a task whose end maps to a
// raw offset that splits the JSON string where the decoded task ends.
func FuzzSpliceRegex(f *testing.F) {
	patterns := []string{`Task: (.+)`, `(?s)\nTask: (.+)$`, `Task: (.+?) now`, `user ID is (\w+)`, `(é+)`, `(.)`, `"(.*)"`}
	for i, b := range seedBodies(f) {
		f.Add(patterns[i%len(patterns)], []byte(b))
	}
	f.Fuzz(func(t *testing.T, pattern string, body []byte) {
		re, err := regexp.Compile(pattern)
		if err != nil || len(pattern) > 200 {
			return
		}
		rules := []protocol.TaskRule{{Regex: re}}
		r, err := Parse(body, rules)
		if err != nil || r.Task == "" {
			return
		}
		out := r.SpliceTo(nil, body, protocol.AppendToTask, fuzzText)
		checkInsertion(t, r, body, out, protocol.AppendToTask)
		checkAppendedTask(t, r, body, rules)
	})
}

// FuzzStreamDecoder: any bytes in any chunking decode without panic, to the same
// answer as in one write.
func FuzzStreamDecoder(f *testing.F) {
	f.Add([]byte(realisticStream), []byte{1, 7, 64})
	f.Add([]byte(strings.ReplaceAll(realisticStream, "\n", "\r\n")), []byte{2})
	f.Add([]byte(strings.ReplaceAll(realisticStream, "\n", "\r")), []byte{3, 1})
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\r\ndata:\"delta\":{\"content\":\"a\"}}]}\r\r"), []byte{1})
	f.Fuzz(func(t *testing.T, stream, sizes []byte) {
		var whole StreamDecoder
		_, _ = whole.Write(stream)
		i := 0
		next := func() int {
			if len(sizes) == 0 {
				return 1
			}
			i++
			return int(sizes[i%len(sizes)])
		}
		chunked := decodeChunks(stream, next)
		if !reflect.DeepEqual(whole.Message(), chunked.Message()) || whole.Usage() != chunked.Usage() || whole.Finished() != chunked.Finished() {
			t.Fatalf("chunking changed the answer:\n%#v %+v %v\n%#v %+v %v",
				whole.Message(), whole.Usage(), whole.Finished(), chunked.Message(), chunked.Usage(), chunked.Finished())
		}
	})
}
