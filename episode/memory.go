package episode

import (
	"context"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// memShards is how many locks Memory spreads its episodes over, and its tips over
// (64: Claim tracks the tip shards it has looked at in one uint64).
const memShards = 64

// claimTries is how many times Claim looks without locking more than one shard before
// it locks every shard its tips fall in.
const claimTries = 4

// Memory is the in-process Store: one camproxy, a laptop. Entries idle out after the
// idle timeout; a sweeper bounds memory on long runs.
//
// Every call takes the store, so it is not one lock: episodes are sharded by a hash of
// their id, tips by the tip, each shard with its own lock, and the sweeper expires one
// shard at a time. Claim looks at several tips and must answer as if at one instant
// (see claim).
type Memory struct {
	idle time.Duration
	now  func() time.Time
	base time.Time // the clock's zero: expiries are nanoseconds since (see clock)
	seed maphash.Seed

	episodes [memShards]episodeShard
	tips     [memShards]tipShard

	// tries is claimTries; tests set 0 to take the all-shards path, and afterLook
	// to act between Claim's looks at two tips.
	tries     int
	afterLook func(pos int)

	stop chan struct{}
	once sync.Once
}

type episodeShard struct {
	mu sync.Mutex
	m  map[string]*memEpisode
	_  [48]byte // one shard to a cache line: neighbours' locks do not contend
}

type tipShard struct {
	mu sync.Mutex
	// gen counts the SetTips and Releases in this shard, the only writes that can make
	// a tip claimable (add it, or refresh an expired one). Bumped under mu, before the
	// write; read without mu by Claim to learn that a tip it found absent still is.
	gen atomic.Uint64
	// By value: a SetTip of a new tip, every finished turn's, allocates nothing and a
	// lookup reads no second cache line.
	m map[uint64]memTip
	_ [40]byte
}

type memEpisode struct {
	ep      Episode
	expires int64 // on the store's clock
}

// memTip is one tip's episodes. The SetTips (and Releases) not yet claimed are, oldest
// first, queue and then, when pending, last: the usual tip, set once and claimed
// once, holds no slice.
type memTip struct {
	queue   []string
	last    string // the latest SetTip's episode
	pending bool   // last is not yet claimed
	// expires is on the store's clock: 8 bytes, not a time.Time's 24, so that a tip
	// and its key fill one cache line of the map's table.
	expires int64
}

// NewMemory returns a memory store whose entries expire after idle without use.
// now may be nil (time.Now).
func NewMemory(idle time.Duration, now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	m := &Memory{idle: idle, now: now, base: now(), seed: maphash.MakeSeed(), tries: claimTries, stop: make(chan struct{})}
	for i := range memShards {
		m.episodes[i].m = map[string]*memEpisode{}
		m.tips[i].m = map[uint64]memTip{}
	}
	go m.sweep()
	return m
}

// clock reads now on the store's clock: nanoseconds since base, by the monotonic clock
// when now's readings carry it (time.Time.Sub), as time.Time's comparisons do.
func (m *Memory) clock() int64 { return int64(m.now().Sub(m.base)) }

// expiry is when an entry used at now (clock) expires: now + idle, saturated, so that
// an idle timeout of years ("never") does not wrap past the int64 clock into the past
// and expire every entry at once, as time.Time's Add does not.
func (m *Memory) expiry(now int64) int64 {
	if now > math.MaxInt64-int64(m.idle) {
		return math.MaxInt64
	}
	return now + int64(m.idle)
}

// Local reports that the store never waits on I/O: its callers need no deadline.
func (m *Memory) Local() bool { return true }

func (m *Memory) episodeShard(id string) *episodeShard {
	return &m.episodes[maphash.String(m.seed, id)%memShards]
}

// tipShardOf is the shard of a tip: its top bits after a multiplicative mix (a tip is
// already a hash, the mix only guards against a caller's regular values).
func tipShardOf(tip uint64) int { return int((tip * 0x9E3779B97F4A7C15) >> (64 - 6)) }

func (m *Memory) sweep() {
	period := max(m.idle/4, time.Second)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.expire()
		}
	}
}

// expire drops idle entries, one shard locked at a time.
func (m *Memory) expire() {
	now := m.clock()
	for i := range m.episodes {
		s := &m.episodes[i]
		s.mu.Lock()
		for id, e := range s.m {
			if now > e.expires {
				delete(s.m, id)
			}
		}
		s.mu.Unlock()
	}
	for i := range m.tips {
		s := &m.tips[i]
		s.mu.Lock()
		for h, t := range s.m {
			if now > t.expires {
				delete(s.m, h)
			}
		}
		s.mu.Unlock()
	}
}

// Len reports the live episodes and tips (for tests and leak checks).
func (m *Memory) Len() (episodes, tips int) {
	for i := range memShards {
		m.episodes[i].mu.Lock()
		episodes += len(m.episodes[i].m)
		m.episodes[i].mu.Unlock()
		m.tips[i].mu.Lock()
		tips += len(m.tips[i].m)
		m.tips[i].mu.Unlock()
	}
	return episodes, tips
}

func (m *Memory) Get(_ context.Context, id string) (*Episode, error) {
	var ep Episode
	if !m.read(id, &ep) {
		return nil, ErrNotFound
	}
	cp := ep // on the heap only when found
	return &cp, nil
}

// GetInto is Get into dst, the caller's: the data plane reads a call's episode into
// the call, without an allocation. dst is not changed when the episode is not found.
func (m *Memory) GetInto(_ context.Context, id string, dst *Episode) error {
	if !m.read(id, dst) {
		return ErrNotFound
	}
	return nil
}

// read copies the episode into dst and refreshes its idle timeout; false when there
// is none.
func (m *Memory) read(id string, dst *Episode) bool {
	now := m.clock()
	s := m.episodeShard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[id]
	if !ok || now > e.expires {
		return false
	}
	e.expires = m.expiry(now)
	*dst = e.ep
	return true
}

func (m *Memory) Create(_ context.Context, ep *Episode) (*Episode, bool, error) {
	now := m.clock()
	s := m.episodeShard(ep.ID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[ep.ID]; ok && now <= e.expires {
		cp := e.ep
		return &cp, false, nil
	}
	s.m[ep.ID] = &memEpisode{ep: *ep, expires: m.expiry(now)}
	cp := *ep
	return &cp, true, nil
}

func (m *Memory) Update(_ context.Context, ep *Episode) error {
	m.update(m.clock(), ep)
	return nil
}

func (m *Memory) update(now int64, ep *Episode) {
	s := m.episodeShard(ep.ID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[ep.ID]; ok {
		e.ep, e.expires = *ep, m.expiry(now) // in place: Get and Create hand out copies
		return
	}
	s.m[ep.ID] = &memEpisode{ep: *ep, expires: m.expiry(now)}
}

func (m *Memory) SetTip(_ context.Context, tip uint64, id string) error {
	m.setTip(m.clock(), tip, id)
	return nil
}

// Advance is Update(ep), then SetTip of each of tips to ep.ID, at one reading of the
// clock.
func (m *Memory) Advance(_ context.Context, ep *Episode, tips ...uint64) error {
	now := m.clock()
	m.update(now, ep)
	for _, tip := range tips {
		m.setTip(now, tip, ep.ID)
	}
	return nil
}

func (m *Memory) setTip(now int64, tip uint64, id string) {
	s := &m.tips[tipShardOf(tip)]
	s.mu.Lock()
	s.gen.Add(1)
	t, ok := s.m[tip]
	if !ok || now > t.expires {
		t = memTip{}
	}
	if t.pending {
		t.queue = append(t.queue, t.last)
	}
	t.last, t.pending = id, true
	t.expires = m.expiry(now)
	s.m[tip] = t
	s.mu.Unlock()
}

func (m *Memory) Claim(_ context.Context, tips []uint64) (string, int, bool, error) {
	now := m.clock()
	for range m.tries {
		if id, pos, ok, sure := m.claimLooking(now, tips); sure {
			return id, pos, ok, nil
		}
	}
	id, pos, ok := m.claimLocked(now, tips)
	return id, pos, ok, nil
}

// claimLooking is Claim as the one-lock store answered it — the first of tips known,
// its queue's head taken — while holding one shard at a time. It looks at the tips in
// order, noting each shard's gen as it finds a tip absent. The first tip it finds is
// claimed, still under its shard's lock, only if no gen noted has moved since: then
// every earlier tip is still absent (only SetTip and Release make one claimable), and
// the answer is the one-lock store's at that instant. Likewise for "none known". sure
// is false when a gen moved: the caller looks again.
func (m *Memory) claimLooking(now int64, tips []uint64) (id string, pos int, ok, sure bool) {
	var (
		looked uint64 // bit i: shard i noted in gens
		gens   [memShards]uint64
	)
	unmoved := func() bool {
		for l := looked; l != 0; l &= l - 1 {
			i := bits.TrailingZeros64(l)
			if m.tips[i].gen.Load() != gens[i] {
				return false
			}
		}
		return true
	}
	for i, h := range tips {
		si := tipShardOf(h)
		s := &m.tips[si]
		s.mu.Lock()
		g := s.gen.Load()
		if looked&(1<<si) != 0 && gens[si] != g {
			s.mu.Unlock()
			return "", 0, false, false
		}
		if t, found := s.m[h]; found && now <= t.expires {
			if !unmoved() {
				s.mu.Unlock()
				return "", 0, false, false
			}
			id = t.take()
			s.m[h] = t
			s.mu.Unlock()
			return id, i, true, true
		}
		s.mu.Unlock()
		looked |= 1 << si
		gens[si] = g
		if m.afterLook != nil {
			m.afterLook(i)
		}
	}
	return "", 0, false, unmoved()
}

// claimLocked is Claim holding every shard its tips fall in (locked in shard order,
// the only place more than one tip shard is held), for when claimLooking keeps
// seeing them move.
func (m *Memory) claimLocked(now int64, tips []uint64) (string, int, bool) {
	var held uint64
	for _, h := range tips {
		held |= 1 << tipShardOf(h)
	}
	for l := held; l != 0; l &= l - 1 {
		m.tips[bits.TrailingZeros64(l)].mu.Lock()
	}
	defer func() {
		for l := held; l != 0; l &= l - 1 {
			m.tips[bits.TrailingZeros64(l)].mu.Unlock()
		}
	}()
	for i, h := range tips {
		s := &m.tips[tipShardOf(h)]
		if t, ok := s.m[h]; ok && now <= t.expires {
			id := t.take()
			s.m[h] = t
			return id, i, true
		}
	}
	return "", 0, false
}

// take claims the oldest unclaimed SetTip, or the latest once all are claimed.
func (t *memTip) take() string {
	if len(t.queue) == 0 {
		t.pending = false
		return t.last
	}
	id := t.queue[0]
	if len(t.queue) == 1 {
		t.queue = t.queue[:0] // the next SetTip reuses the array
	} else {
		t.queue = t.queue[1:]
	}
	return id
}

func (m *Memory) Release(_ context.Context, tip uint64, id string) error {
	now := m.clock()
	s := &m.tips[tipShardOf(tip)]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen.Add(1)
	t, ok := s.m[tip]
	switch {
	case !ok || now > t.expires:
		t = memTip{last: id, pending: true} // the one claim, and the latest
	default:
		t.queue = append([]string{id}, t.queue...)
	}
	t.expires = m.expiry(now)
	s.m[tip] = t
	return nil
}

func (m *Memory) Ping(context.Context) error { return nil }

func (m *Memory) Close() error {
	m.once.Do(func() { close(m.stop) })
	return nil
}
