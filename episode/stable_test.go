package episode

import (
	"fmt"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
)

// The memo answers exactly what protocol.Stable does, on a miss and on every hit.
func TestStableMemoIsStable(t *testing.T) {
	var m stableMemo
	pad := strings.Repeat("Follow the airline policy exactly. ", 20)
	for _, text := range []string{
		"short 2025-10-20",
		pad + "Today's date is 2025-10-20. Work in /home/u/proj/x and session 4f9a1c2e-0b7d-4c1e-9a3b-2d1e0f9c8b7a.",
		pad + "nothing volatile here",
		strings.Repeat("x", memoMaxLen+1) + " 2025-10-20",
	} {
		sameAsStable(t, &m, text, 3)
	}
}

// The memo stays bounded whatever the traffic: a full shard is emptied.
func TestStableMemoBounded(t *testing.T) {
	var m stableMemo
	pad := strings.Repeat("p", memoMinLen)
	for i := range 10 * memoShards * memoSlots {
		m.stable(fmt.Sprintf("%s %d", pad, i))
	}
	n := 0
	for i := range m.shards {
		if l := len(m.shards[i].m); l > memoSlots {
			t.Fatalf("shard %d holds %d entries, bound %d", i, l, memoSlots)
		} else {
			n += l
		}
	}
	if n == 0 || n > memoShards*memoSlots {
		t.Fatalf("%d entries remembered", n)
	}
}

func FuzzStableMemo(f *testing.F) {
	f.Add("Today's date is 2025-10-20 in /tmp/a/b", uint16(0))
	f.Add("C:\\Users\\me\\repo 10:42:00 UTC", uint16(3))
	f.Add("at 10:42\nPM on Oct\n20 2025, /a\n/b ~\n/c Today's date:\n x\n", uint16(7))
	f.Add("2025-10-20\nT10:00\n4f9a1c2e-0b7d-4c1e-9a3b-2d1e0f9c8b7a\n-x\n", uint16(1))
	f.Fuzz(func(t *testing.T, s string, shift uint16) {
		var m stableMemo
		// Blocks end at line ends past memoMinLen bytes: the padding moves where, so
		// that block ends fall at every place of s, and s repeated makes several.
		pad := strings.Repeat("a ", memoMinLen/2)[:memoMinLen-1-int(shift)%memoMinLen]
		text := pad + s
		for len(text) < 3*memoMinLen && len(s) > 0 {
			text += s
		}
		want := protocol.Stable(text)
		if got := m.stable(text); got != want {
			t.Fatalf("miss: %q != %q", got, want)
		}
		if got := m.stable(text); got != want {
			t.Fatalf("hit: %q != %q", got, want)
		}
	})
}

// A long text's volatile parts are found whatever line they end or start, and
// wherever its blocks end: Stable of the blocks is Stable of the text.
func TestStableBlocksAreStable(t *testing.T) {
	parts := []string{"Today's date is 2025-10-20.", "Today's date is", "Current date:", "10:42", "PM", "Oct", "20 2025",
		"Monday, October 20, 2025", "/home/u/proj", "/x", "~", "/y", "C:", "\\Users\\me", "4f9a1c2e", "-0b7d-4c1e-9a3b-2d1e0f9c8b7a",
		"deadbeef1234", "sess_ABCD1234efgh5678ijkl", "word", "", " ", "\n", "2025-10-20", "T10:00:00Z", ":", "."}
	for i := 0; i < 4000; i++ {
		var b strings.Builder
		for b.Len() < 3*memoMinLen {
			b.WriteString(parts[(i*7+b.Len()*13)%len(parts)])
			if (i+b.Len())%3 == 0 {
				b.WriteByte('\n')
			} else {
				b.WriteByte(' ')
			}
		}
		text := b.String()
		sameAsStable(t, new(stableMemo), text, 2)
	}
}

// A system prompt that differs from one seen before only in its last line (a
// harness's session tag) is scanned in its last block only: every block before is
// remembered from the first prompt.
func TestStableMemoScansTheNewBlock(t *testing.T) {
	var m stableMemo
	var policy strings.Builder
	for i := 0; policy.Len() < 8<<10; i++ {
		fmt.Fprintf(&policy, "Rule %d: follow the airline policy; updated 2025-10-%02d in /srv/policy/r%d.\n", i, i%28+1, i)
	}
	first := policy.String() + "\nSession 1"
	if got, want := m.stable(first), protocol.Stable(first); got != want {
		t.Fatalf("first prompt: %q, want %q", got, want)
	}
	before := m.scanned.Load()
	second := policy.String() + "\nSession 2"
	if got, want := m.stable(second), protocol.Stable(second); got != want {
		t.Fatalf("second prompt: %q, want %q", got, want)
	}
	if n := m.scanned.Load() - before; n > 2*memoMinLen {
		t.Fatalf("the second prompt scanned %d of its %d bytes; only its last block (< %d) is new", n, len(second), 2*memoMinLen)
	}
}

// sameAsStable fails unless calls calls of m.stable(text) each give protocol.Stable(text).
func sameAsStable(t *testing.T, m *stableMemo, text string, calls int) {
	t.Helper()
	want := protocol.Stable(text)
	for k := range calls {
		if got := m.stable(text); got != want {
			t.Fatalf("call %d on %.40q: the memo's stable form differs from the text's\ngot  %.200q\nwant %.200q", k, text, got, want)
		}
	}
}
