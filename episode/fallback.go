package episode

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// DefaultCooldown is how long Fallback skips the shared store after it failed.
const DefaultCooldown = 5 * time.Second

// Fallback keeps episodes working when the shared store (Redis) fails: every write
// also goes to a local Memory store, reads fall back to it, and after a failure the
// shared store is skipped for a cooldown, so a dead Redis costs one short deadline
// per cooldown rather than one per call. When the shared store answers again it is
// used again; episodes begun during the outage stay on this instance's local store
// until they idle out (another instance cannot see them: degraded, not broken).
type Fallback struct {
	shared   Store
	local    *Memory
	cooldown time.Duration
	now      func() time.Time
	onChange func(up bool, err error) // called when the shared store goes down or comes back

	downUntil atomic.Int64 // unix nanoseconds; 0 = up
}

// NewFallback wraps shared. onChange may be nil; now nil means time.Now.
func NewFallback(shared Store, local *Memory, cooldown time.Duration, now func() time.Time, onChange func(up bool, err error)) *Fallback {
	if now == nil {
		now = time.Now
	}
	if onChange == nil {
		onChange = func(bool, error) {}
	}
	if cooldown <= 0 {
		cooldown = DefaultCooldown
	}
	return &Fallback{shared: shared, local: local, cooldown: cooldown, now: now, onChange: onChange}
}

// Up reports whether the shared store is in use (not in a cooldown after a failure).
func (f *Fallback) Up() bool {
	d := f.downUntil.Load()
	return d == 0 || f.now().UnixNano() >= d
}

// result records the outcome of a shared-store call and reports whether it failed.
func (f *Fallback) result(err error) bool {
	if err == nil || errors.Is(err, ErrNotFound) {
		if f.downUntil.Swap(0) != 0 {
			f.onChange(true, nil)
		}
		return false
	}
	if f.downUntil.Swap(f.now().Add(f.cooldown).UnixNano()) == 0 {
		f.onChange(false, err)
	}
	return true
}

func (f *Fallback) Get(ctx context.Context, id string) (*Episode, error) {
	if f.Up() {
		ep, err := f.shared.Get(ctx, id)
		if !f.result(err) && err == nil {
			return ep, nil
		}
		// Not found there: it may have begun during an outage, on the local store.
	}
	return f.local.Get(ctx, id)
}

func (f *Fallback) Create(ctx context.Context, ep *Episode) (*Episode, bool, error) {
	if f.Up() {
		stored, created, err := f.shared.Create(ctx, ep)
		if !f.result(err) {
			_ = f.local.Update(ctx, stored) // mirror the winner: the local copy serves if Redis dies mid-episode
			return stored, created, nil
		}
	}
	return f.local.Create(ctx, ep)
}

func (f *Fallback) Update(ctx context.Context, ep *Episode) error {
	_ = f.local.Update(ctx, ep)
	if f.Up() {
		f.result(f.shared.Update(ctx, ep))
	}
	return nil
}

func (f *Fallback) SetTip(ctx context.Context, tip uint64, id string) error {
	_ = f.local.SetTip(ctx, tip, id)
	if f.Up() {
		f.result(f.shared.SetTip(ctx, tip, id))
	}
	return nil
}

// Advance writes the local store, then the shared one in one call (two round trips
// on Redis, whatever the tips). A shared store that fails it is skipped from then on,
// as after any failure; within the call, its tips are tried even when its Update failed
// (Redis.Advance makes both requests), under the same deadline.
func (f *Fallback) Advance(ctx context.Context, ep *Episode, tips ...uint64) error {
	_ = f.local.Advance(ctx, ep, tips...)
	if f.Up() {
		f.result(f.shared.Advance(ctx, ep, tips...))
	}
	return nil
}

func (f *Fallback) Claim(ctx context.Context, tips []uint64) (string, int, bool, error) {
	if f.Up() {
		id, pos, ok, err := f.shared.Claim(ctx, tips)
		if !f.result(err) && ok {
			_, _, _, _ = f.local.Claim(ctx, tips[pos:pos+1]) // keep the local queue in step
			return id, pos, ok, nil
		}
	}
	return f.local.Claim(ctx, tips)
}

func (f *Fallback) Release(ctx context.Context, tip uint64, id string) error {
	_ = f.local.Release(ctx, tip, id)
	if f.Up() {
		f.result(f.shared.Release(ctx, tip, id))
	}
	return nil
}

// Ping reports the shared store's state; the local store always works, so a
// caller deciding readiness should treat an error as degraded, not down.
func (f *Fallback) Ping(ctx context.Context) error { return f.shared.Ping(ctx) }

func (f *Fallback) Close() error {
	_ = f.local.Close()
	return f.shared.Close()
}
