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
		want := protocol.Stable(text)
		for i := range 3 {
			if got := m.stable(text); got != want {
				t.Fatalf("call %d on %.40q: got %.80q, want %.80q", i, text, got, want)
			}
		}
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
	f.Add("Today's date is 2025-10-20 in /tmp/a/b")
	f.Add("C:\\Users\\me\\repo 10:42:00 UTC")
	f.Fuzz(func(t *testing.T, s string) {
		var m stableMemo
		text := strings.Repeat("a ", memoMinLen/2) + s
		want := protocol.Stable(text)
		if got := m.stable(text); got != want {
			t.Fatalf("miss: %q != %q", got, want)
		}
		if got := m.stable(text); got != want {
			t.Fatalf("hit: %q != %q", got, want)
		}
	})
}
