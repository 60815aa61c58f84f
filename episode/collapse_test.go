package episode

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/openai"
)

// collapseReference is writeCollapsed as first written (one digest write per run):
// the buffered one must hash every text to the same value, or stored tips would no
// longer match.
func collapseReference(d *xxhash.Digest, s string, dropAll bool) {
	s = strings.TrimSpace(s)
	run := 0
	for i := 0; i < len(s); {
		c := s[i]
		n := 1
		space := asciiSpace[c]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			space, n = unicode.IsSpace(r), size
		}
		if !space {
			i += n
			continue
		}
		_, _ = d.WriteString(s[run:i])
		for i < len(s) {
			c, n = s[i], 1
			sp := asciiSpace[c]
			if c >= utf8.RuneSelf {
				r, size := utf8.DecodeRuneInString(s[i:])
				sp, n = unicode.IsSpace(r), size
			}
			if !sp {
				break
			}
			i += n
		}
		if !dropAll {
			_, _ = d.WriteString(" ")
		}
		run = i
	}
	_, _ = d.WriteString(s[run:])
}

func TestCollapseMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pieces := []string{"a", "word", " ", "  ", "\t", "\n\n", "\u00a0", "\u3000", "é", "日本", "\xff", "\x00", "\v", "{\"k\": 1}", strings.Repeat("x", 1500)}
	for range 3000 {
		var b strings.Builder
		for range rng.IntN(40) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		s := b.String()
		for _, drop := range []bool{false, true} {
			got, want := xxhash.New(), xxhash.New()
			writeCollapsed(got, s, drop)
			collapseReference(want, s, drop)
			if got.Sum64() != want.Sum64() {
				t.Fatalf("writeCollapsed(%q, %v) hashes differently", s, drop)
			}
		}
	}
}

// BenchmarkChain hashes the messages of a 16 KB airline conversation, as every
// header-less call does for stitching; BenchmarkChainReference does it with the
// unbuffered writeCollapsed, for a ratio measured in the same run.
func BenchmarkChain(b *testing.B)          { benchChain(b, writeCollapsed) }
func BenchmarkChainReference(b *testing.B) { benchChain(b, collapseReference) }

func benchChain(b *testing.B, collapse func(*xxhash.Digest, string, bool)) {
	raw, err := os.ReadFile("../protocol/openai/testdata/airline16k.json")
	if err != nil {
		b.Fatal(err)
	}
	req, err := openai.Parse(raw, protocol.DefaultTaskRules())
	if err != nil {
		b.Fatal(err)
	}
	msgs := req.Messages
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		var h uint64
		for i := range msgs {
			d := xxhash.New()
			var p [8]byte
			for k := range 8 {
				p[k] = byte(h >> (8 * k))
			}
			_, _ = d.Write(p[:])
			_, _ = d.WriteString(msgs[i].Role)
			collapse(d, msgs[i].Content, false)
			h = d.Sum64()
		}
	}
}

// FuzzAppendQuote: appendQuote spells every string as strconv.AppendQuote does: the
// canonical form of tool arguments, and so the digests of stored tips, is unchanged.
func FuzzAppendQuote(f *testing.F) {
	for _, s := range []string{"", "user_id", "a b", `say "hi"`, `back\slash`, "tab\t", "ü", "\x7f", "\x00", "\xff", "mia_li_3668"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := appendQuote([]byte("x"), s), strconv.AppendQuote([]byte("x"), s); string(got) != string(want) {
			t.Fatalf("appendQuote(%q) = %s, want %s", s, got, want)
		}
	})
}
