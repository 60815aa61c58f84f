package admin

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
)

// BenchmarkRecentAdd is every finished turn reaching the dashboard: parallel workers,
// each running its own episodes of 30 turns, over a Recent that keeps the default 200
// (so episodes are forgotten as new ones start, as under load).
func BenchmarkRecentAdd(b *testing.B) {
	const turns = 30
	ids := make([]string, 1<<14)
	for i := range ids {
		ids[i] = fmt.Sprintf("ep_%024x", i)
	}
	r := NewRecent(0)
	var next atomic.Uint64
	at := time.Unix(1000, 0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var id string
		for i := 0; pb.Next(); i++ {
			if i%turns == 0 {
				id = ids[next.Add(1)%uint64(len(ids))]
			}
			r.Add(id, Turn{Turn: i % turns, Status: 200, TotalMs: 21.5, InputTokens: 3000, OutputTokens: 120, At: at})
		}
	})
}

// refRecent is the one-lock Recent this one replaced, kept as the model its
// behaviour must match.
type refRecent struct {
	cap   int
	order []string // oldest first
	eps   map[string]*refEpisode
}

type refEpisode struct {
	turns   []Turn
	omitted int
}

func (r *refRecent) add(id string, t Turn) {
	ep := r.eps[id]
	if ep == nil {
		ep = &refEpisode{}
		r.eps[id] = ep
		r.order = append(r.order, id)
		if len(r.order) > r.cap {
			delete(r.eps, r.order[0])
			r.order = r.order[1:]
		}
	}
	if len(ep.turns) == recentTurns {
		ep.turns = append(ep.turns[:0], ep.turns[1:]...)
		ep.omitted++
	}
	ep.turns = append(ep.turns, t)
}

func (r *refRecent) ids(n int) []string {
	out := []string{}
	for i := len(r.order) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, r.order[i])
	}
	return out
}

// TestRecentMatchesModel: a long random run of turns over a few episodes, checked
// after every turn against the one-lock model: the order of episodes, which are
// forgotten, and each one's last turns and count of omitted ones.
func TestRecentMatchesModel(t *testing.T) {
	for _, c := range []struct {
		name     string
		cap, ids int
	}{{"one", 1, 3}, {"small", 3, 8}, {"roomy", 16, 10}, {"churn", 5, 200}} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(c.cap), uint64(c.ids)))
			r, ref := NewRecent(c.cap), &refRecent{cap: c.cap, eps: map[string]*refEpisode{}}
			for step := range 3000 {
				id := fmt.Sprintf("ep-%d", rng.IntN(c.ids))
				turn := Turn{Turn: step, Status: 200 + rng.IntN(300)}
				r.Add(id, turn)
				ref.add(id, turn)
				n := rng.IntN(c.cap + 2)
				if got, want := r.IDs(n), ref.ids(n); !slices.Equal(got, want) {
					t.Fatalf("step %d: IDs(%d) = %v, want %v", step, n, got, want)
				}
				probe := fmt.Sprintf("ep-%d", rng.IntN(c.ids))
				got, omitted, ok := r.Turns(probe)
				want, known := ref.eps[probe]
				if ok != known {
					t.Fatalf("step %d: Turns(%s) known %v, want %v", step, probe, ok, known)
				}
				if known && (omitted != want.omitted || !slices.Equal(got, want.turns)) {
					t.Fatalf("step %d: Turns(%s) = %d turns from %v, %d omitted; want %d from %v, %d omitted",
						step, probe, len(got), got[0], omitted, len(want.turns), want.turns[0], want.omitted)
				}
			}
		})
	}
}

// TestRecentConcurrent: many calls at once, some starting episodes and some adding
// turns. The turns an episode holds are its newest, in order (all of them when nothing
// is forgotten), and once the calls are done exactly the newest cap episodes are
// remembered, nothing more (bounded).
func TestRecentConcurrent(t *testing.T) {
	const workers, episodes, turns = 8, 40, 70
	for _, capacity := range []int{3, workers * episodes} {
		t.Run(fmt.Sprint(capacity), func(t *testing.T) {
			r := NewRecent(capacity)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for e := range episodes {
						id := fmt.Sprintf("w%d-e%d", w, e)
						for i := range turns {
							r.Add(id, Turn{Turn: i})
						}
					}
				})
			}
			wg.Wait()
			ids := r.IDs(workers * episodes * 2)
			if len(ids) != capacity {
				t.Fatalf("%d episodes listed, want %d: %v", len(ids), capacity, ids)
			}
			seen := map[string]bool{}
			for _, id := range ids {
				if seen[id] {
					t.Fatalf("episode %s listed twice", id)
				}
				seen[id] = true
				got, omitted, ok := r.Turns(id)
				// With room for every episode none is forgotten, so each holds all its
				// turns. With less room than the 8 written at once, one being written can
				// be forgotten by newer ones between two of its turns and remembered anew
				// by the next: it then holds what came since, still newest last, in order.
				whole := capacity >= workers*episodes
				if !ok || len(got) == 0 || len(got) > recentTurns || omitted+len(got) > turns ||
					whole && (len(got) != recentTurns || omitted != turns-recentTurns) {
					t.Fatalf("%s: %d turns, %d omitted, known %v", id, len(got), omitted, ok)
				}
				for i, tr := range got {
					if want := turns - len(got) + i; tr.Turn != want {
						t.Fatalf("%s: turn %d is %d, want %d", id, i, tr.Turn, want)
					}
				}
			}
			kept := 0
			for i := range r.shards {
				kept += len(r.shards[i].eps)
			}
			if kept != capacity {
				t.Fatalf("%d episodes held, want %d (forgotten ones leak)", kept, capacity)
			}
		})
	}
}

// TestRecentRecordsTurns: as one of the data plane's recorders, Recent keeps each
// finished turn with its timings in milliseconds, and skips turns of no episode.
func TestRecentRecordsTurns(t *testing.T) {
	r := NewRecent(4)
	r.Record(&episode.Turn{Episode: episode.Episode{ID: "e1"}, Index: 0, Status: 200, Augment: 1500 * time.Microsecond,
		TTFB: 20 * time.Millisecond, Total: 2 * time.Second, Usage: protocol.Usage{InputTokens: 7, OutputTokens: 3}})
	r.Record(&episode.Turn{Index: 0, Status: 502}) // no episode: not shown
	r.Record(&episode.Turn{Episode: episode.Episode{ID: "e1"}, Index: 1, Status: 502, Error: "upstream unreachable"})
	if ids := r.IDs(10); !slices.Equal(ids, []string{"e1"}) {
		t.Fatalf("episodes = %v, want [e1]", ids)
	}
	turns, _, ok := r.Turns("e1")
	if !ok || len(turns) != 2 {
		t.Fatalf("turns of e1 = %+v, want 2", turns)
	}
	t0, t1 := turns[0], turns[1]
	if t0.AugmentMs != 1.5 || t0.TTFBMs != 20 || t0.TotalMs != 2000 || t0.InputTokens != 7 || t0.OutputTokens != 3 {
		t.Errorf("turn 0 = %+v", t0)
	}
	if t1.Turn != 1 || t1.Status != 502 || t1.Error != "upstream unreachable" {
		t.Errorf("turn 1 = %+v", t1)
	}
}
