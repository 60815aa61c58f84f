package jsontext

import (
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
)

// scanSeeds are bodies the fast scanner must judge exactly as gjson does.
var scanSeeds = []string{
	`{}`, `[]`, ` {"a" : [1, -2.5e+3, true, false, null, "x\"y\\z\u00e9\ud83d\ude00"]} `, `"\u12"`, `"\x"`, "\"a\x01\"",
	`{"a":1,}`, `[1,]`, `[01]`, `[-]`, `[1.]`, `[1e]`, `[.5]`, `{"a" 1}`, `{a:1}`, `[tru]`, `nul`, `{"a":{"b":[{"c":"d"}]}}`,
	`[1 2]`, `{"a":1 "b":2}`, `"abc`, `"abcdefghijklmnop\"qrstuvwxyz"`, `["\ud800", "\udc00\u0041", "\\\\\"", "\/"]`, ``, ` `,
	`[[[]]]]`, `{"a":[}`, `{"a":1}{}`, `0`, `-0.0e-0`, "[\"é日本\xff\xfe\"]",
	`{"messages":[{"role":"user","content":"hi"}],"model":"m","stream":true}`,
}

func TestValidMatchesGJSON(t *testing.T) {
	seeds := append([]string(nil), scanSeeds...)
	if b, err := os.ReadFile("../openai/testdata/airline16k.json"); err == nil {
		seeds = append(seeds, string(b))
	}
	check := func(b []byte) {
		ok, deep := Valid(b)
		if want := gjson.ValidBytes(b); ok != want || deep {
			t.Fatalf("Valid(%q) = %v (deep %v), gjson says %v", b, ok, deep, want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range seeds {
		check([]byte(s))
		mutate(rng, s, 300, check)
	}
}

// mutate calls fn with n mutations of s: a byte changed, dropped or inserted.
func mutate(rng *rand.Rand, s string, n int, fn func([]byte)) {
	alphabet := []byte("{}[]\",:\\ 0123456789-+.eEtrufalsn\u00e9\x01\t\nabu")
	for range n {
		b := []byte(s)
		if len(b) == 0 {
			b = append(b, alphabet[rng.IntN(len(alphabet))])
		}
		p := rng.IntN(len(b))
		switch rng.IntN(3) {
		case 0:
			b[p] = alphabet[rng.IntN(len(alphabet))]
		case 1:
			b = append(b[:p], b[p+1:]...)
		default:
			b = append(b[:p], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[p:]...)...)
		}
		fn(b)
	}
}

func TestValidDepth(t *testing.T) {
	ok, deep := Valid([]byte(strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)))
	if !ok || deep {
		t.Fatalf("depth %d: ok %v deep %v", MaxDepth, ok, deep)
	}
	if _, deep := Valid([]byte(strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1))); !deep {
		t.Fatal("one level too deep not reported")
	}
	if _, deep := Valid([]byte(strings.Repeat(`{"a":`, MaxDepth+1))); !deep {
		t.Fatal("too deep (unterminated) not reported")
	}
}

// TestResultAtMatchesGJSON: every value ResultAt reads is the one gjson reads.
func TestResultAtMatchesGJSON(t *testing.T) {
	for _, s := range scanSeeds {
		if !gjson.Valid(s) {
			continue
		}
		b := []byte(s)
		arena := NewArena(len(b))
		var walk func(r gjson.Result)
		walk = func(r gjson.Result) {
			got, end := ResultAt(b, s, r.Index)
			if got.Type != r.Type || got.Raw != r.Raw || got.Str != r.Str || end != r.Index+len(r.Raw) {
				t.Fatalf("%s at %d: got %+v end %d, gjson %+v", s, r.Index, got, end, r)
			}
			if got, _ := ResultIn(b, s, r.Index, arena); got.Str != r.Str {
				t.Fatalf("%s at %d: decoded in the arena %q, gjson %q", s, r.Index, got.Str, r.Str)
			}
			if r.IsArray() || r.IsObject() {
				r.ForEach(func(_, v gjson.Result) bool { walk(v); return true })
			}
		}
		root := gjson.Parse(s)
		root.Index = SkipWS(b, 0)
		root.Raw = strings.TrimRight(root.Raw, " \t\r\n")
		walk(root)
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > MaxDepth {
			return // gjson itself recurses on deep input
		}
		if ok, _ := Valid(b); ok != gjson.ValidBytes(b) {
			t.Fatalf("Valid(%q) = %v, gjson says %v", b, ok, !ok)
		}
		if ok, _ := Valid(b); ok {
			i := SkipWS(b, 0)
			r, end := ResultAt(b, string(b), i)
			if want := gjson.ParseBytes(b); r.Raw != strings.TrimRight(want.Raw, " \t\r\n") || r.Str != want.Str || SkipWS(b, end) != len(b) {
				t.Fatalf("ResultAt(%q) = %+v, gjson %+v", b, r, want)
			}
		}
	})
}

// TestSkipString: the end and the escape flag of strings with backslash runs before
// quotes, escapes first, last and in the first word, and a plain string.
func TestSkipString(t *testing.T) {
	tests := []struct {
		s       string // a valid JSON string, then a tail
		end     int
		escaped bool
	}{
		{`"plain text longer than a word",1`, 31, false},
		{`"a"`, 3, false},
		{`"\\"x"`, 4, true},
		{`"\\\"x",1`, 7, true},
		{`"ab\"cd\\\\\"ef\\"x"`, 18, true},
		{`"aaaaaaaaaaaaaaaaaaaaaaaaaa\\\\\\"x"`, 34, true},
		{`"{\"a\": \"b\\\\\", \"c\": 1}"]`, 30, true},
		{`"\u00e9"`, 8, true},
	}
	for _, tt := range tests {
		end, esc := SkipString([]byte(tt.s), 1)
		if end != tt.end || esc != tt.escaped {
			t.Errorf("SkipString(%s) = %d, %v; want %d, %v", tt.s, end, esc, tt.end, tt.escaped)
		}
		if r := gjson.Parse(tt.s[:tt.end]); r.Raw != tt.s[:tt.end] || r.Type != gjson.String {
			t.Errorf("%s: not one string (%q)", tt.s[:tt.end], r.Raw)
		}
	}
}

// FuzzReadUsage: on every valid value ReadUsage reads what UsageKeys.Read, gjson's
// walk, reads — duplicate keys, escaped keys, counts as strings, floats or objects,
// a value that is no object — and ends where the value does.
func FuzzReadUsage(f *testing.F) {
	for _, s := range []string{
		`{"prompt_tokens":4012,"completion_tokens":61,"total_tokens":4073,"prompt_tokens_details":{"cached_tokens":3840},"completion_tokens_details":{"reasoning_tokens":0}}`,
		`{"prompt_tokens":1,"prompt_tokens":2,"completion_tokens":"7"}`,
		`{"prompt\u005ftokens":3, "completion_tokens" : 1.9e2 }`,
		`{"completion_tokens":{"prompt_tokens":5},"prompt_tokens":true}`,
		`{"prompt_tokens":-3,"completion_tokens":1e400}`, `{}`, `[1,2]`, `null`, `"usage"`, `12`,
	} {
		f.Add([]byte(s))
	}
	k := protocol.UsageKeys{Input: "prompt_tokens", Output: "completion_tokens"}
	f.Fuzz(func(t *testing.T, b []byte) {
		if Validate(b) != nil {
			return
		}
		v := SkipWS(b, 0)
		js := string(b)
		got, end := ReadUsage(b, js, v, k)
		r, wantEnd := ResultAt(b, js, v)
		if want := k.Read(r); got != want || end != wantEnd {
			t.Fatalf("ReadUsage(%s) = %+v ending at %d, want %+v ending at %d", b, got, end, want, wantEnd)
		}
	})
}

// TestNumberMatchesParseFloat: the counts' fast parse gives strconv's value, and
// every other number goes to strconv.
func TestNumberMatchesParseFloat(t *testing.T) {
	for _, raw := range []string{"0", "7", "4012", "999999999999999", "1000000000000000", "9007199254740993",
		"-0", "-1", "1.5", "1e3", "1E+2", "0.0", "123456789012345678901234567890", "00", "-9007199254740993"} {
		want, _ := strconv.ParseFloat(raw, 64)
		if got := number(raw); math.Float64bits(got) != math.Float64bits(want) {
			t.Errorf("number(%s) = %v, ParseFloat %v", raw, got, want)
		}
	}
}

// FuzzControlAt: the word-at-a-time search finds the first control character, as a
// byte loop does; and Unquote decodes any valid string as gjson does.
func FuzzControlAt(f *testing.F) {
	for _, s := range []string{"", "abc", "abcdefgh\x1f", "\x00", "é\x01日本\x7f\x80\xff\x1e", "0123456789abcdef\n", "a\\n\x02b", `x\"y\u00e9\t`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := -1
		for i := 0; i < len(s); i++ {
			if s[i] < ' ' {
				want = i
				break
			}
		}
		if got := controlAt(s); got != want {
			t.Fatalf("controlAt(%q) = %d, want %d", s, got, want)
		}
		raw := `"` + s + `"`
		if ok, _ := Valid([]byte(raw)); ok {
			r := gjson.Parse(raw)
			if got := Unquote(raw); got != r.Str {
				t.Fatalf("Unquote(%q) = %q, gjson %q", raw, got, r.Str)
			}
			if got := NewArena(len(raw)).Unquote(raw); got != r.Str {
				t.Fatalf("Arena.Unquote(%q) = %q, gjson %q", raw, got, r.Str)
			}
		}
	})
}
