package jsontext

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// completed is a Responses API final event as OpenAI sends it: the fields that name
// it first, the answer in the middle, the totals last.
const completed = `{"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","object":"response","status":"completed",` +
	`"instructions":"say \"usage\":{ twice","output":[{"type":"message","content":[{"type":"output_text","text":"a\\\"b \"usage\":{\"x\":1}"}]}],` +
	`"tools":[{"type":"function","name":"f","parameters":{"properties":{"usage":{"type":"string"}}}}],` +
	`"usage":{"input_tokens":5,"output_tokens":7},"user":null,"metadata":{"usage":"not this"}}}`

func TestHeadMember(t *testing.T) {
	for _, c := range []struct {
		b    string
		path []string
		want string // raw; "" not found
	}{
		{completed, []string{"type"}, `"response.completed"`},
		{completed, []string{"response", "id"}, `"resp_1"`},
		{completed, []string{"response", "status"}, `"completed"`},
		{completed[:120], []string{"response", "status"}, `"completed"`},
		{completed[:110], []string{"response", "status"}, ``}, // cut inside it
		{completed[:60], []string{"response", "id"}, ``},
		{completed, []string{"response", "usage"}, `{"input_tokens":5,"output_tokens":7}`},
		{completed, []string{"missing"}, ``},
		{`{"a":1,"b":2`, []string{"a"}, `1`},
		{`{"a":12`, []string{"a"}, ``}, // the number may go on
		{`{"\u0061":"esc"}`, []string{"a"}, `"esc"`},
		{`{"a":{"x":[1,"]"}],"b":true}`, []string{"b"}, `true`},
		{`{"a":tru,"b":1}`, []string{"a"}, ``}, // not valid
		{`[{"a":1}]`, []string{"a"}, ``},
		{``, []string{"a"}, ``},
	} {
		if got := HeadMember([]byte(c.b), c.path...); got.Raw != c.want {
			t.Errorf("HeadMember(%.40q…, %q) = %q, want %q", c.b, c.path, got.Raw, c.want)
		}
	}
}

func TestTailMember(t *testing.T) {
	for _, c := range []struct {
		b     string
		depth int
		key   string
		want  string
	}{
		// The usage of the response, not the strings and nested objects that say "usage".
		{completed, 2, "usage", `{"input_tokens":5,"output_tokens":7}`},
		{completed[len(completed)-100:], 2, "usage", `{"input_tokens":5,"output_tokens":7}`},
		{completed[len(completed)-40:], 2, "usage", ``}, // cut inside it
		{completed, 1, "sequence_number", `9`},
		{completed, 3, "usage", `"not this"`},
		{completed, 2, "missing", ``},
		// A chat completion chunk: finish_reason in choices[0], usage at the root.
		{`"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3}}`, 3, "finish_reason", `"stop"`},
		{`"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3}}`, 1, "usage", `{"prompt_tokens":3}`},
		// Escaped quotes and backslashes before a quote.
		{`x\\","k":"v\"\\"}`, 1, "k", `"v\"\\"`},
		{`\"k\":1}`, 1, "k", ``}, // the key's quote is escaped: inside a string
		{`ab"}`, 1, "k", ``},     // begins inside a string
		{`,"k":1}}`, 1, "k", ``}, // at depth 2
		{`{"k":1}`, 1, "k", `1`},
		{`"k":[1}`, 1, "k", ``},
		{``, 1, "k", ``},
	} {
		if got := TailMember([]byte(c.b), c.depth, c.key); got.Raw != c.want {
			t.Errorf("TailMember(…%.40q, %d, %q) = %q, want %q", c.b, c.depth, c.key, got.Raw, c.want)
		}
	}
}

// FuzzPartialMembers: of a valid JSON object, HeadMember of any prefix and TailMember of
// any suffix find what a walk of the whole text finds, or nothing; and on the whole
// text they find it.
func FuzzPartialMembers(f *testing.F) {
	f.Add([]byte(completed), uint16(100))
	f.Add([]byte(`{"a":{"b":[{"a":"\\\""}],"a":1},"c":{"a":{"a":2}}}`), uint16(7))
	f.Fuzz(func(t *testing.T, doc []byte, cut uint16) {
		if Validate(doc) != nil || !gjson.ParseBytes(doc).IsObject() {
			return
		}
		at := int(cut) % (len(doc) + 1)
		root := gjson.ParseBytes(doc)
		head := first(root, "a")
		for _, c := range []struct {
			path []string
			want gjson.Result
		}{{[]string{"a"}, head}, {[]string{"a", "b"}, first(head, "b")}} {
			if got := HeadMember(doc, c.path...); got.Raw != c.want.Raw {
				t.Fatalf("HeadMember(whole, %q) = %q, want %q", c.path, got.Raw, c.want.Raw)
			}
			if got := HeadMember(doc[:at], c.path...); got.Exists() && got.Raw != c.want.Raw {
				t.Fatalf("HeadMember(first %d bytes, %q) = %q, want %q", at, c.path, got.Raw, c.want.Raw)
			}
		}
		for depth := 1; depth <= 3; depth++ {
			var want gjson.Result
			lastAt(root, 1, depth, "a", &want)
			if got := TailMember(doc, depth, "a"); got.Raw != want.Raw {
				t.Fatalf("TailMember(whole, %d) = %q, want %q", depth, got.Raw, want.Raw)
			}
			if got := TailMember(doc[at:], depth, "a"); got.Exists() && got.Raw != want.Raw {
				t.Fatalf("TailMember(from %d, %d) = %q, want %q", at, depth, got.Raw, want.Raw)
			}
		}
	})
}

// first is the value of v's first member named key.
func first(v gjson.Result, key string) gjson.Result {
	var out gjson.Result
	if v.IsObject() {
		v.ForEach(func(k, m gjson.Result) bool {
			if k.Str == key {
				out = m
				return false
			}
			return true
		})
	}
	return out
}

// lastAt sets out to the last member named key of the objects at depth, v's members
// being at d.
func lastAt(v gjson.Result, d, depth int, key string, out *gjson.Result) {
	v.ForEach(func(k, m gjson.Result) bool {
		if v.IsObject() && d == depth && k.Str == key {
			*out = m
		}
		if m.IsObject() || m.IsArray() {
			lastAt(m, d+1, depth, key, out)
		}
		return true
	})
}

func TestStringStartSeesEscapes(t *testing.T) {
	b := []byte(`{"a\"b\\":1}`)
	if open := stringStart(b, strings.LastIndexByte(string(b), '"')); open != 1 {
		t.Fatalf("the string ending at the last quote opens at %d, want 1", open)
	}
}
