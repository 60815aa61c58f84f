package episode

import (
	"context"
	"sync"
	"time"
)

// Memory is the in-process Store: one camproxy, a laptop. Entries idle out after the
// idle timeout; a sweeper bounds memory on long runs.
type Memory struct {
	idle time.Duration
	now  func() time.Time

	mu       sync.Mutex
	episodes map[string]*memEpisode
	tips     map[uint64]*memTip

	stop chan struct{}
	once sync.Once
}

type memEpisode struct {
	ep      Episode
	expires time.Time
}

type memTip struct {
	queue   []string // SetTips not yet claimed, oldest first
	last    string
	expires time.Time
}

// NewMemory returns a memory store whose entries expire after idle without use.
// now may be nil (time.Now).
func NewMemory(idle time.Duration, now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	m := &Memory{idle: idle, now: now, episodes: map[string]*memEpisode{}, tips: map[uint64]*memTip{}, stop: make(chan struct{})}
	go m.sweep()
	return m
}

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

func (m *Memory) expire() {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, e := range m.episodes {
		if now.After(e.expires) {
			delete(m.episodes, id)
		}
	}
	for h, t := range m.tips {
		if now.After(t.expires) {
			delete(m.tips, h)
		}
	}
}

// Len reports the live episodes and tips (for tests and leak checks).
func (m *Memory) Len() (episodes, tips int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.episodes), len(m.tips)
}

func (m *Memory) Get(_ context.Context, id string) (*Episode, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.episodes[id]
	if !ok || now.After(e.expires) {
		return nil, ErrNotFound
	}
	e.expires = now.Add(m.idle)
	cp := e.ep
	return &cp, nil
}

func (m *Memory) Create(_ context.Context, ep *Episode) (*Episode, bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.episodes[ep.ID]; ok && !now.After(e.expires) {
		cp := e.ep
		return &cp, false, nil
	}
	m.episodes[ep.ID] = &memEpisode{ep: *ep, expires: now.Add(m.idle)}
	cp := *ep
	return &cp, true, nil
}

func (m *Memory) Update(_ context.Context, ep *Episode) error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.episodes[ep.ID] = &memEpisode{ep: *ep, expires: now.Add(m.idle)}
	return nil
}

func (m *Memory) SetTip(_ context.Context, tip uint64, id string) error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tips[tip]
	if !ok || now.After(t.expires) {
		t = &memTip{}
		m.tips[tip] = t
	}
	t.queue = append(t.queue, id)
	t.last = id
	t.expires = now.Add(m.idle)
	return nil
}

func (m *Memory) Claim(_ context.Context, tips []uint64) (string, int, bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, h := range tips {
		t, ok := m.tips[h]
		if !ok || now.After(t.expires) {
			continue
		}
		if len(t.queue) > 0 {
			id := t.queue[0]
			t.queue = t.queue[1:]
			return id, i, true, nil
		}
		return t.last, i, true, nil
	}
	return "", 0, false, nil
}

func (m *Memory) Release(_ context.Context, tip uint64, id string) error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tips[tip]
	if !ok || now.After(t.expires) {
		t = &memTip{last: id}
		m.tips[tip] = t
	}
	t.queue = append([]string{id}, t.queue...)
	t.expires = now.Add(m.idle)
	return nil
}

func (m *Memory) Ping(context.Context) error { return nil }

func (m *Memory) Close() error {
	m.once.Do(func() { close(m.stop) })
	return nil
}
