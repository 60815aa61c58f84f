package episode

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/camproxy/camproxy/protocol"
)

// The stable form of a long text is remembered: an agent resends the same system
// prompt and the same earlier messages on every call, and scanning them for volatile
// parts was most of a first turn's cost. It is remembered by blocks of lines
// (blockEnd), so that a text that differs from one seen before only in its last
// lines — a harness's system prompt tagged with its session, or with the day at its
// end — is scanned in its last block only. The memo is bounded (shards × slots × the
// longest text kept) and sharded so that calls do not queue behind one lock.
const (
	memoShards = 16
	memoSlots  = 16       // per shard; a full shard is emptied
	memoMinLen = 512      // shorter texts and blocks are scanned, not remembered
	memoMaxLen = 64 << 10 // longer texts are scanned, not remembered
)

type memoEntry struct {
	text, stable string
	same         bool // stable is text: nothing volatile in it
}

type stableMemo struct {
	shards [memoShards]struct {
		mu sync.Mutex
		m  map[uint64]memoEntry
	}
	scanned atomic.Int64 // bytes given to protocol.Stable: what the memo did not spare
}

// stable is protocol.Stable(text), remembered by block for texts of memoMinLen to
// memoMaxLen bytes.
func (s *stableMemo) stable(text string) string {
	if len(text) < memoMinLen || len(text) > memoMaxLen {
		return s.scan(text)
	}
	var b strings.Builder // unused until a block's stable form differs from it
	for start := 0; start < len(text); {
		end := blockEnd(text, start)
		blk := text[start:end]
		st, same := s.block(blk)
		if !same && b.Cap() == 0 {
			b.Grow(len(text) + 16)
			b.WriteString(text[:start])
		}
		if b.Cap() > 0 {
			b.WriteString(st)
		}
		start = end
	}
	if b.Cap() == 0 {
		return text // nothing volatile: no copy, as protocol.Stable
	}
	return b.String()
}

// blockEnd is the end of the block of text that starts at start: its first line end
// ('\n', kept in the block) at least memoMinLen bytes on, or the text's end. Stable
// of a text is the concatenation of Stable of its blocks: no volatile part spans a
// line end, nor is any recognised by looking past one (each is read a byte class at a
// time, none of which holds '\n', and a date phrase's rest of line stops at it), and
// what Stable looks at before a part's start ("10:00" after ':', a path after a
// letter) is never '\n', as at a text's start (TestStableBlocksAreStable,
// FuzzStableMemo).
func blockEnd(text string, start int) int {
	from := start + memoMinLen - 1
	if from >= len(text) {
		return len(text)
	}
	if i := strings.IndexByte(text[from:], '\n'); i >= 0 {
		return from + i + 1
	}
	return len(text)
}

// block is protocol.Stable(blk), remembered when blk is at least memoMinLen long, and
// whether it is blk (nothing volatile).
func (s *stableMemo) block(blk string) (string, bool) {
	if len(blk) < memoMinLen {
		out := s.scan(blk)
		return out, out == blk
	}
	h := xxhash.Sum64String(blk)
	sh := &s.shards[h%memoShards]
	sh.mu.Lock()
	e, ok := sh.m[h]
	sh.mu.Unlock()
	// A hit compares the whole block: a hash collision can only miss.
	if ok && e.text == blk {
		return e.stable, e.same
	}
	out := s.scan(blk)
	// Copies: blk usually points into a request body, which must not be kept alive.
	e = memoEntry{text: strings.Clone(blk), same: out == blk}
	e.stable = out
	if e.same {
		e.stable = e.text
	}
	sh.mu.Lock()
	if sh.m == nil || len(sh.m) >= memoSlots {
		sh.m = make(map[uint64]memoEntry, memoSlots)
	}
	sh.m[h] = e
	sh.mu.Unlock()
	return out, e.same
}

// scan is protocol.Stable, counted.
func (s *stableMemo) scan(text string) string {
	s.scanned.Add(int64(len(text)))
	return protocol.Stable(text)
}

// memo is the process's stable-text memo: 256 entries of at most 64 KiB (twice, with
// the stable form) at most. Like a sync.Pool it holds only what a pure function
// derives from its argument, so one per process is safe and nothing injects it.
var memo stableMemo
