package policies

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Stats are an arm's reward statistics over rewarded episodes.
type Stats struct {
	N         float64 // rewarded episodes
	Sum       float64 // Σ reward
	SumSq     float64 // Σ reward²
	Successes float64 // rewards ≥ 1
	NonBinary float64 // rewards other than 0 and 1: the arm needs the Normal model
}

// sane clamps statistics a lost or duplicated update left inconsistent (a replaced
// reward whose first version was never counted): the posterior must stay proper.
func (s Stats) sane() Stats {
	s.N = max(s.N, 0)
	s.Successes = min(max(s.Successes, 0), s.N)
	s.SumSq = max(s.SumSq, 0)
	return s
}

func (s Stats) mean() float64 {
	if s.N == 0 {
		return 0
	}
	return s.Sum / s.N
}

func (s Stats) variance() float64 {
	if s.N < 2 {
		return 0
	}
	return max((s.SumSq-s.N*s.mean()*s.mean())/(s.N-1), 0)
}

// StatsStore keeps reward statistics per experiment and arm: in memory, or in Redis
// so that a fleet allocates as one.
type StatsStore interface {
	Add(ctx context.Context, experiment, arm string, delta Stats) error
	Load(ctx context.Context, experiment string, arms []string) (map[string]Stats, error)
}

// Observed is what one new reward adds to an arm's statistics: the delta
// StatsStore.Add gets for an episode rewarded the first time.
func Observed(reward float64) Stats { return delta(reward, nil) }

// delta is what one reward (replacing previous, if any) adds to an arm's statistics.
func delta(reward float64, previous *float64) Stats {
	d := rewardStats(reward)
	if previous != nil {
		p := rewardStats(*previous)
		d = Stats{N: 0, Sum: d.Sum - p.Sum, SumSq: d.SumSq - p.SumSq, Successes: d.Successes - p.Successes, NonBinary: d.NonBinary - p.NonBinary}
	}
	return d
}

func rewardStats(r float64) Stats {
	s := Stats{N: 1, Sum: r, SumSq: r * r}
	if r >= 1 {
		s.Successes = 1
	}
	if r != 0 && r != 1 {
		s.NonBinary = 1
	}
	return s
}

// MemoryStats is the in-process StatsStore.
type MemoryStats struct {
	mu sync.Mutex
	m  map[string]Stats
}

// NewMemoryStats returns an empty in-process store.
func NewMemoryStats() *MemoryStats { return &MemoryStats{m: map[string]Stats{}} }

func (m *MemoryStats) Add(_ context.Context, experiment, arm string, d Stats) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := experiment + "\x00" + arm
	s := m.m[k]
	s.N += d.N
	s.Sum += d.Sum
	s.SumSq += d.SumSq
	s.Successes += d.Successes
	s.NonBinary += d.NonBinary
	m.m[k] = s
	return nil
}

func (m *MemoryStats) Load(_ context.Context, experiment string, arms []string) (map[string]Stats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]Stats{}
	for _, a := range arms {
		out[a] = m.m[experiment+"\x00"+a]
	}
	return out, nil
}

// AdaptiveOptions tune Thompson sampling.
type AdaptiveOptions struct {
	UpdatePeriod time.Duration // how often weights are recomputed
	MinShare     float64       // floor of every arm that is not stopped
	Alpha        float64       // the guardrail stops an arm worse than control with confidence 1−Alpha
	MinEpisodes  int           // rewarded episodes an arm and the control need before the guardrail judges
	Control      string        // the control arm, never stopped
	Draws        int           // posterior draws per update (default 4000)
	Seed         uint64
}

// Adaptive reweights a policy by Thompson sampling over episode rewards: an arm's
// share follows the probability that it is the best (Beta posterior for success/fail
// rewards, Normal for continuous ones), floored at MinShare; an arm that is worse than
// the control with confidence 1−Alpha gets no new traffic.
type Adaptive struct {
	p     *Policy
	store StatsStore
	o     AdaptiveOptions
	log   *slog.Logger

	mu      sync.Mutex
	rng     *rand.Rand
	stopped map[string]bool
}

// NewAdaptive returns an allocator for p. It changes nothing until Update or Run.
func NewAdaptive(p *Policy, store StatsStore, o AdaptiveOptions, log *slog.Logger) (*Adaptive, error) {
	if o.Draws <= 0 {
		o.Draws = 4000
	}
	if o.Control == "" {
		o.Control = p.arms[0].Name
		if _, ok := p.Arm("baseline"); ok {
			o.Control = "baseline"
		}
	}
	if _, ok := p.Arm(o.Control); !ok {
		return nil, fmt.Errorf("adaptive control arm %q is not an arm of experiment %q", o.Control, p.name)
	}
	if o.MinShare*float64(len(p.arms)) > 1 {
		return nil, fmt.Errorf("min_share %.3f × %d arms exceeds 1", o.MinShare, len(p.arms))
	}
	if log == nil {
		log = slog.Default()
	}
	return &Adaptive{p: p, store: store, o: o, log: log, rng: rand.New(rand.NewPCG(o.Seed, 0x5eed)), stopped: map[string]bool{}}, nil
}

// Observe records an episode's reward for its arm; previous is the reward it replaces.
func (a *Adaptive) Observe(ctx context.Context, arm string, reward float64, previous *float64) error {
	if _, ok := a.p.Arm(arm); !ok {
		return nil // an arm of an earlier config: its episodes still end, but do not steer this one
	}
	return a.store.Add(ctx, a.p.name, arm, delta(reward, previous))
}

// Run updates the weights every UpdatePeriod until ctx ends.
func (a *Adaptive) Run(ctx context.Context) {
	t := time.NewTicker(a.o.UpdatePeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := a.Update(ctx); err != nil {
				a.log.Warn("adaptive allocation: update failed; keeping the current weights", "err", err)
			}
		}
	}
}

// Update recomputes and sets the weights from the current statistics.
func (a *Adaptive) Update(ctx context.Context) ([]float64, error) {
	names := make([]string, len(a.p.arms))
	for i, arm := range a.p.arms {
		names[i] = arm.Name
	}
	stats, err := a.store.Load(ctx, a.p.name, names)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	best, worse := a.sample(names, stats)
	ctrl := stats[a.o.Control]
	w := make([]float64, len(names))
	active := 0
	for i, n := range names {
		judged := n != a.o.Control && stats[n].N >= float64(a.o.MinEpisodes) && ctrl.N >= float64(a.o.MinEpisodes)
		if judged && worse[i] > 1-a.o.Alpha {
			if !a.stopped[n] {
				a.log.Warn("adaptive guardrail: arm stopped, worse than control", "arm", n, "control", a.o.Control,
					"p_worse", worse[i], "mean", stats[n].mean(), "control_mean", ctrl.mean())
			}
			a.stopped[n] = true
			continue
		}
		a.stopped[n] = false
		active++
	}
	var pSum float64
	for i, n := range names {
		if !a.stopped[n] {
			pSum += best[i]
		}
	}
	for i, n := range names {
		if a.stopped[n] {
			continue
		}
		share := 1 / float64(active)
		if pSum > 0 {
			share = best[i] / pSum
		}
		w[i] = a.o.MinShare + (1-float64(active)*a.o.MinShare)*share
	}
	a.p.SetWeights(w)
	return w, nil
}

// Stopped reports the arms the guardrail has stopped.
func (a *Adaptive) Stopped() map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]bool{}
	for k, v := range a.stopped {
		out[k] = v
	}
	return out
}

// sample draws from every arm's posterior: best[i] is the share of draws where arm i
// is the best, worse[i] the share where it is below the control.
func (a *Adaptive) sample(names []string, stats map[string]Stats) (best, worse []float64) {
	binary := true
	var pooled Stats
	for _, n := range names {
		s := stats[n]
		binary = binary && s.NonBinary == 0
		pooled.N += s.N
		pooled.Sum += s.Sum
		pooled.SumSq += s.SumSq
	}
	ctrl := 0
	for i, n := range names {
		if n == a.o.Control {
			ctrl = i
		}
	}
	best, worse = make([]float64, len(names)), make([]float64, len(names))
	theta := make([]float64, len(names))
	for range a.o.Draws {
		top := 0
		for i, n := range names {
			theta[i] = a.draw(stats[n], pooled, binary)
			if theta[i] > theta[top] {
				top = i
			}
		}
		best[top]++
		for i := range names {
			if theta[i] < theta[ctrl] {
				worse[i]++
			}
		}
	}
	for i := range names {
		best[i] /= float64(a.o.Draws)
		worse[i] /= float64(a.o.Draws)
	}
	return best, worse
}

// priorWeight is how many pseudo-episodes of the pooled spread the Normal model adds
// to each arm's variance: two identical rewards must not look like certainty.
const priorWeight = 2.0

// draw samples an arm's mean reward from its posterior.
func (a *Adaptive) draw(s, pooled Stats, binary bool) float64 {
	s = s.sane()
	if binary {
		return betaSample(a.rng, 1+s.Successes, 1+s.N-s.Successes)
	}
	// Normal model: the arm's variance shrunk towards the pooled one, so a few equal
	// rewards do not collapse the spread. Rewards in [0,1] have variance ≤ 0.25.
	pv := pooled.variance()
	if pv == 0 {
		pv = 0.25
	}
	if s.N < 1 {
		return pooled.mean() + math.Sqrt(pv)*a.rng.NormFloat64()
	}
	v := (priorWeight*pv + (s.N-1)*s.variance()) / (priorWeight + s.N - 1)
	// Student t with N−1+priorWeight degrees of freedom: heavy tails while data is scarce.
	df := s.N - 1 + priorWeight
	t := a.rng.NormFloat64() / math.Sqrt(2*gammaSample(a.rng, df/2)/df)
	return s.mean() + math.Sqrt(v/s.N)*t
}

// betaSample draws from Beta(a, b) through two Gamma draws.
func betaSample(r *rand.Rand, a, b float64) float64 {
	x, y := gammaSample(r, a), gammaSample(r, b)
	return x / (x + y)
}

// gammaSample draws from Gamma(k, 1) (Marsaglia and Tsang, 2000).
func gammaSample(r *rand.Rand, k float64) float64 {
	if k < 1 {
		return gammaSample(r, k+1) * math.Pow(r.Float64(), 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// ProbBetter is P(mean of a > mean of b) under the posteriors Adaptive samples from
// (Beta when both arms' rewards are 0/1, else the shrunk Student t), estimated from
// draws paired draws (0 = 4000) with a seeded generator: the same statistics always
// give the same answer. The online learner promotes and stops candidates with it.
func ProbBetter(a, b Stats, draws int, seed uint64) float64 {
	if draws <= 0 {
		draws = 4000
	}
	s := &Adaptive{rng: rand.New(rand.NewPCG(seed, 0xbe77e4))}
	binary := a.NonBinary == 0 && b.NonBinary == 0
	pooled := Stats{N: a.N + b.N, Sum: a.Sum + b.Sum, SumSq: a.SumSq + b.SumSq}
	wins := 0.0
	for range draws {
		x, y := s.draw(a, pooled, binary), s.draw(b, pooled, binary)
		switch {
		case x > y:
			wins++
		case x == y:
			wins += 0.5
		}
	}
	return wins / float64(draws)
}

// Mean is the mean reward, 0 without rewards.
func (s Stats) Mean() float64 { return s.mean() }
