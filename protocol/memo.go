package protocol

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/tidwall/gjson"
)

// An agent resends its whole history on every call, so turn n of an episode carries
// the n-1 turns before it byte for byte. Reading every message again (and hashing its
// canonical form for stitching) made a call's cost grow with the episode (issue 17:
// turn 60 cost 10× turn 1). A Memo remembers what an adapter read from one element of
// a messages array by the element's raw bytes, so a call reads only the elements it
// has not sent before, and a Slot remembers what a consumer derived from a message.

// MemoBytes bounds the memory a Memo accounts for: its raw copies, the strings read
// from them and the values built, estimated per entry as twice its raw length plus
// memoOverhead. Each adapter has one Memo, so a process holds at most this much per
// wire protocol in use. At the tau-bench mean of ~500 bytes per message it holds
// about 25 000 messages: some 400 concurrent episodes of 60 turns.
const MemoBytes = 32 << 20

const (
	memoShards = 64
	// memoOverhead is a generous estimate of what an entry costs beyond its bytes:
	// the map slot, the entry, a Message and a Slot.
	memoOverhead = 256
	// MemoMaxElement is the largest element remembered; a longer one (an inline
	// image, a pasted file) is read every time: remembering it would evict many
	// messages that are resent more often.
	MemoMaxElement = 256 << 10
)

// Memo remembers read(raw) for raw byte strings: one element of a request's messages
// array. Safe for concurrent use; it is sharded, each shard behind its own lock, so
// calls do not queue behind one lock. Bounded by bytes (MemoBytes): each shard keeps
// two generations and drops the older when the newer is full, so an element resent on
// every call stays while one never seen again ages out.
//
// A value is shared by every call that reads the same bytes, and by every goroutine:
// it must not be modified once read returned it (its Slots excepted: they are atomic). Like a sync.Pool, a Memo holds only
// what a pure function derives from its argument, so one per adapter package is safe.
type Memo[V any] struct {
	shards    [memoShards]memoShard[V]
	shardMax  int // bytes per generation of a shard
	maxLength int // longest raw remembered
}

type memoShard[V any] struct {
	mu       sync.Mutex
	cur, old map[uint64]memoEntry[V]
	curBytes int
}

type memoEntry[V any] struct {
	raw string
	v   V
}

// NewMemo returns a memo that accounts for at most maxBytes (see MemoBytes).
func NewMemo[V any](maxBytes int) *Memo[V] {
	shardMax := maxBytes / memoShards / 2
	// An entry fits in a generation: the bound holds whatever is read.
	return &Memo[V]{shardMax: shardMax, maxLength: min(MemoMaxElement, (shardMax-memoOverhead)/2)}
}

// Read returns read(s) where s holds raw's bytes, remembered: raw seen before returns
// the value read then. read gets its own copy of raw, never raw itself, so what it
// returns may alias s but never the caller's buffer (a request body that the server
// reuses). A hit compares the bytes: a hash collision can only miss.
func (m *Memo[V]) Read(raw []byte, read func(s string) V) V {
	if len(raw) > m.maxLength {
		return read(string(raw))
	}
	h := xxhash.Sum64(raw)
	sh := &m.shards[h%memoShards]
	sh.mu.Lock()
	e, ok := sh.cur[h]
	if !ok {
		if e, ok = sh.old[h]; ok && e.raw == string(raw) {
			sh.add(h, e, m.shardMax) // still in use: into the current generation
		}
	}
	sh.mu.Unlock()
	if ok && e.raw == string(raw) {
		return e.v
	}
	s := string(raw)
	v := read(s)
	sh.mu.Lock()
	sh.add(h, memoEntry[V]{raw: s, v: v}, m.shardMax)
	sh.mu.Unlock()
	return v
}

// add puts e into the current generation, starting a new one when it is full.
func (sh *memoShard[V]) add(h uint64, e memoEntry[V], limit int) {
	cost := memoCost(e.raw)
	if sh.cur == nil || sh.curBytes+cost > limit {
		sh.old, sh.cur, sh.curBytes = sh.cur, make(map[uint64]memoEntry[V]), 0
	}
	if prev, ok := sh.cur[h]; ok {
		sh.curBytes -= memoCost(prev.raw)
	}
	sh.cur[h] = e
	sh.curBytes += cost
}

func memoCost(raw string) int { return 2*len(raw) + memoOverhead }

// Bytes is what the memo accounts for now: never more than the bound it was made
// with.
func (m *Memo[V]) Bytes() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += sh.curBytes
		for _, e := range sh.old {
			n += memoCost(e.raw)
		}
		sh.mu.Unlock()
	}
	return n
}

// Slot remembers one value that a consumer derives from a message by a pure function
// of it: stitching's canonical digest (package episode). A View's Slots give each
// message read from remembered bytes the slot of that reading, shared with every
// later call that sends the same bytes, so the value is derived once per distinct
// message rather than once per call.
type Slot struct{ v atomic.Uint64 } // the value + 1; 0 while unknown

// Load returns the value stored, if any.
func (s *Slot) Load() (uint64, bool) {
	v := s.v.Load()
	return v - 1, v != 0
}

// Store remembers v. (A value of 1<<64-1 is not remembered: it would read as unknown.)
func (s *Slot) Store(v uint64) { s.v.Store(v + 1) }

// Detach returns v read again from a copy of its bytes: the same value at the same
// offsets (its members' too), aliasing nothing of the body it was read from. For the
// few values of a body read in place, outside the memo, that a view keeps.
func Detach(v gjson.Result) gjson.Result {
	if !v.Exists() {
		return v
	}
	d := gjson.Parse(strings.Clone(v.Raw))
	d.Index = v.Index
	return d
}
