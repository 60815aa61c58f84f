package online

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/demo"
	"github.com/camproxy/camproxy/learn/learntest"
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/replay"
)

// The learner's tests drive one learner through its rounds with a fake of the
// process (fakeRuntime), a fake optimiser step, a clock the test moves, the store and
// the replay buffer in a temporary directory: no App, no socket, no wall clock.

const exp = "exp"

// fakeRuntime is the process serving the experiment: statistics the test sets, a
// guardrail the test sets, the events recorded, and a runtime rebuilt from the
// learner's Shape (served is what the last rebuild serves).
type fakeRuntime struct {
	mu       sync.Mutex
	l        *Learner
	view     *config.Config
	stats    map[string]policies.Stats
	statsErr error
	stopped  map[string]bool
	events   []*replay.LearnEvent
	fail     error // Rebuild's answer while set
	rebuilds int
	served   *Shaped
}

func (f *fakeRuntime) Rebuild() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.rebuilds++
	f.served = f.l.Shape(f.view)
	return nil
}

func (f *fakeRuntime) Stats(_ context.Context, e string, arms []string) (map[string]policies.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e != exp {
		return nil, fmt.Errorf("statistics of experiment %q asked for", e)
	}
	if f.statsErr != nil {
		return nil, f.statsErr
	}
	out := map[string]policies.Stats{}
	for _, a := range arms {
		out[a] = f.stats[a]
	}
	return out, nil
}

func (f *fakeRuntime) Stopped(e string) map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e != exp {
		return nil
	}
	return f.stopped
}

func (f *fakeRuntime) Record(ev *replay.LearnEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, ev)
}

// actions are the actions of the events recorded from the from-th on.
func (f *fakeRuntime) actions(from int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, ev := range f.events[from:] {
		out = append(out, ev.Action+" "+cmp.Or(ev.Arm, fmt.Sprintf("v%d", ev.Version)))
	}
	return out
}

// servedArms are the arms of the runtime the last rebuild made.
func (f *fakeRuntime) servedArms() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.served == nil {
		return nil
	}
	var out []string
	for _, a := range f.served.Config.Experiment.Arms {
		out = append(out, a.Name)
	}
	return out
}

// harness is one learner of experiment exp with champion ace (a playbook arm) and
// control baseline, on fakes.
type harness struct {
	t    *testing.T
	ctx  context.Context
	l    *Learner
	rt   *fakeRuntime
	step *learntest.Step
	sink *replay.FileSink
	mu   sync.Mutex
	now  time.Time
	seq  int
}

// newHarness makes the learner with learn: every 5, min_episodes 6, max_candidates
// 2, promote_alpha 0.05, no max_trial, check_every 1 s and batches of every new
// episode, tuned by tune; it does not run a round.
func newHarness(t *testing.T, tune func(*config.Learn, *Options)) *harness {
	t.Helper()
	dir := t.TempDir()
	pbFile := filepath.Join(dir, "ace.txt")
	if err := os.WriteFile(pbFile, []byte("## policy\n- Check the fare class before rebooking.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	view := config.Default()
	view.Experiment.Name = exp
	ace := config.DefaultAugmenter()
	ace.Type, ace.File = config.AugmenterPlaybook, pbFile
	view.Augmenters = map[string]config.Augmenter{"ace": ace}
	view.Experiment.Arms = []config.Arm{{Name: "baseline", Weight: 1, Augmenter: config.AugmenterNone}, {Name: "ace", Weight: 1, Augmenter: "ace"}}
	buffer := filepath.Join(dir, "replay")
	view.Replay.Sinks = []string{"file://" + buffer}
	lc := config.DefaultLearn()
	lc.Enabled, lc.Champion, lc.Store = true, "ace", filepath.Join(dir, "playbook")
	lc.Every, lc.MinEpisodes, lc.MaxCandidates, lc.PromoteAlpha, lc.MaxTrial, lc.BatchSize = 5, 6, 2, 0.05, 0, 0
	lc.CheckEvery = time.Second
	h := &harness{t: t, ctx: context.Background(), step: &learntest.Step{}, now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	o := Options{Step: h.step.Step, Now: h.clock, Logger: slog.New(slog.DiscardHandler)}
	if tune != nil {
		tune(&lc, &o)
	}
	view.Learn = lc
	sink, err := replay.NewFileSink(buffer, replay.FileOptions{Unpartitioned: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close() })
	h.sink = sink
	h.rt = &fakeRuntime{view: view, stats: map[string]policies.Stats{}}
	if h.l, err = New(h.ctx, h.rt, SpecOf(view, true), o); err != nil {
		t.Fatal(err)
	}
	h.rt.l = h.l
	t.Cleanup(h.l.Close)
	return h
}

// started is newHarness after its first round, which seeds version 1.
func started(t *testing.T, tune func(*config.Learn, *Options)) *harness {
	h := newHarness(t, tune)
	h.round()
	if st := h.state(); st == nil || st.Champion != h.l.initial || st.ChampionVersion != 1 {
		t.Fatalf("after the first round the state is %+v; want champion %s on version 1", st, h.l.initial)
	}
	return h
}

func (h *harness) clock() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

func (h *harness) advance(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now = h.now.Add(d)
}

// round is one round of the lease holder; it must succeed.
func (h *harness) round() {
	h.t.Helper()
	if err := h.l.lead(h.ctx, 1); err != nil {
		h.t.Fatalf("round: %v", err)
	}
}

// record writes n runs of arm rewarded r into the replay buffer, one a second of the
// clock, and returns their episode ids.
func (h *harness) record(arm string, n int, r float64) []string {
	h.t.Helper()
	var ids []string
	for range n {
		h.seq++
		var lines [][]byte
		evs := demo.RewardedRun(exp, arm, fmt.Sprintf("task %d on %s", h.seq, arm), r, h.clock())
		for _, ev := range evs {
			b, err := json.Marshal(ev)
			if err != nil {
				h.t.Fatal(err)
			}
			lines = append(lines, b)
		}
		if err := h.sink.Write(h.ctx, lines); err != nil {
			h.t.Fatal(err)
		}
		ids = append(ids, evs[0].(*replay.EpisodeEvent).EpisodeID)
		h.advance(time.Second)
	}
	return ids
}

// count adds n rewards r of arm to the statistics.
func (h *harness) count(arm string, n int, r float64) {
	h.rt.mu.Lock()
	defer h.rt.mu.Unlock()
	s := h.rt.stats[arm]
	for range n {
		d := policies.Observed(r)
		s.N, s.Sum, s.SumSq, s.Successes, s.NonBinary = s.N+d.N, s.Sum+d.Sum, s.SumSq+d.SumSq, s.Successes+d.Successes, s.NonBinary+d.NonBinary
	}
	h.rt.stats[arm] = s
}

// runs is n runs of arm rewarded r, in the buffer and counted.
func (h *harness) runs(arm string, n int, r float64) []string {
	h.t.Helper()
	ids := h.record(arm, n, r)
	h.count(arm, n, r)
	return ids
}

// setStats replaces the statistics.
func (h *harness) setStats(s map[string]policies.Stats) {
	h.rt.mu.Lock()
	defer h.rt.mu.Unlock()
	h.rt.stats = s
}

// state is the state in the store.
func (h *harness) state() *state {
	h.t.Helper()
	st, err := h.l.readState(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

// status is the status of arm in the stored state ("" when it has none).
func (h *harness) status(arm string) string {
	h.t.Helper()
	if a := h.state().arm(arm); a != nil {
		return a.Status
	}
	return ""
}

// latest is the store's latest version.
func (h *harness) latest() int {
	h.t.Helper()
	m, err := h.l.versions.Manifest(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return m.Latest()
}

// binary are the statistics of n rewards of which k are 1 and the rest 0.
func binary(n, k int) policies.Stats {
	return policies.Stats{N: float64(n), Sum: float64(k), SumSq: float64(k), Successes: float64(k)}
}

// batchIs checks that the i-th step's batch is the episodes ids (what they are).
func (h *harness) batchIs(i int, ids []string, what string) {
	h.t.Helper()
	want := slices.Sorted(slices.Values(ids))
	if got := batchIDs(h.step.Calls()[i]); !slices.Equal(got, want) {
		h.t.Errorf("batch %d: %v; want %s %v", i, got, what, want)
	}
}

// batchIDs are the episodes of a step's batch, sorted.
func batchIDs(c learntest.Call) []string {
	var out []string
	for _, it := range c.Batch.Items {
		for _, ep := range []*replay.Episode{it.Failure, it.Success} {
			if ep != nil {
				out = append(out, ep.ID)
			}
		}
	}
	slices.Sort(out)
	return out
}

var errModel = errors.New("the model is down")
