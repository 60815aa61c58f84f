package jsontext

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
)

func TestRawOffset(t *testing.T) {
	tests := []struct {
		raw     string
		decoded int
		want    int
	}{
		{`abc`, 2, 2},
		{`abc`, 3, 3},
		{`abc`, 9, 3},
		{`a\nb`, 1, 1},
		{`a\nb`, 2, 3},
		{`a\/b`, 3, 4},
		{`\"x\"`, 2, 3},
		{`caf\u00e9!`, 3, 3},
		{`caf\u00e9!`, 5, 9},
		{`caf\u00e9!`, 4, 9}, // inside the escape's bytes: after the escape
		{`\ud83d\ude00x`, 4, 12},
		{`\ud83d\ude00x`, 5, 13},
		{`\ud800x`, 3, 6},        // lone surrogate: U+FFFD
		{`\ud800\u0041x`, 3, 12}, // gjson takes any \u after a surrogate as its pair
		{`\\u0041`, 2, 3},
	}
	for _, tt := range tests {
		if got := RawOffset(tt.raw, tt.decoded); got != tt.want {
			t.Errorf("RawOffset(%q, %d) = %d; want %d", tt.raw, tt.decoded, got, tt.want)
		}
		if got := QuotedOffset(`"`+tt.raw+`"`, tt.decoded); got != tt.want+1 {
			t.Errorf("QuotedOffset(%q, %d) = %d; want %d", tt.raw, tt.decoded, got, tt.want+1)
		}
	}
	if got := QuotedOffset(``, 3); got != 0 {
		t.Errorf("QuotedOffset of nothing = %d", got)
	}
}

// checkRawOffset fails unless RawOffset(raw, k) splits raw where gjson's decoding of
// the two halves joins back to the whole and the first half ends at or just after
// (one escape's bytes) decoded offset k.
func checkRawOffset(t testing.TB, raw string, k int) {
	t.Helper()
	decoded := gjson.Parse(`"` + raw + `"`).Str
	j := RawOffset(raw, k)
	head := gjson.Parse(`"` + raw[:j] + `"`).Str
	tail := gjson.Parse(`"` + raw[j:] + `"`).Str
	if head+tail != decoded {
		t.Fatalf("RawOffset(%q, %d) = %d splits into %q + %q, not %q", raw, k, j, head, tail, decoded)
	}
	if want := min(k, len(decoded)); len(head) < want || len(head) > want+3 {
		t.Fatalf("RawOffset(%q, %d) = %d: head %q decodes to %d bytes", raw, k, j, head, len(head))
	}
}

func TestRawOffsetAgainstGJSON(t *testing.T) {
	for _, raw := range []string{
		`plain`, `a\nb\tc`, `\u00e9\u00e9x`, `\/\/\\\"`, `\ud83d\ude00\ud83d\ude01`,
		`\ud800\u0041z`, `\udc00x`, `x\ud800`, "raw é 中", `\u0000\u001f`,
	} {
		decoded := gjson.Parse(`"` + raw + `"`).Str
		for k := 0; k <= len(decoded)+1; k++ {
			checkRawOffset(t, raw, k)
		}
	}
}

func TestAppendEscapedMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{
		"", "plain", `"quoted" \back\slash/`, "\x00\x01\x08\x0c\x1f\x7f", "\b\f\n\r\t",
		"<script>&amp;</script>", "\u2028\u2029", "é中😀", "\xff\xfe bad \xc3", "\xed\xa0\x80",
	} {
		if got, want := string(AppendEscaped(nil, s)), jsonEscape(t, s); got != want {
			t.Errorf("AppendEscaped(%q) = %s; want %s", s, got, want)
		}
	}
}

// jsonEscape is what encoding/json writes inside the quotes of s.
func jsonEscape(t testing.TB, s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}

func TestInsertionAppendTo(t *testing.T) {
	body := []byte(`{"a":"xy"}`)
	tests := []struct {
		at                   int
		prefix, text, suffix string
		want                 string
	}{
		{7, ``, "-\"q\"\n-", ``, `{"a":"x-\"q\"\n-y"}`},
		{1, `"s":"`, "<b>&", `",`, `{"s":"<b>&","a":"xy"}`},
		{9, `,"b":"`, "é", `"`, `{"a":"xy","b":"é"}`},
		{0, ``, ``, ``, `{"a":"xy"}`},
		{10, `x`, ``, `y`, `{"a":"xy"}xy`},
	}
	for _, tt := range tests {
		in := Insertion{At: tt.at, Prefix: tt.prefix, Text: tt.text, Suffix: tt.suffix, OK: true}
		got := in.AppendTo([]byte("dst:"), body)
		if string(got) != "dst:"+tt.want {
			t.Errorf("%+v.AppendTo = %s; want dst:%s", in, got, tt.want)
		}
		if string(body) != `{"a":"xy"}` {
			t.Fatalf("AppendTo modified its input: %s", body)
		}
	}
}

func TestFindTask(t *testing.T) {
	tests := []struct {
		re, text string
		task     string
		end      int
		ok       bool
	}{
		{`Task: (.+?) now`, "x Task: fly now.", "fly", 11, true},
		{`Task: .+`, "x Task: fly", "Task: fly", 11, true}, // no group: the whole match
		{`Task: (.*)`, "Task: ", "", 0, false},             // empty task
		{`(a)|(b)`, "b", "", 0, false},                     // group 1 did not take part
		{`Task: (.+)`, "nothing", "", 0, false},
		{`(é+)`, "caféé!", "éé", 7, true},
	}
	for _, tt := range tests {
		task, end, ok := FindTask(regexp.MustCompile(tt.re), tt.text)
		if task != tt.task || end != tt.end || ok != tt.ok {
			t.Errorf("FindTask(%q, %q) = %q, %d, %v; want %q, %d, %v", tt.re, tt.text, task, end, ok, tt.task, tt.end, tt.ok)
		}
	}
}

func TestTooDeep(t *testing.T) {
	deep := func(n int) []byte {
		return []byte(strings.Repeat("[", n) + strings.Repeat("]", n))
	}
	if TooDeep(deep(MaxDepth)) {
		t.Error("MaxDepth levels are allowed")
	}
	if !TooDeep(deep(MaxDepth + 1)) {
		t.Error("MaxDepth+1 levels are too deep")
	}
	// Brackets inside strings, escaped quotes included, do not count.
	s := []byte(`{"s":"` + strings.Repeat(`[\"`, MaxDepth+1) + `","t":[]}`)
	if TooDeep(s) {
		t.Error("brackets inside a string counted")
	}
	if TooDeep([]byte(`"` + strings.Repeat("{", 2*MaxDepth))) {
		t.Error("brackets inside an unterminated string counted")
	}
}

func TestFirstByte(t *testing.T) {
	for in, want := range map[string]byte{"": 0, " \t\r\n": 0, " \n{": '{', "[": '[', "\v{": '\v'} {
		if got := FirstByte(in); got != want {
			t.Errorf("FirstByte(%q) = %q; want %q", in, got, want)
		}
	}
}

// FuzzRawOffset: RawOffset agrees with gjson's decoding on any valid string.
func FuzzRawOffset(f *testing.F) {
	f.Add(`caf\u00e9 \/ \"q\" \ud83d\ude00 \ud800\u0041`, 5)
	f.Add(`a\nb`, 2)
	f.Fuzz(func(t *testing.T, raw string, k int) {
		if !gjson.Valid(`"`+raw+`"`) || k < 0 {
			return
		}
		checkRawOffset(t, raw, k)
	})
}

// FuzzAppendEscaped: the escaping matches encoding/json's.
func FuzzAppendEscaped(f *testing.F) {
	f.Add("\n\nHint: \"x\" </> \u2028 \xff")
	f.Fuzz(func(t *testing.T, s string) {
		got := AppendEscaped(nil, s)
		if want := jsonEscape(t, s); string(got) != want {
			t.Fatalf("AppendEscaped(%q) = %s; want %s", s, got, want)
		}
		if !json.Valid([]byte(`"` + string(got) + `"`)) {
			t.Fatalf("not a JSON string: %s", got)
		}
	})
}

// TestObject: the offset of the opening brace, and the one error class per
// condition that every adapter returns through Object.
func TestObject(t *testing.T) {
	tests := []struct {
		body string
		open int
		want error
	}{
		{`{}`, 0, nil},
		{" \r\n\t{\"messages\":[]} ", 4, nil},
		{``, 0, protocol.ErrInvalidJSON},
		{`{"a":`, 0, protocol.ErrInvalidJSON},
		{"{\"a\":\"\xff\"}", 0, protocol.ErrInvalidJSON},
		{strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), 0, protocol.ErrInvalidJSON},
		{`[]`, 0, protocol.ErrMissingMessages},
		{` "x"`, 0, protocol.ErrMissingMessages},
		{`null`, 0, protocol.ErrMissingMessages},
	}
	for _, tt := range tests {
		js, open, err := Object([]byte(tt.body), nil)
		if !errors.Is(err, tt.want) {
			t.Errorf("Object(%q): err %v; want %v", tt.body, err, tt.want)
			continue
		}
		if err == nil && (open != tt.open || js != tt.body) {
			t.Errorf("Object(%q) = %q, %d; want the body, %d", tt.body, js, open, tt.open)
		}
	}
}

// FuzzObject: Object never panics, and what it accepts is a JSON object opening at
// the offset it returns.
func FuzzObject(f *testing.F) {
	f.Add([]byte(`{"messages":[]}`))
	f.Add([]byte(` [1]`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, b []byte) {
		js, open, err := Object(b, nil)
		if err != nil {
			if !errors.Is(err, protocol.ErrInvalidJSON) && !errors.Is(err, protocol.ErrMissingMessages) {
				t.Fatalf("%q: err %v of no class", b, err)
			}
			return
		}
		if js != string(b) || b[open] != '{' || !json.Valid(b) || strings.TrimSpace(string(b[:open])) != "" {
			t.Fatalf("%q: accepted, open %d", b, open)
		}
	})
}
