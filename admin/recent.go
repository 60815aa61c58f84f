package admin

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/camproxy/camproxy/episode"
)

// DefaultRecent is how many episodes NewRecent(0) remembers.
const DefaultRecent = 200

// recentTurns is how many turns of one episode Recent keeps (the last ones).
const recentTurns = 64

// recentShards spreads the episodes over this many locks: every finished call adds a
// turn, so one lock for all of them queues the request path behind itself.
const recentShards = 32

// Recent remembers the episodes this instance served, newest first, with a summary
// of each finished call. It is bounded: past its capacity the oldest episode is
// forgotten, and each episode keeps its last 64 turns. Safe for concurrent use.
//
// Episodes live in shards by a hash of their id, each with its own small lock; their
// order is a ring of cap slots, slot seq%cap holding the episode that started as the
// seq-th. A new episode takes the next seq and pushes out the one cap episodes older,
// so neither adding a turn nor starting an episode takes a lock shared by all calls.
type Recent struct {
	cap    int
	seed   maphash.Seed
	seq    atomic.Uint64 // how many episodes have started; the newest holds this seq
	ring   []atomic.Pointer[recentEpisode]
	shards [recentShards]recentShard
}

type recentShard struct {
	mu  sync.Mutex
	eps map[string]*recentEpisode
	_   [48]byte // a shard to a cache line: neighbours' locks do not contend
}

type recentEpisode struct {
	id  string
	seq uint64 // its place in the order of first turns; immutable

	// Guarded by the shard's lock.
	turns   []Turn // once full, a ring whose oldest turn is turns[head]
	head    int
	omitted int // older turns no longer kept
}

// NewRecent returns a Recent that remembers n episodes (0 = DefaultRecent).
func NewRecent(n int) *Recent {
	if n <= 0 {
		n = DefaultRecent
	}
	r := &Recent{cap: n, seed: maphash.MakeSeed(), ring: make([]atomic.Pointer[recentEpisode], n)}
	for i := range r.shards {
		r.shards[i].eps = map[string]*recentEpisode{}
	}
	return r
}

func (r *Recent) shard(id string) *recentShard {
	return &r.shards[maphash.String(r.seed, id)%recentShards]
}

// Record shows a finished turn of the data plane (it is one of proxy's recorders).
func (r *Recent) Record(t *episode.Turn) {
	if t.Episode.ID == "" {
		return
	}
	r.Add(t.Episode.ID, Turn{Turn: t.Index, Status: t.Status, Error: t.Error, AugmentMs: ms(t.Augment), TTFBMs: ms(t.TTFB),
		TotalMs: ms(t.Total), InputTokens: t.Usage.InputTokens, OutputTokens: t.Usage.OutputTokens, At: t.At})
}

// ms is a duration in milliseconds with microsecond precision, as steps record it.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// Add records a finished turn of episode id; the first turn seen makes it the newest
// episode.
func (r *Recent) Add(id string, t Turn) {
	sh := r.shard(id)
	sh.mu.Lock()
	if ep := sh.eps[id]; ep != nil {
		ep.add(t)
		sh.mu.Unlock()
		return
	}
	ep := &recentEpisode{id: id, seq: r.seq.Add(1), turns: make([]Turn, 0, 4)}
	ep.add(t)
	sh.eps[id] = ep
	sh.mu.Unlock()
	r.place(ep)
}

// place puts ep in its slot of the order and forgets the episode it replaces (cap
// episodes older). Two starts cap apart may race for a slot: the newer one wins, and
// the older is forgotten, as it would have been had they come in order.
func (r *Recent) place(ep *recentEpisode) {
	slot := &r.ring[ep.seq%uint64(r.cap)]
	for {
		old := slot.Load()
		if old != nil && old.seq > ep.seq {
			r.forget(ep)
			return
		}
		if slot.CompareAndSwap(old, ep) {
			if old != nil {
				r.forget(old)
			}
			return
		}
	}
}

func (r *Recent) forget(ep *recentEpisode) {
	sh := r.shard(ep.id)
	sh.mu.Lock()
	if sh.eps[ep.id] == ep { // not an episode that came back under the same id since
		delete(sh.eps, ep.id)
	}
	sh.mu.Unlock()
}

func (ep *recentEpisode) add(t Turn) {
	if len(ep.turns) < recentTurns {
		ep.turns = append(ep.turns, t)
		return
	}
	ep.turns[ep.head] = t
	ep.head = (ep.head + 1) % recentTurns
	ep.omitted++
}

// IDs returns up to n episode ids, newest first.
func (r *Recent) IDs(n int) []string {
	if n <= 0 {
		return []string{}
	}
	top := r.seq.Load()
	out := make([]string, 0, min(n, r.cap, int(min(top, uint64(r.cap)))))
	for s := top; s > 0 && s+uint64(r.cap) > top && len(out) < n; s-- {
		// A slot holding another seq is an episode started since (not ours to list
		// twice) or one not yet placed: either way not the s-th.
		if ep := r.ring[s%uint64(r.cap)].Load(); ep != nil && ep.seq == s {
			out = append(out, ep.id)
		}
	}
	return out
}

// Turns returns the turns kept for episode id, how many older ones were dropped, and
// whether the episode is known.
func (r *Recent) Turns(id string) ([]Turn, int, bool) {
	sh := r.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ep, ok := sh.eps[id]
	if !ok {
		return nil, 0, false
	}
	out := make([]Turn, 0, len(ep.turns))
	out = append(out, ep.turns[ep.head:]...)
	out = append(out, ep.turns[:ep.head]...)
	return out, ep.omitted, true
}
