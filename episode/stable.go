package episode

import (
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/camproxy/camproxy/protocol"
)

// The stable form of a long text is remembered: an agent resends the same system
// prompt and the same earlier messages on every call, and scanning them for volatile
// parts was most of a first turn's cost. The memo is bounded (shards × slots × the
// longest text kept) and sharded so that calls do not queue behind one lock.
const (
	memoShards = 16
	memoSlots  = 16       // per shard; a full shard is emptied
	memoMinLen = 512      // shorter texts are scanned, not remembered
	memoMaxLen = 64 << 10 // longer texts are scanned, not remembered
)

type memoEntry struct{ text, stable string }

type stableMemo struct {
	shards [memoShards]struct {
		mu sync.Mutex
		m  map[uint64]memoEntry
	}
}

// stable is protocol.Stable(text), remembered for texts of memoMinLen to memoMaxLen
// bytes.
func (s *stableMemo) stable(text string) string {
	if len(text) < memoMinLen || len(text) > memoMaxLen {
		return protocol.Stable(text)
	}
	h := xxhash.Sum64String(text)
	sh := &s.shards[h%memoShards]
	sh.mu.Lock()
	e, ok := sh.m[h]
	sh.mu.Unlock()
	// A hit compares the whole text: a hash collision can only miss.
	if ok && e.text == text {
		return e.stable
	}
	out := protocol.Stable(text)
	// Copies: text usually points into a request body, which must not be kept alive.
	e = memoEntry{text: strings.Clone(text)}
	if out == text {
		e.stable = e.text
	} else {
		e.stable = out
	}
	sh.mu.Lock()
	if sh.m == nil || len(sh.m) >= memoSlots {
		sh.m = make(map[uint64]memoEntry, memoSlots)
	}
	sh.m[h] = e
	sh.mu.Unlock()
	return out
}

// memo is the process's stable-text memo: 256 entries of at most 64 KiB (twice, with
// the stable form) at most. Like a sync.Pool it holds only what a pure function
// derives from its argument, so one per process is safe and nothing injects it.
var memo stableMemo
