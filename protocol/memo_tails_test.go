package protocol

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// A long element's tail key is filed in another shard than its entry, and that shard's
// generations turn over apart from the entry's: the tail index must not keep an entry
// the memo let go alive. Long elements whose entries all land in shard 0 (which turns
// over every couple of them) and whose tail keys land elsewhere (which never do): once
// collected, no evicted entry may still be reachable through the tails (with strong
// pointers, ~200 of them were: 20 MiB the memo's bound did not count; found in review).
func TestMemoTailsHoldNothing(t *testing.T) {
	m := NewMemo[int](MemoBytes)
	const size = 100 << 10
	base := make([]byte, size)
	for i := range base {
		base[i] = 'a' + byte(i%26)
	}
	base[0], base[size-1] = '"', '"'
	n := 0
	for c := 0; n < 200; c++ {
		raw := append([]byte(nil), base...)
		copy(raw[size-40:], fmt.Sprintf("%020d", c))
		if xxhash.Sum64(raw)%memoShards != 0 || tailKey(xxhash.Sum64(raw[:memoPrefix]), raw)%memoShards == 0 {
			continue
		}
		m.Read(raw, func(s string) int { return len(s) })
		n++
	}
	runtime.GC()
	runtime.GC()
	live := map[*memoEntry[int]]bool{}
	tails := 0
	for i := range m.shards {
		sh := &m.shards[i]
		for _, g := range []memoGen[int]{sh.cur, sh.old} {
			for _, e := range g.entries {
				live[e] = true
			}
			tails += len(g.tails)
		}
	}
	if tails < n/2 {
		t.Fatalf("%d tail keys filed for %d long elements: the test no longer exercises the tails", tails, n)
	}
	held := 0
	for i := range m.shards {
		sh := &m.shards[i]
		for _, g := range []memoGen[int]{sh.cur, sh.old} {
			for _, w := range g.tails {
				if e := w.Value(); e != nil && !live[e] {
					held++
				}
			}
		}
	}
	if held > 0 {
		t.Fatalf("after a GC the tail keys still reach %d entries the memo let go (%d live)", held, len(live))
	}
}
