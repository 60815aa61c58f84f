package openai

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/jsontext"
)

// parseReference is Parse as it was written on gjson's walk (every value parsed by
// gjson.Result.ForEach): the reference the word-at-a-time walk must agree with, and
// the baseline its benchmark is compared with in the same run.
func parseReference(body []byte, rules []protocol.TaskRule) (*Request, error) {
	// Validation as it was: the depth guard, then gjson's recursive validator.
	if jsontext.TooDeep(body) {
		return nil, fmt.Errorf("%w: nested deeper than %d levels", protocol.ErrInvalidJSON, jsontext.MaxDepth)
	}
	if !gjson.ValidBytes(body) {
		return nil, protocol.ErrInvalidJSON
	}
	if !utf8.Valid(body) { // as jsontext.Validate
		return nil, fmt.Errorf("%w: the body is not valid UTF-8", protocol.ErrInvalidJSON)
	}
	js := string(body)
	root := gjson.Result{Type: gjson.JSON, Raw: js}
	if jsontext.FirstByte(js) != '{' {
		return nil, fmt.Errorf("%w: the body is not a JSON object", protocol.ErrMissingMessages)
	}
	r := &Request{bodyLen: len(body), task: taskSpot{msg: -1}}
	var msgs gjson.Result
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "model":
			r.Model = v.Str
		case "stream":
			r.Stream = v.Type == gjson.True
		case "messages":
			msgs = v
		}
		return true
	})
	if !msgs.IsArray() {
		return nil, protocol.Missing("messages", "an array")
	}
	r.arrOpen = msgs.Index
	var segs []segment
	r.sys = anchor{at: r.arrOpen + 1, kind: insSystemMessage}
	msgs.ForEach(func(_, v gjson.Result) bool {
		i := len(r.Messages)
		f := readFields(v)
		m := f.messageWith(toolCallsGJSON)
		end := v.Index + len(v.Raw)
		taskRole := isTaskRole(m.Role)
		var last gjson.Result
		var parts int
		m.Content, parts = contentText(f.content, func(part int, t gjson.Result) {
			if taskRole {
				segs = append(segs, segment{msg: i, part: part, idx: t.Index, raw: t.Raw, text: t.Str, msgEnd: end})
			}
			last = t
		})
		f.extras(&m, parts)
		if i == 0 {
			r.sys = systemAnchor(r.arrOpen, m.Role, f.content, last, parts)
		}
		r.Messages = append(r.Messages, m)
		// The reference remembers nothing: a slot of its own per message, as empty
		// as the memo's (nothing here stores into one).
		r.Slots = append(r.Slots, new(protocol.Slot))
		return true
	})
	r.Side = protocol.ReadSideFacts(body) // by gjson's walk of the top-level members
	r.findIn(rules, body, segs, nil)
	return r, nil
}

func referenceBodies(t testing.TB) []string {
	airline, err := os.ReadFile("testdata/airline16k.json")
	if err != nil {
		t.Fatal(err)
	}
	return []string{bodyFirstUser, bodyRegex, bodyParts, bodyNoText, bodyEmptyParts, bodyNullSystem, bodyEmpty, string(airline),
		`{"model":1,"model":"m2","stream":"true","messages":[1,"x",null,{"role":"user","content":[{"type":"text","text":"a\u00e9\ud83d\ude00"},{"type":"image_url"},{"text":"b","type":"text"}]},{"role":"assistant","content":null,"function_call":{"name":"f","arguments":{"a":1}}},{"r\u006fle":"tool","content":"x","content":"y"}]}`,
		`{"messages":{}}`, `[]`, `{"messages":[]}`, ` {"messages" : [ { "role" : "system" , "content" : [ ] } ] } `,
	}
}

// TestParseMatchesReference: the fast walk reads every body exactly as gjson's walk
// did — messages, task, anchors and errors.
func TestParseMatchesReference(t *testing.T) {
	rules := [][]protocol.TaskRule{protocol.DefaultTaskRules(), {{Regex: regexp.MustCompile(`Task: (.+)`)}, {FirstUserMessage: true}}}
	for _, body := range referenceBodies(t) {
		for _, rs := range rules {
			got, gerr := Parse([]byte(body), rs)
			want, werr := parseReference([]byte(body), rs)
			if fmt.Sprint(gerr) != fmt.Sprint(werr) || !reflect.DeepEqual(got, want) {
				t.Fatalf("%.80s:\n got %+v %v\nwant %+v %v", body, got, gerr, want, werr)
			}
		}
	}
}

func FuzzParseMatchesReference(f *testing.F) {
	for _, b := range referenceBodies(f) {
		f.Add([]byte(b))
	}
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"Task: a"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}},{"type":"file","file":{"file_id":"f"}},{"type":"x"}]},` +
		`{"role":"assistant","content":null,"refusal":"no","reasoning_content":"r","reasoning":{"a":1},"tool_calls":[{"id":"c","type":"custom","custom":{"name":"p","input":"*** x"}},{"id":"d","function":{"name":"f","arguments":{"a":1}}}]}]}`))
	rules := []protocol.TaskRule{{Regex: regexp.MustCompile(`Task: (.+)`)}, {FirstUserMessage: true}}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, gerr := Parse(body, rules)
		want, werr := parseReference(body, rules)
		if fmt.Sprint(gerr) != fmt.Sprint(werr) || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v %v\nwant %+v %v", body, got, gerr, want, werr)
		}
	})
}

// BenchmarkParseReference is BenchmarkParseSplice on the reference walk: compare the
// two in one run (go test -bench 'ParseSplice|ParseReference').
func BenchmarkParseReference(b *testing.B) {
	body, err := os.ReadFile("testdata/airline16k.json")
	if err != nil {
		b.Fatal(err)
	}
	rules := protocol.DefaultTaskRules()
	text := "\n\n" + strings.Repeat("Check the cabin class before booking. ", 10)
	var buf []byte // reused, as the proxy reuses its splice buffer
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r, err := parseReference(body, rules)
		if err != nil || r.Task == "" {
			b.Fatal(err)
		}
		buf = r.SpliceTo(buf[:0], body, protocol.AppendToTask, text)
	}
}
