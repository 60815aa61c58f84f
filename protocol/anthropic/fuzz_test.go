package anthropic

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
	airline, err := os.ReadFile("testdata/airline.json")
	if err != nil {
		f.Fatal(err)
	}
	return []string{
		bodyString, bodyBlocks, bodyNoSystem, bodyNullSystem, bodyEmptySystem, bodyEmptyBlocks, bodySystemTask,
		string(airline),
		`{"model":"claude-sonnet-4-5","stream":true,"max_tokens":100,"system":"Be terse.","messages":[{"role":"user","content":"Task: refund order #1\u00e9"}]}`,
		`{"anthropic_version":"bedrock-2023-05-31","messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"ok"}]}]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}},{"type":"document","title":"t","source":{"type":"text","data":"x"}},{"type":"text","text":"Task: see"}]},` +
			`{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"redacted_thinking","data":"d"},{"type":"server_tool_use","id":"s1","name":"web_search","input":{}},` +
			`{"type":"web_search_tool_result","tool_use_id":"s1","content":[]},{"type":"tool_use","id":"t","name":"f","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"url","url":"https://x"}}]},{"type":"future"}]}]}`,
	}
}

// FuzzParse: Parse never panics; when it accepts a body, every placement inserts one
// run of bytes (deleting it restores the input) that leaves valid JSON valid, and
// the output parses again with the text where the placement puts it.
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
		// Whatever the blocks, the messages encode (raw blocks are valid JSON) and read back.
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

// FuzzSpliceRegex: any regex rule on any body finds a task whose end maps to a raw
// offset that splits the JSON string where the decoded task ends.
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
		checkReparse(t, r, out, rules, protocol.AppendToTask, fuzzText)
	})
}

// FuzzStreamDecoder: any bytes in any chunking decode without panic, to the same
// answer as in one write.
func FuzzStreamDecoder(f *testing.F) {
	f.Add([]byte(realisticStream), []byte{1, 7, 64})
	f.Add([]byte(strings.ReplaceAll(realisticStream, "\n", "\r\n")), []byte{2})
	f.Add([]byte(strings.ReplaceAll(realisticStream, "\n", "\r")), []byte{3, 1})
	f.Add([]byte(dropEventLines(realisticStream)), []byte{5})
	f.Add([]byte("event: content_block_delta\r\ndata: {\"index\":0,\r\ndata:\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\r\r"), []byte{1})
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
