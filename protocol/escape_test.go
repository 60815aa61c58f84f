package protocol

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// wantString is what AppendString must produce: encoding/json's string, without its
// HTML escaping (camproxy leaves <, > and & as they are).
func wantString(t testing.TB, s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	r := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&")
	return r.Replace(string(b))
}

// wantStringHTML is what AppendStringHTML must produce: encoding/json's string.
func wantStringHTML(t testing.TB, s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAppendStringMatchesEncodingJSON: the eight-byte fast path copies only what needs
// no escaping, wherever the byte that needs it falls in the word.
func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	special := []string{`"`, `\`, "\n", "\x00", "\x1f", "\x7f", "é", "\u2028", "\u2029", "\xff", "\xe2\x82", "<>&", "<", ">", "&", "&\n", "=", "'", " ", "~"}
	for _, sp := range special {
		for pre := range 17 {
			for _, post := range []int{0, 1, 7, 8, 9} {
				s := strings.Repeat("a", pre) + sp + strings.Repeat("z", post)
				if got, want := string(AppendString(nil, s)), wantString(t, s); got != want {
					t.Fatalf("AppendString(%q) = %s, want %s", s, got, want)
				}
				if got, want := string(AppendStringHTML(nil, s)), wantStringHTML(t, s); got != want {
					t.Fatalf("AppendStringHTML(%q) = %s, want %s", s, got, want)
				}
			}
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain ascii text of some length", "tab\there \"quoted\" back\\slash", "naïve – “quotes”", "\xff\xfe bad utf8", "line\u2028sep"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := AppendString(nil, s)
		if want := wantString(t, s); string(got) != want {
			t.Fatalf("AppendString(%q) = %s, want %s", s, got, want)
		}
		if got, want := AppendStringHTML(nil, s), wantStringHTML(t, s); string(got) != want {
			t.Fatalf("AppendStringHTML(%q) = %s, want %s", s, got, want)
		}
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("not JSON: %s: %v", got, err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("round trip %q → %q", s, back)
		}
	})
}

func BenchmarkAppendString(b *testing.B) {
	for name, s := range map[string]string{
		"prose": strings.Repeat("The customer would like to change the flight to a later date and keep the same cabin class. ", 40),
		"json":  strings.Repeat(`{"reservation_id": "ABC123", "status": "confirmed", "passengers": [{"first_name": "Mia"}]} `, 40),
	} {
		b.Run(name, func(b *testing.B) {
			buf := make([]byte, 0, 2*len(s))
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				buf = AppendString(buf[:0], s)
			}
		})
	}
}
