package protocol

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

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
//
// Besides reading, a Memo finds where a remembered element ends without scanning it
// (Hits): each element remembers the hashes of the elements that followed it in the
// calls it was read from, and elements of memoPrefix bytes or more are indexed by
// their first memoPrefix bytes, so that at an element's start a walker guesses which
// remembered element it is, compares the bytes at memory speed and jumps past it.
// The second element of an array also remembers the arrays walked lately that went on
// from it (memoEntry.runs): a call that resends the previous call's history takes it
// from that run by comparing bytes alone, with no lookup per element.
type Memo[V any] struct {
	shards    [memoShards]memoShard[V]
	shardMax  int // bytes per generation of a shard
	maxLength int // longest raw remembered
	hits      sync.Pool
}

const (
	// memoPrefix is how many leading bytes index an element for Hits: enough to tell
	// most messages apart, few enough to hash in nanoseconds. Shorter elements are
	// found only as the successor of the element before them.
	memoPrefix = 64
	// memoWays is how many successors an element remembers, and how many elements
	// one prefix indexes: an episode's branches (retries, trials of one task).
	memoWays = 4
	// memoPrefixCost is what a prefix slot is accounted for.
	memoPrefixCost = 64
)

type memoShard[V any] struct {
	mu       sync.Mutex
	cur, old memoGen[V]
	// gen numbers cur: bumped (under mu) each time a new generation starts. An entry
	// stamped with it is in cur, known without the lock (Hits' runs, see live). It
	// sits in a cache line of its own: live reads it for every element a run gives,
	// and the line of mu and cur is written by every call that locks the shard.
	_   [64]byte
	gen atomic.Uint64
	_   [56]byte
}

// memoGen is one generation of a shard: the entries by the hash of their bytes, the
// hashes of the entries by the hash of their first memoPrefix bytes, and the long
// entries by their tail key (tailKey, memoLong).
type memoGen[V any] struct {
	entries map[uint64]*memoEntry[V]
	prefix  map[uint64][memoWays]uint64 // hash+1 of the entries, newest first; 0 empty
	// tails holds entries, not hashes: found by its tail key, an element costs one
	// lookup, not two. Weak pointers (memoEntry.self), as runs hold: a tail key is filed
	// in another shard than its entry, whose generations turn over apart from the
	// entry's, and a strong pointer kept an entry the memo had let go alive,
	// unaccounted, until that other shard turned over twice (TestMemoTailsHoldNothing).
	tails map[uint64]weak.Pointer[memoEntry[V]]
	bytes int
}

type memoEntry[V any] struct {
	raw  string
	hash uint64
	// gen is the shard's generation this entry was last put in (memoShard.gen). By
	// raw and hash, and v after it: a call reads the four of every element a run
	// gives it (matches, live, Take), and entries are cold; in one cache line, one
	// miss rather than two, most often.
	gen atomic.Uint64
	v   V
	// next holds hash+1 of the elements seen right after this one (0: none), a ring
	// written at nextAt. Hashes, not pointers: an entry that aged out of the memo
	// must not be kept alive by a link.
	next   [memoWays]atomic.Uint64
	nextAt atomic.Uint32
	// runs are the arrays walked lately that went on from this element (a ring
	// written at runAt): each call of an episode resends the one before it, so its
	// array goes on with the run the previous call left, compared entry by entry
	// without a lookup (Hits.Skip). An array's second element holds them: the first
	// is often a system prompt that many episodes share, more of them at once than
	// a ring holds, while the second (the task, or the first answer) mostly tells
	// them apart.
	runs  [memoWays]atomic.Pointer[memoRun[V]]
	runAt int // the next slot of runs written; runs are written under the shard's lock
	// runCost is the cost of runs, accounted as part of the entry's (see memoRun).
	runCost int
	// self is the entry's weak pointer, made once, which runs hold.
	self weak.Pointer[memoEntry[V]]
}

// memoRun is the elements of an array a walk read, in order, from one that holds
// the run: els[0] is that element. Weak pointers, unlike next's hashes, so that no
// lookup finds them, and a run keeps no element alive that the memo dropped (the
// memo's bound holds; the run's own cost, its pointers, is accounted with the entry
// that holds it). Skip takes an element of a run only while the memo holds it (live).
type memoRun[V any] struct {
	els  []weak.Pointer[memoEntry[V]]
	cost int
	// head is the length and the last bytes (memoTail at most) of els[1], the first
	// element a walk takes from the run: a run whose head does not end where the
	// array's next element would is passed over without being resolved. A copy: it
	// keeps no element's bytes alive.
	headLen  int
	headTail [memoTail]byte
	// resolved holds els[1:] as plain pointers (nil from the first element gone), in
	// an array that only this weak pointer reaches: Skip resolves the run through it
	// with one weak pointer rather than one per element (each costs tens of
	// nanoseconds, more while the GC marks). Nothing holds the array strongly, so a
	// GC cycle frees it, and with it every entry that only it held: it keeps no
	// element alive longer than els' weak pointers do. Made with the run from the
	// entries the walk held, and again by the first Skip that finds it gone (the
	// runs of a conversation that many episodes replay outlive many GC cycles).
	resolved atomic.Pointer[weak.Pointer[*memoEntry[V]]]
}

// resolve returns the elements of r after the one that holds it (els[1:]), nil
// from the first the GC freed, through r.resolved, which it makes again when the
// GC freed it.
func (r *memoRun[V]) resolve() []*memoEntry[V] {
	n := len(r.els) - 1
	if w := r.resolved.Load(); w != nil {
		if p := w.Value(); p != nil {
			return unsafe.Slice(p, n)
		}
	}
	xs := make([]*memoEntry[V], n)
	for k := range xs {
		if xs[k] = r.els[k+1].Value(); xs[k] == nil {
			break
		}
	}
	r.keep(xs)
	return xs
}

// keep makes xs, els[1:] resolved, r's resolved array.
func (r *memoRun[V]) keep(xs []*memoEntry[V]) {
	w := weak.Make(&xs[0])
	r.resolved.Store(&w)
}

// runFrom is the index in its array of the element whose runs are tried and left
// (see memoEntry.runs).
const runFrom = 1

// NewMemo returns a memo that accounts for at most maxBytes (see MemoBytes).
func NewMemo[V any](maxBytes int) *Memo[V] {
	shardMax := maxBytes / memoShards / 2
	// An entry fits in a generation: the bound holds whatever is read.
	return &Memo[V]{shardMax: shardMax, maxLength: min(MemoMaxElement, (shardMax-memoOverhead-memoPrefixCost)/2)}
}

// Read returns read(s) where s holds raw's bytes, remembered: raw seen before returns
// the value read then. read gets its own copy of raw, never raw itself, so what it
// returns may alias s but never the caller's buffer (a request body that the server
// reuses). A hit compares the bytes: a hash collision can only miss.
func (m *Memo[V]) Read(raw []byte, read func(s string) V) V {
	if e := m.read(raw, read); e != nil {
		return e.v
	}
	return read(string(raw))
}

// read is Read's entry; nil when raw is too long to remember.
func (m *Memo[V]) read(raw []byte, read func(s string) V) *memoEntry[V] {
	if len(raw) > m.maxLength {
		return nil
	}
	h := xxhash.Sum64(raw)
	if e := m.get(h); e != nil && e.raw == string(raw) {
		// Remembered, but the walk did not find it (Hits.Skip): its prefix slot aged
		// out while the entry stayed in use. Filed again, or no call would find it
		// without a scan again, nor the elements after it.
		if len(raw) >= memoPrefix {
			m.index(raw, e)
		}
		return e
	}
	s := string(raw)
	e := &memoEntry[V]{raw: s, hash: h, v: read(s)}
	e.self = weak.Make(e)
	sh := &m.shards[h%memoShards]
	sh.mu.Lock()
	sh.add(e, m.shardMax)
	sh.mu.Unlock()
	if len(raw) >= memoPrefix {
		m.index(raw, e)
	}
	return e
}

// index files the entry e, whose bytes are raw, under its first memoPrefix bytes, and
// a long one also under its tail key (tailKey).
func (m *Memo[V]) index(raw []byte, e *memoEntry[V]) {
	p := xxhash.Sum64(raw[:memoPrefix])
	m.file(p, e.hash)
	if len(raw) >= memoLong {
		m.fileTail(tailKey(p, raw), e)
	}
}

// fileTail files the long entry e under its tail key k.
func (m *Memo[V]) fileTail(k uint64, e *memoEntry[V]) {
	sh := &m.shards[k%memoShards]
	sh.mu.Lock()
	if _, ok := sh.cur.tails[k]; !ok {
		sh.room(memoPrefixCost, m.shardMax)
		sh.cur.bytes += memoPrefixCost
	}
	sh.cur.tails[k] = e.self
	sh.mu.Unlock()
}

// file files the entry of hash h under the hash k of its first memoPrefix bytes.
func (m *Memo[V]) file(k, h uint64) {
	sh := &m.shards[k%memoShards]
	sh.mu.Lock()
	sh.index(k, h, m.shardMax)
	sh.mu.Unlock()
}

// filed returns what the key k files: the hashes+1 under a prefix's hash (see
// memoGen.prefix), or with tail the entry under a tail key; and whether the current
// generation holds them (else the older does, or neither).
func (m *Memo[V]) filed(k uint64, tail bool) (ways [memoWays]uint64, e *memoEntry[V], cur bool) {
	sh := &m.shards[k%memoShards]
	var w weak.Pointer[memoEntry[V]]
	sh.mu.Lock()
	if tail {
		if w, cur = sh.cur.tails[k]; !cur {
			w = sh.old.tails[k]
		}
	} else if ways, cur = sh.cur.prefix[k]; !cur {
		ways = sh.old.prefix[k]
	}
	sh.mu.Unlock()
	return ways, w.Value(), cur
}

// memoLong is the length from which an element is also filed under its tail key: a
// system prompt that the sessions of a harness share up to a tag of their own at its
// end, more of them at once than a prefix indexes (memoWays), is found by its length
// and last bytes rather than by hashing all of it (kilobytes) on every call.
const memoLong = 1024

// tailKey is the key a long element (raw, whose first memoPrefix bytes hash to p) is
// also filed under: its prefix's hash, its length and its last memoPrefix bytes. A
// different element of the same key is told apart by its bytes, as any candidate is.
func tailKey(p uint64, raw []byte) uint64 {
	return xxhash.Sum64(raw[len(raw)-memoPrefix:]) ^ (p+uint64(len(raw)))*0x9e3779b97f4a7c15
}

// get returns the entry of hash h, if any (its bytes are the caller's to compare).
func (m *Memo[V]) get(h uint64) *memoEntry[V] {
	sh := &m.shards[h%memoShards]
	sh.mu.Lock()
	e := sh.cur.entries[h]
	if e == nil {
		if e = sh.old.entries[h]; e != nil {
			sh.add(e, m.shardMax) // still in use: into the current generation
		}
	}
	sh.mu.Unlock()
	return e
}

// add puts e into the current generation, starting a new one when it is full.
func (sh *memoShard[V]) add(e *memoEntry[V], limit int) {
	cost := memoCost(e.raw) + e.runCost
	sh.room(cost, limit)
	if prev, ok := sh.cur.entries[e.hash]; ok {
		sh.cur.bytes -= memoCost(prev.raw) + prev.runCost
	}
	sh.cur.entries[e.hash] = e
	sh.cur.bytes += cost
	e.gen.Store(sh.gen.Load())
}

// index files the entry of hash h under the hash p of its first memoPrefix bytes.
func (sh *memoShard[V]) index(p, h uint64, limit int) {
	ways, ok := sh.cur.prefix[p]
	if !ok {
		sh.room(memoPrefixCost, limit)
		ways = sh.old.prefix[p] // what the older generation indexed, carried over
		sh.cur.bytes += memoPrefixCost
	}
	if ways[0] == h+1 {
		sh.cur.prefix[p] = ways
		return
	}
	// Newest first; h moves to the front if it was there already.
	next := [memoWays]uint64{h + 1}
	n := 1
	for _, w := range ways {
		if w != 0 && w != h+1 && n < memoWays {
			next[n] = w
			n++
		}
	}
	sh.cur.prefix[p] = next
}

// room makes room for cost bytes in the current generation, starting a new one when
// it is full; it reports whether it started one.
func (sh *memoShard[V]) room(cost, limit int) bool {
	if sh.cur.entries != nil && sh.cur.bytes+cost <= limit {
		return false
	}
	sh.old = sh.cur
	sh.gen.Add(1)
	sh.cur = memoGen[V]{entries: make(map[uint64]*memoEntry[V]), prefix: make(map[uint64][memoWays]uint64),
		tails: make(map[uint64]weak.Pointer[memoEntry[V]])}
	return true
}

func memoCost(raw string) int { return 2*len(raw) + memoOverhead }

// Bytes is what the memo accounts for now: never more than the bound it was made
// with.
func (m *Memo[V]) Bytes() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += sh.cur.bytes + sh.old.bytes
		sh.mu.Unlock()
	}
	return n
}

// link remembers that next followed e.
func (e *memoEntry[V]) link(next *memoEntry[V]) {
	if e == nil || next == nil {
		return
	}
	for i := range e.next {
		if e.next[i].Load() == next.hash+1 {
			return
		}
	}
	// A race between two calls may overwrite a slot another just wrote: a link lost
	// costs one element read the slow way, never a wrong one.
	e.next[(e.nextAt.Add(1)-1)%memoWays].Store(next.hash + 1)
}

// at returns the entry whose bytes b holds at offset i, followed by whitespace and
// then ',' or ']' (the end of an array element: a number remembered as "12" is not
// the start of "123"); its successors of prev are tried first, then the entries
// indexed by the bytes' prefix. nil when none matches: the caller scans.
func (m *Memo[V]) at(b []byte, i int, prev *memoEntry[V], skip func([]byte, int) int) *memoEntry[V] {
	if prev != nil {
		for k := range prev.next {
			if h := prev.next[k].Load(); h != 0 {
				if e := m.get(h - 1); e != nil && matches(b, i, e.raw) {
					return e
				}
			}
		}
	}
	if len(b)-i < memoPrefix || m.maxLength < memoPrefix {
		return nil
	}
	p := xxhash.Sum64(b[i : i+memoPrefix])
	ways, _, cur := m.filed(p, false)
	// A prefix that indexes memoWays elements may be shared by many more (the
	// sessions of a harness, each with its own tag, see below), and each way tried
	// costs a lookup that misses the cache: of a full prefix, a long element is
	// looked up by its tail key, a shorter one tries only the newest way (the session
	// that sent last, often this one), before the hash of the bytes, which finds any
	// of them.
	key, tries := p, ways[:]
	end, long := 0, false
	full := skip != nil && ways[memoWays-1] != 0
	if full {
		if end = skip(b, i); end-i > m.maxLength || end-i < memoPrefix {
			return nil
		}
		tries = ways[:1]
		if long = end-i >= memoLong; long {
			key = tailKey(p, b[i:end])
			_, e, cur := m.filed(key, true)
			if e != nil && matches(b, i, e.raw) && m.live(e) {
				if !cur { // found in the older generation: carried into the current one, as get carries entries
					m.fileTail(key, e)
				}
				return e
			}
			tries = nil
		}
	}
	for _, h := range tries {
		if h == 0 {
			break
		}
		if e := m.get(h - 1); e != nil && matches(b, i, e.raw) {
			if !cur { // found in the older generation: carried into the current one, as get carries entries
				m.file(key, e.hash)
			}
			return e
		}
	}
	if ways[0] == 0 || skip == nil {
		return nil
	}
	// Elements share the prefix, but none it indexes is this one: the sessions of one
	// harness open with one system prompt up to a tag of their own, more of them at
	// once than a prefix indexes (memoWays). Looked up by the hash of its bytes up to
	// where it seems to end: cheaper than validating it, which a miss costs.
	if !full {
		if end = skip(b, i); end-i > m.maxLength || end-i < memoPrefix {
			return nil
		}
	}
	e := m.get(xxhash.Sum64(b[i:end]))
	if e == nil || !matches(b, i, e.raw) {
		return nil
	}
	if long { // remembered, but its tail key aged out: filed again for the next call
		m.fileTail(key, e)
	}
	return e
}

// matches reports whether b holds raw at offset i, then (after whitespace) ',' or ']'.
// The cheap tests go first: what follows the element, then its last bytes (ends). A
// candidate that is not the element mostly differs there (a remembered system
// prompt whose session tag at its end differs, a longer or shorter message), and
// comparing it whole first would read kilobytes to find that out.
func matches(b []byte, i int, raw string) bool {
	tail := max(0, len(raw)-memoTail)
	return ends(b, i, len(raw), raw[tail:]) && string(b[i:i+tail]) == raw[:tail]
}

// ends reports whether an element of n bytes at b[i] would be followed (after
// whitespace) by ',' or ']', and end with tail.
func ends[T string | []byte](b []byte, i, n int, tail T) bool {
	end := i + n
	if i < 0 || end > len(b) {
		return false
	}
	k := end
	for ; k < len(b); k++ {
		switch b[k] {
		case ' ', '\t', '\n', '\r':
			continue
		case ',', ']':
		default:
			return false
		}
		break
	}
	return k < len(b) && string(b[end-len(tail):end]) == string(tail)
}

// memoTail is how many last bytes matches compares before the rest.
const memoTail = 16

// Hits is one call's use of a Memo: it vouches, during validation, for the elements
// the memo holds (Skip: their bytes are those of an element validated before), then
// gives them to the walk that reads the messages (Take) without scanning them again.
// Get one with Memo.Hits; Release it when the call's parse is done.
type Hits[V any] struct {
	m    *Memo[V]
	at   []memoHit[V]  // elements vouched for, in offset order
	k    int           // the first of at not yet taken
	prev *memoEntry[V] // Skip's previous element, when it was found
	last *memoEntry[V] // the walk's previous element, when remembered
	// walked holds what Next read since Begin: the elements of the array walked last
	// (on a duplicate key, the last array is the one a decoder keeps); walkedE their
	// entries (nil: too long to remember), left as runs at Release.
	walked  []Placed[V]
	walkedE []*memoEntry[V]
	n       int // elements of Skip's array so far
	// lookups counts the elements Skip looked up one by one, ran those it took from
	// a run (tests: a resent history is taken whole).
	lookups, ran int
}

// Placed is one element of an array as a walk read it: its value, and where it sits
// in the body (At, its first byte; End, the offset after it).
type Placed[V any] struct {
	V       V
	At, End int
}

type memoHit[V any] struct {
	i, end int
	e      *memoEntry[V]
}

// Hits returns a Hits for one call.
func (m *Memo[V]) Hits() *Hits[V] {
	h, _ := m.hits.Get().(*Hits[V])
	if h == nil {
		h = &Hits[V]{m: m}
	}
	return h
}

// Release returns h to its memo; h must not be used after.
func (h *Hits[V]) Release() {
	h.m.remember(h.walkedE)
	clear(h.at)
	clear(h.walked)
	clear(h.walkedE)
	h.at, h.k, h.prev, h.last, h.walked, h.walkedE = h.at[:0], 0, nil, nil, h.walked[:0], h.walkedE[:0]
	h.n, h.lookups, h.ran = 0, 0, 0
	h.m.hits.Put(h)
}

// Skip returns the offset after the element that starts at b[i] when the memo holds
// its bytes, else -1; first says that it is the first element of its array. It is
// jsontext.Skipper: the validator calls it at each element of a top-level member's
// array. The memo holds only elements of validated bodies, read at that same depth,
// so an element whose bytes it holds is valid JSON and valid UTF-8. skip, when not
// nil, guesses where a value of bytes not validated yet ends (jsontext.SkipValue:
// bounded on any bytes, and only a guess until the bytes compare equal).
func (h *Hits[V]) Skip(b []byte, i int, first bool, skip func([]byte, int) int) int {
	if first {
		h.prev, h.n = nil, 0
	}
	h.n++
	h.lookups++
	e := h.m.at(b, i, h.prev, skip)
	h.prev = e
	if e == nil {
		return -1
	}
	end := i + len(e.raw)
	h.at = append(h.at, memoHit[V]{i: i, end: end, e: e})
	if h.n == runFrom+1 {
		end = h.follow(b, end, e)
	}
	return end
}

// follow takes, after the element e that ends at b[end], the longest stretch of the
// elements that followed e in a run of e's which b holds next: each compared by its
// bytes as at compares one, separated from the one before by ',' and whitespace only,
// so that the stretch is as valid as its elements are. It returns the offset after
// the last element taken (end when none is).
func (h *Hits[V]) follow(b []byte, end int, e *memoEntry[V]) int {
	var best []*memoEntry[V] // the longest stretch so far, a prefix of its run's elements
	next := nextElement(b, end)
	for k := range e.runs {
		r := e.runs[k].Load()
		// Resolving a run costs a weak pointer's Value: passed over when it cannot
		// beat the best, or does not go on with the array's next element.
		if r == nil || len(r.els)-1 <= len(best) || !ends(b, next, r.headLen, r.headTail[:min(r.headLen, memoTail)]) {
			continue
		}
		els := r.resolve()
		n := 0
		for p := end; n < len(els); n++ {
			x := els[n]
			if x == nil {
				break
			}
			i := nextElement(b, p)
			if i < 0 || !matches(b, i, x.raw) {
				break
			}
			p = i + len(x.raw)
		}
		if n > len(best) {
			best = els[:n]
		}
		if n == len(els) && n > 0 {
			break // all of it: the previous call of the episode, the usual case
		}
	}
	for _, x := range best {
		if !h.m.live(x) {
			break
		}
		i := nextElement(b, end)
		end = i + len(x.raw)
		h.at = append(h.at, memoHit[V]{i: i, end: end, e: x})
		h.prev = x
		h.n++
		h.ran++
	}
	return end
}

// nextElement returns where the array element after the one that ends at b[end]
// starts: past whitespace, ',' and whitespace; -1 when b does not go on so.
func nextElement(b []byte, end int) int {
	k := skipWS(b, end)
	if k >= len(b) || b[k] != ',' {
		return -1
	}
	return skipWS(b, k+1)
}

func skipWS(b []byte, i int) int {
	for ; i < len(b); i++ {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return i
		}
	}
	return i
}

// live reports whether the memo still holds e, carrying it into its shard's current
// generation as get does: a run's element is taken only while it does, so that
// runs keep nothing alive the memo no longer accounts for, and an element taken
// from runs alone stays in the memo as one looked up would.
func (m *Memo[V]) live(e *memoEntry[V]) bool {
	if e.gen.Load() == m.shards[e.hash%memoShards].gen.Load() {
		return true
	}
	return m.get(e.hash) == e
}

// remember leaves els, the entries of an array walked (nil: an element too long to
// remember, which ends the run), as a run of the element at runFrom. A run that it
// already holds whole is not left again (a call that resent only what the one
// before it sent), and a run replaces one it extends (the previous call of the
// episode): the ring keeps other episodes' runs.
func (m *Memo[V]) remember(els []*memoEntry[V]) {
	if len(els) < runFrom+2 {
		return
	}
	els = els[runFrom:]
	n := 0
	for n < len(els) && els[n] != nil {
		n++
	}
	if n < 2 || els[0].holds(els[:n]) {
		return
	}
	r := &memoRun[V]{els: make([]weak.Pointer[memoEntry[V]], n), cost: memoRunCost + n*memoRunSlot}
	for i, x := range els[:n] {
		r.els[i] = x.self
	}
	r.headLen = len(els[1].raw)
	copy(r.headTail[:], els[1].raw[max(0, r.headLen-memoTail):])
	r.keep(slices.Clone(els[1:n]))
	m.addRun(els[0], r)
}

// A run is accounted for memoRunCost, and memoRunSlot per element.
const (
	memoRunCost = 64
	memoRunSlot = 8
)

// holds reports whether a run of e's begins with els.
func (e *memoEntry[V]) holds(els []*memoEntry[V]) bool {
	for k := range e.runs {
		r := e.runs[k].Load()
		if r == nil || len(r.els) < len(els) {
			continue
		}
		i := 0
		for i < len(els) && r.els[i] == els[i].self {
			i++
		}
		if i == len(els) {
			return true
		}
	}
	return false
}

// prefixOf reports whether a begins b.
func prefixOf[T comparable](a, b []T) bool {
	return len(a) <= len(b) && slices.Equal(a, b[:len(a)])
}

// addRun puts r among e's runs, in place of one r extends, else in the ring's next
// slot, and accounts for it: e is filed again at its new cost, as if read anew. An
// entry the memo no longer holds gets no run (it would be accounted nowhere), nor
// does one whose cost would outgrow a generation.
func (m *Memo[V]) addRun(e *memoEntry[V], r *memoRun[V]) {
	sh := &m.shards[e.hash%memoShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	in := sh.cur.entries[e.hash] == e
	if !in && sh.old.entries[e.hash] != e {
		return
	}
	k := -1
	for j := range e.runs {
		if old := e.runs[j].Load(); old != nil && prefixOf(old.els, r.els) {
			k = j
			break
		}
	}
	if k < 0 {
		k = e.runAt
		e.runAt = (e.runAt + 1) % memoWays
	}
	oldCost := 0
	if old := e.runs[k].Load(); old != nil {
		oldCost = old.cost
	}
	if memoCost(e.raw)+e.runCost-oldCost+r.cost > m.shardMax {
		return
	}
	if in { // its charge in cur is made again below, at the new cost
		sh.cur.bytes -= memoCost(e.raw) + e.runCost
		delete(sh.cur.entries, e.hash)
	}
	e.runs[k].Store(r)
	e.runCost += r.cost - oldCost
	sh.add(e, m.shardMax)
}

// Begin starts the walk of an array's elements (Next, or Take and Read, in order).
func (h *Hits[V]) Begin() {
	clear(h.walked)
	clear(h.walkedE)
	h.last, h.walked, h.walkedE = nil, h.walked[:0], h.walkedE[:0]
}

// Next reads the walk's next element, at b[i]: the value Skip vouched for without
// looking at its bytes again, else read (Read) from a copy of the bytes up to
// skip(b, i), the offset after the element (jsontext.SkipValue: this package does not
// scan JSON). It appends the element to Walked and returns the offset after it.
func (h *Hits[V]) Next(b []byte, i int, skip func([]byte, int) int, read func(s string) V) int {
	v, end, ok := h.Take(i)
	if !ok {
		end = skip(b, i)
		v = h.Read(b[i:end], read)
	}
	h.walked = append(h.walked, Placed[V]{V: v, At: i, End: end})
	h.walkedE = append(h.walkedE, h.last)
	return end
}

// Walked is what Next read since Begin, in order; it is h's until Release.
func (h *Hits[V]) Walked() []Placed[V] { return h.walked }

// Remembered reports whether the memo holds Walked()[k]: its value is the one every
// call that sends the same bytes gets (not one read for this call alone, too long to
// remember), and what is derived from it may be remembered on it.
func (h *Hits[V]) Remembered(k int) bool { return h.walkedE[k] != nil }

// An Element is what a remembered element of a messages array gives each call that
// sends it: the messages it normalises to (several when a wire message holds tool
// results, which the chat shape makes messages of their own) and one slot for each.
// Both are shared by every such call: read only.
type Element interface {
	Messages() ([]Message, []Slot)
}

// Collect sets v's Messages and Slots to head, when not nil (a top-level system
// prompt: no slot), then the messages of els in order. Each slice is allocated once,
// at its final length: the view outlives the call (the recorder keeps its messages),
// so they cannot come from a pool.
func Collect[E Element](v *View, head *Message, els []Placed[E]) {
	n := 0
	if head != nil {
		n++
	}
	for _, p := range els {
		m, _ := p.V.Messages()
		n += len(m)
	}
	v.Messages, v.Slots = nil, nil
	if n == 0 {
		return
	}
	v.Messages, v.Slots = make([]Message, 0, n), make([]*Slot, 0, n)
	if head != nil {
		v.Messages, v.Slots = append(v.Messages, *head), append(v.Slots, nil)
	}
	for _, p := range els {
		m, s := p.V.Messages()
		v.Messages = append(v.Messages, m...)
		for i := range s {
			v.Slots = append(v.Slots, &s[i])
		}
	}
}

// Take returns the value of the element at b[i] and the offset after it when Skip
// vouched for it; offsets must be asked in increasing order.
func (h *Hits[V]) Take(i int) (v V, end int, ok bool) {
	for h.k < len(h.at) && h.at[h.k].i < i {
		h.k++
	}
	if h.k == len(h.at) || h.at[h.k].i != i {
		return v, 0, false
	}
	e := h.at[h.k].e
	h.last.link(e)
	h.last = e
	return e.v, h.at[h.k].end, true
}

// Read is Memo.Read for the walk's next element, raw, which Take did not have: it
// remembers raw as the successor of the element before it.
func (h *Hits[V]) Read(raw []byte, read func(s string) V) V {
	e := h.m.read(raw, read)
	h.last.link(e)
	h.last = e
	if e == nil {
		return read(string(raw))
	}
	return e.v
}

// Slot remembers one value that a consumer derives from a message by a pure function
// of it: stitching's canonical digest (package episode). A View's Slots give each
// message read from remembered bytes the slot of that reading, shared with every
// later call that sends the same bytes, so the value is derived once per distinct
// message rather than once per call. It also remembers which side-call rules match
// the message (MatchSideCall).
type Slot struct {
	v    atomic.Uint64 // the value + 1; 0 while unknown
	side atomic.Pointer[sideHits]
}

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
