package episode

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// refTips is the one-lock tip store Memory's shards replaced, kept as the model
// Claim, SetTip and Release must match.
type refTips struct {
	idle time.Duration
	tips map[uint64]*refTip
}

type refTip struct {
	queue   []string // SetTips not yet claimed, oldest first
	last    string
	expires time.Time
}

func (r *refTips) setTip(now time.Time, tip uint64, id string) {
	t, ok := r.tips[tip]
	if !ok || now.After(t.expires) {
		t = &refTip{}
		r.tips[tip] = t
	}
	t.queue = append(t.queue, id)
	t.last, t.expires = id, now.Add(r.idle)
}

func (r *refTips) release(now time.Time, tip uint64, id string) {
	t, ok := r.tips[tip]
	if !ok || now.After(t.expires) {
		t = &refTip{last: id}
		r.tips[tip] = t
	}
	t.queue = append([]string{id}, t.queue...)
	t.expires = now.Add(r.idle)
}

func (r *refTips) claim(now time.Time, tips []uint64) (string, int, bool) {
	for i, h := range tips {
		t, ok := r.tips[h]
		if !ok || now.After(t.expires) {
			continue
		}
		if len(t.queue) > 0 {
			id := t.queue[0]
			t.queue = t.queue[1:]
			return id, i, true
		}
		return t.last, i, true
	}
	return "", 0, false
}

func (r *refTips) expire(now time.Time) {
	for h, t := range r.tips {
		if now.After(t.expires) {
			delete(r.tips, h)
		}
	}
}

// TestMemoryClaimMatchesModel: long random runs of SetTip, Release, Claim (several
// tips, longest first), the clock moving and the sweeper, against the one-lock model,
// both by Claim's usual path and by its all-shards one.
func TestMemoryClaimMatchesModel(t *testing.T) {
	for _, c := range []struct {
		name  string
		tries int
		tips  uint64 // distinct tips used: few means many in one shard and long queues
	}{{"looking", claimTries, 12}, {"looking-many", claimTries, 300}, {"locked", 0, 12}, {"locked-many", 0, 300}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			now := time.Unix(1000, 0)
			m := NewMemory(time.Minute, func() time.Time { return now })
			defer m.Close()
			m.tries = c.tries
			ref := &refTips{idle: time.Minute, tips: map[uint64]*refTip{}}
			rng := rand.New(rand.NewPCG(c.tips, uint64(c.tries)))
			tip := func() uint64 { return rng.Uint64N(c.tips) * 0x2545F4914F6CDD1D }
			for step := range 5000 {
				switch op := rng.IntN(10); {
				case op < 3:
					h, id := tip(), fmt.Sprintf("ep-%d", step)
					_ = m.SetTip(ctx, h, id)
					ref.setTip(now, h, id)
				case op < 4:
					h, id := tip(), fmt.Sprintf("ep-r%d", step)
					_ = m.Release(ctx, h, id)
					ref.release(now, h, id)
				case op < 9:
					tips := make([]uint64, 1+rng.IntN(8))
					for i := range tips {
						tips[i] = tip()
					}
					id, pos, ok, err := m.Claim(ctx, tips)
					wid, wpos, wok := ref.claim(now, tips)
					if err != nil || id != wid || pos != wpos || ok != wok {
						t.Fatalf("step %d: Claim(%x) = %q %d %v %v, want %q %d %v", step, tips, id, pos, ok, err, wid, wpos, wok)
					}
				default:
					now = now.Add(time.Duration(rng.IntN(20)) * time.Second)
					if rng.IntN(2) == 0 {
						m.expire()
						ref.expire(now)
						if _, n := m.Len(); n != len(ref.tips) {
							t.Fatalf("step %d: %d tips after expiry, want %d", step, n, len(ref.tips))
						}
					}
				}
			}
		})
	}
}

// distinctShardTips returns n tips in n different shards.
func distinctShardTips(n int) []uint64 {
	var out []uint64
	seen := map[int]bool{}
	for h := uint64(1); len(out) < n; h++ {
		if s := tipShardOf(h * 0x51AF3D); !seen[s] {
			seen[s] = true
			out = append(out, h*0x51AF3D)
		}
	}
	return out
}

// TestMemoryClaimIsOneInstant: while Claim is between its look at tip a (absent) and
// its look at tip b, a is set and then b. No instant had b known and a not, so the
// one-lock store could only have answered a's episode; an answer of b's is two
// instants glued together. Both of Claim's paths: looking again, and locking all.
func TestMemoryClaimIsOneInstant(t *testing.T) {
	for _, tries := range []int{claimTries, 1} {
		t.Run(fmt.Sprint(tries), func(t *testing.T) {
			ctx := context.Background()
			m := NewMemory(time.Minute, nil)
			defer m.Close()
			m.tries = tries
			ts := distinctShardTips(2)
			a, b := ts[0], ts[1]
			var once sync.Once
			m.afterLook = func(pos int) {
				if pos == 0 {
					once.Do(func() {
						_ = m.SetTip(ctx, a, "ep-a")
						_ = m.SetTip(ctx, b, "ep-b")
					})
				}
			}
			id, pos, ok, err := m.Claim(ctx, []uint64{a, b})
			if err != nil || !ok || id != "ep-a" || pos != 0 {
				t.Fatalf("Claim = %q at %d (ok %v, err %v), want ep-a at 0", id, pos, ok, err)
			}
			if id, pos, _, _ := m.Claim(ctx, []uint64{b}); id != "ep-b" || pos != 0 {
				t.Fatalf("b's claim = %q at %d, want ep-b unclaimed", id, pos)
			}
		})
	}
}

// TestMemoryConcurrentClaims: parallel claims, each looking at unknown tips in other
// shards before its own, while other calls keep setting tips in every shard (so
// Claim's looks are retried and fall back to locking). Each SetTip is claimed once.
func TestMemoryConcurrentClaims(t *testing.T) {
	const tips, perTip, workers = 48, 3, 8
	ctx := context.Background()
	m := NewMemory(time.Minute, nil)
	defer m.Close()
	ts := distinctShardTips(memShards)
	own, unknown := ts[:tips], ts[tips:]
	want := map[string]bool{}
	for i, h := range own {
		for j := range perTip {
			id := fmt.Sprintf("ep-%d-%d", i, j)
			want[id] = true
			_ = m.SetTip(ctx, h, id)
		}
	}
	done := make(chan struct{})
	var churn sync.WaitGroup
	churn.Go(func() { // SetTips elsewhere: every shard's gen moves
		for i := uint64(0); ; i++ {
			select {
			case <-done:
				return
			default:
				_ = m.SetTip(ctx, i*0x9E3779B97F4A7C15+7, "ep-churn")
			}
		}
	})
	var (
		mu  sync.Mutex
		got = map[string]int{}
		wg  sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for c := w; c < tips*perTip; c += workers {
				list := append(slices.Clone(unknown[c%len(unknown):]), own[c/perTip])
				id, pos, ok, err := m.Claim(ctx, list)
				if err != nil || !ok || pos != len(list)-1 {
					t.Errorf("claim %d = %q at %d, ok %v, err %v", c, id, pos, ok, err)
				}
				mu.Lock()
				got[id]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(done)
	churn.Wait()
	for id := range want {
		if got[id] != 1 {
			t.Fatalf("%s claimed %d times, want once (claims: %v)", id, got[id], got)
		}
	}
}

// TestMemTipSize: a tip's entry (its key and memTip) fits one cache line of the tips'
// map, whose lookups on a finished turn miss the cache (a new tip each turn); with a
// time.Time for its expiry it took 80 bytes, two lines.
func TestMemTipSize(t *testing.T) {
	if n := unsafe.Sizeof(uint64(0)) + unsafe.Sizeof(memTip{}); n > 64 {
		t.Fatalf("a tip's map entry is %d bytes, more than a cache line", n)
	}
}

// TestMemoryGetInto: GetInto reads what Get reads, into the caller's episode without
// an allocation, refreshes the idle timeout as Get does, and leaves dst alone for an
// episode it does not know (or that idled out).
func TestMemoryGetInto(t *testing.T) {
	now := time.Unix(1000, 0)
	m := NewMemory(time.Minute, func() time.Time { return now })
	defer m.Close()
	ctx := context.Background()
	want := &Episode{ID: "a", Arm: "cam", Context: "ctx", Turns: 3, History: 7, StartedAt: now}
	_, _, _ = m.Create(ctx, want)
	var got Episode
	if err := m.GetInto(ctx, "a", &got); err != nil || got != *want {
		t.Fatalf("GetInto = %+v, %v; want %+v", got, err, *want)
	}
	if ep, err := m.Get(ctx, "a"); err != nil || *ep != got {
		t.Fatalf("Get = %+v, %v; GetInto read %+v", ep, err, got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = m.GetInto(ctx, "a", &got) }); n != 0 {
		t.Fatalf("GetInto allocates %v times", n)
	}
	now = now.Add(50 * time.Second) // within the idle timeout of the last read, not of Create
	_ = m.GetInto(ctx, "a", &got)
	now = now.Add(50 * time.Second)
	if err := m.GetInto(ctx, "a", &got); err != nil {
		t.Fatalf("GetInto did not refresh the idle timeout: %v", err)
	}
	now = now.Add(2 * time.Minute)
	keep := Episode{ID: "kept"}
	if err := m.GetInto(ctx, "a", &keep); !errors.Is(err, ErrNotFound) || keep.ID != "kept" {
		t.Fatalf("idled out: GetInto = %v, dst %+v", err, keep)
	}
	if err := m.GetInto(ctx, "unknown", &keep); !errors.Is(err, ErrNotFound) || keep.ID != "kept" {
		t.Fatalf("unknown: GetInto = %v, dst %+v", err, keep)
	}
}

// An idle timeout of years ("never expire") must not wrap the store's int64 clock:
// now + idle past MaxInt64 made every entry look expired, so each call started a new
// episode (found in review).
func TestMemoryIdleTimeoutNeverWraps(t *testing.T) {
	now := time.Unix(1e9, 0)
	idle, err := time.ParseDuration("2562047h") // the largest time.ParseDuration takes
	if err != nil {
		t.Fatal(err)
	}
	m := NewMemory(idle, func() time.Time { return now })
	defer m.Close()
	now = now.Add(time.Hour)
	ctx := context.Background()
	if _, _, err := m.Create(ctx, &Episode{ID: "e1"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Advance(ctx, &Episode{ID: "e1", Turns: 1}, 42); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, "e1"); err != nil {
		t.Fatalf("episode created a moment ago not found: %v", err)
	}
	if id, _, ok, err := m.Claim(ctx, []uint64{42}); err != nil || !ok || id != "e1" {
		t.Fatalf("tip set a moment ago: Claim = %q, %v, %v; want e1", id, ok, err)
	}
}
