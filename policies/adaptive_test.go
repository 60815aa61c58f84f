package policies

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/internal/testkit"
)

// simulate runs rounds of episodes through the policy, rewards them from truth, and
// updates the allocation after each round. It returns the share of traffic each arm
// got in the last round.
func simulate(t *testing.T, a *Adaptive, p *Policy, truth map[string]func(*rand.Rand) float64, rounds, perRound int) map[string]float64 {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	var last map[string]float64
	for r := range rounds {
		last = map[string]float64{}
		for i := range perRound {
			got := arm(t, p, fmt.Sprintf("ep-%d-%d", r, i), "", "")
			last[got.Name] += 1 / float64(perRound)
			if err := a.Observe(ctx, got.Name, truth[got.Name](rng), nil); err != nil {
				t.Fatal(err)
			}
		}
		w, err := a.Update(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, arm := range p.Arms() {
			if !a.Stopped()[arm.Name] && w[i] < a.o.MinShare-1e-9 {
				t.Fatalf("round %d: arm %s weight %.3f below min_share", r, arm.Name, w[i])
			}
		}
	}
	return last
}

func bernoulli(p float64) func(*rand.Rand) float64 {
	return func(r *rand.Rand) float64 {
		if r.Float64() < p {
			return 1
		}
		return 0
	}
}

func TestAdaptiveShiftsToTheBestArmAndStopsAHarmfulOne(t *testing.T) {
	arms := []Arm{{Name: "baseline", Weight: 1}, {Name: "rag", Weight: 1}, {Name: "cam", Weight: 1}, {Name: "broken", Weight: 1}}
	p, _ := New("exp", StickyEpisode, false, arms)
	a, err := NewAdaptive(p, NewMemoryStats(), AdaptiveOptions{MinShare: 0.05, Alpha: 0.05, MinEpisodes: 20, Seed: 1}, testkit.Logger(t, slog.LevelInfo))
	if err != nil {
		t.Fatal(err)
	}
	truth := map[string]func(*rand.Rand) float64{"baseline": bernoulli(0.40), "rag": bernoulli(0.45), "cam": bernoulli(0.70), "broken": bernoulli(0.05)}
	// 40 rounds × 50 episodes = 2 000 episodes.
	share := simulate(t, a, p, truth, 40, 50)
	w := p.Weights()
	if w[2] < 0.7 || share["cam"] < 0.6 {
		t.Fatalf("after 2 000 episodes cam has weight %.2f and got %.0f%% of the last round; want most traffic", w[2], 100*share["cam"])
	}
	if !a.Stopped()["broken"] || w[3] != 0 || share["broken"] != 0 {
		t.Fatalf("the harmful arm was not stopped: weight %.3f, share %.3f", w[3], share["broken"])
	}
	if a.Stopped()["baseline"] {
		t.Fatal("the control arm can never be stopped")
	}
	for i, name := range []string{"baseline", "rag", "cam"} {
		if w[i] < 0.05-1e-9 {
			t.Fatalf("%s fell below min_share: %.3f", name, w[i])
		}
	}
}

func TestAdaptiveContinuousRewards(t *testing.T) {
	arms := []Arm{{Name: "baseline", Weight: 1}, {Name: "cam", Weight: 1}}
	p, _ := New("exp", StickyEpisode, false, arms)
	a, _ := NewAdaptive(p, NewMemoryStats(), AdaptiveOptions{MinShare: 0.1, Alpha: 0.05, MinEpisodes: 20, Seed: 3}, testkit.Logger(t, slog.LevelInfo))
	normal := func(mu float64) func(*rand.Rand) float64 {
		return func(r *rand.Rand) float64 { return mu + 0.2*r.NormFloat64() }
	}
	simulate(t, a, p, map[string]func(*rand.Rand) float64{"baseline": normal(0.3), "cam": normal(0.5)}, 20, 40)
	if w := p.Weights(); math.Abs(w[1]-0.9) > 0.02 {
		t.Fatalf("cam weight %.3f, want ≈ 1 − min_share", w[1])
	}
}

func TestAdaptiveNoDataKeepsEvenSplit(t *testing.T) {
	p, _ := New("exp", StickyEpisode, false, []Arm{{Name: "a", Weight: 3}, {Name: "b", Weight: 1}})
	a, _ := NewAdaptive(p, NewMemoryStats(), AdaptiveOptions{MinShare: 0.1, Alpha: 0.05, Seed: 1}, testkit.Logger(t, slog.LevelInfo))
	w, _ := a.Update(context.Background())
	if math.Abs(w[0]-0.5) > 0.05 || math.Abs(w[1]-0.5) > 0.05 {
		t.Fatalf("no rewards yet: weights %v, want about even (nothing known)", w)
	}
}

func TestAdaptiveReplacedRewardIsNotCountedTwice(t *testing.T) {
	s := NewMemoryStats()
	ctx := context.Background()
	p, _ := New("exp", StickyEpisode, false, []Arm{{Name: "a", Weight: 1}})
	a, _ := NewAdaptive(p, s, AdaptiveOptions{MinShare: 0.1}, testkit.Logger(t, slog.LevelInfo))
	_ = a.Observe(ctx, "a", 0, nil)
	prev := 0.0
	_ = a.Observe(ctx, "a", 1, &prev)
	got, _ := s.Load(ctx, "exp", []string{"a"})
	if got["a"].N != 1 || got["a"].Sum != 1 || got["a"].Successes != 1 {
		t.Fatalf("stats after a replaced reward: %+v", got["a"])
	}
}

func TestRedisStatsShared(t *testing.T) {
	for name, connect := range map[string]func(t *testing.T) redis.UniversalClient{
		"single": func(t *testing.T) redis.UniversalClient {
			rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
			t.Cleanup(func() { _ = rdb.Close() })
			if err := rdb.Ping(context.Background()).Err(); err != nil {
				t.Skipf("redis not reachable: %v", err)
			}
			return rdb
		},
		// On a cluster an experiment's arms share a slot: Load is one node's pipeline.
		"cluster": func(t *testing.T) redis.UniversalClient {
			return testkit.RedisURLClient(t, cluster.Get(t).URL())
		},
	} {
		t.Run(name, func(t *testing.T) {
			rdb := connect(t)
			exp := fmt.Sprintf("test-%d", time.Now().UnixNano())
			defer rdb.Del(context.Background(), statsKey(exp, "a"))
			defer rdb.Del(context.Background(), statsKey(exp, "b"))
			if testkit.Slot(statsKey(exp, "a")) != testkit.Slot(statsKey(exp, "b")) {
				t.Fatal("an experiment's arms in different slots")
			}
			arms := []Arm{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}}
			p1, _ := New(exp, StickyEpisode, false, arms)
			p2, _ := New(exp, StickyEpisode, false, arms)
			a1, _ := NewAdaptive(p1, NewRedisStats(rdb), AdaptiveOptions{MinShare: 0.05, Alpha: 0.05, MinEpisodes: 10, Seed: 1}, testkit.Logger(t, slog.LevelInfo))
			a2, _ := NewAdaptive(p2, NewRedisStats(rdb), AdaptiveOptions{MinShare: 0.05, Alpha: 0.05, MinEpisodes: 10, Seed: 1}, testkit.Logger(t, slog.LevelInfo))
			ctx := context.Background()
			for i := range 100 { // replica 1 sees only arm a's rewards, replica 2 only b's
				if err := a1.Observe(ctx, "a", float64(i%2), nil); err != nil {
					t.Fatal(err)
				}
				if err := a2.Observe(ctx, "b", 1, nil); err != nil {
					t.Fatal(err)
				}
			}
			w1, err1 := a1.Update(ctx)
			w2, err2 := a2.Update(ctx)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if w1[1] < 0.9 || w2[1] < 0.9 || math.Abs(w1[1]-w2[1]) > 1e-9 {
				t.Fatalf("replicas disagree or ignore each other's rewards: %v vs %v", w1, w2)
			}
		})
	}
}

// TestAdaptiveFewEqualRewardsAreNotCertainty: two rewards of 1 on one arm and 0 on
// another, next to a baseline with real data, must not move almost all traffic.
func TestAdaptiveFewEqualRewardsAreNotCertainty(t *testing.T) {
	arms := []Arm{{Name: "baseline", Weight: 1}, {Name: "cam", Weight: 1}, {Name: "rag", Weight: 1}}
	p, _ := New("exp", StickyEpisode, false, arms)
	s := NewMemoryStats()
	a, _ := NewAdaptive(p, s, AdaptiveOptions{MinShare: 0.05, Alpha: 0.05, MinEpisodes: 20, Seed: 1}, testkit.Logger(t, slog.LevelInfo))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 1))
	for range 30 {
		_ = a.Observe(ctx, "baseline", 0.4+0.36*rng.Float64(), nil)
	}
	for range 2 {
		_ = a.Observe(ctx, "cam", 1, nil)
		_ = a.Observe(ctx, "rag", 0, nil)
	}
	w, _ := a.Update(ctx)
	if w[1] > 0.93 || w[2] <= 0.05 {
		t.Fatalf("two episodes per arm decided too much: weights %v, stopped %v", w, a.Stopped())
	}
}

// TestAdaptiveSurvivesInconsistentStats: a replaced reward whose first version was
// never counted leaves negative counts; allocation must still work.
func TestAdaptiveSurvivesInconsistentStats(t *testing.T) {
	p, _ := New("exp", StickyEpisode, false, []Arm{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}})
	s := NewMemoryStats()
	a, _ := NewAdaptive(p, s, AdaptiveOptions{MinShare: 0.05, Alpha: 0.05, Seed: 1}, testkit.Logger(t, slog.LevelInfo))
	prev := 1.0
	_ = a.Observe(context.Background(), "a", 0, &prev) // nothing counted before
	w, err := a.Update(context.Background())
	if err != nil || math.IsNaN(w[0]) || math.IsNaN(w[1]) || w[0] <= 0 || w[1] <= 0 {
		t.Fatalf("weights %v err %v", w, err)
	}
}

func TestProbBetter(t *testing.T) {
	bin := func(n, succ float64) Stats { return Stats{N: n, Sum: succ, SumSq: succ, Successes: succ} }
	cont := func(xs ...float64) Stats {
		var s Stats
		for _, x := range xs {
			s.N++
			s.Sum += x
			s.SumSq += x * x
			if x != 0 && x != 1 {
				s.NonBinary++
			}
		}
		return s
	}
	tests := []struct {
		name   string
		a, b   Stats
		lo, hi float64
	}{
		{"no data is a coin", Stats{}, Stats{}, 0.45, 0.55},
		{"20/20 against 0/20", bin(20, 20), bin(20, 0), 0.999, 1},
		{"0/20 against 20/20", bin(20, 0), bin(20, 20), 0, 0.001},
		{"equal rates", bin(40, 20), bin(40, 20), 0.4, 0.6},
		{"two against two is not certainty", bin(2, 2), bin(2, 0), 0.85, 0.99},
		{"continuous", cont(0.8, 0.7, 0.9, 0.85, 0.75, 0.8, 0.9, 0.7), cont(0.3, 0.2, 0.4, 0.35, 0.25, 0.3, 0.2, 0.4), 0.99, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := ProbBetter(tc.a, tc.b, 0, 1)
			if p < tc.lo || p > tc.hi {
				t.Fatalf("P(a > b) = %.4f, want in [%.3f, %.3f]", p, tc.lo, tc.hi)
			}
			if q := ProbBetter(tc.a, tc.b, 0, 1); q != p {
				t.Fatalf("same seed, different answers: %v %v", p, q)
			}
			if r := ProbBetter(tc.b, tc.a, 0, 2); math.Abs(p+r-1) > 0.05 {
				t.Fatalf("P(a>b) %.3f + P(b>a) %.3f far from 1", p, r)
			}
		})
	}
}
