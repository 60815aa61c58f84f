package online

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/learn"
	"github.com/camproxy/camproxy/learn/learntest"
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/replay"
)

// verdict is one row of the promotion and stopping tables: the learner has one
// candidate, learn-v2 (two with two: learn-v3 too), when the statistics and the
// guardrail become these; one round later the candidates are judged.
type verdict struct {
	name  string
	tune  func(*config.Learn, *Options)
	two   bool
	stats map[string]policies.Stats
	guard map[string]bool

	champion string            // after the round
	statuses map[string]string // arm → status after the round
	events   []string          // the round's events, "action arm"
	reason   string            // in the reason of the round's last event
	served   []string          // the arms of the runtime after the round
	check    func(t *testing.T, h *harness)
}

func judgeRows(t *testing.T, rows []verdict) {
	t.Helper()
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			h := started(t, r.tune)
			champ := h.l.initial
			h.runs(champ, 5, 0)
			h.round()
			want := []string{"learn-v2"}
			if r.two {
				h.runs(champ, 5, 0)
				h.round()
				want = append(want, "learn-v3")
			}
			var cands []string
			for _, c := range h.l.st.candidates() {
				cands = append(cands, c.Arm)
			}
			if !slices.Equal(cands, want) {
				t.Fatalf("candidates before the verdict: %v; want %v", cands, want)
			}
			h.setStats(r.stats)
			h.rt.mu.Lock()
			h.rt.stopped = r.guard
			h.rt.mu.Unlock()
			from := len(h.rt.events)

			h.round()

			st := h.state()
			if st.Champion != r.champion {
				t.Errorf("champion %s; want %s", st.Champion, r.champion)
			}
			for arm, status := range r.statuses {
				if got := h.status(arm); got != status {
					t.Errorf("%s is %q; want %q", arm, got, status)
				}
			}
			if got := h.rt.actions(from); !slices.Equal(got, r.events) {
				t.Errorf("events %q; want %q", got, r.events)
			}
			if r.reason != "" {
				if last := h.rt.events[len(h.rt.events)-1]; !strings.Contains(last.Reason, r.reason) {
					t.Errorf("the event's reason %q; want %q in it", last.Reason, r.reason)
				}
			}
			if got := h.rt.servedArms(); !slices.Equal(got, r.served) {
				t.Errorf("the runtime serves %v; want %v", got, r.served)
			}
			if r.check != nil {
				r.check(t, h)
			}
		})
	}
}

// TestPromotion: a candidate that beats the champion with confidence 1 −
// promote_alpha becomes the champion, the old one leaving the experiment unless it is
// the control; one without enough rewarded episodes, on either side, waits.
func TestPromotion(t *testing.T) {
	judgeRows(t, []verdict{
		{
			name:     "a winner is promoted and the old champion leaves",
			stats:    map[string]policies.Stats{"ace": binary(6, 0), "learn-v2": binary(6, 6)},
			champion: "learn-v2", statuses: map[string]string{"ace": armRetired, "learn-v2": armChampion},
			events: []string{"promoted learn-v2"}, reason: "beats the champion ace",
			served: []string{"baseline", "learn-v2"},
			check: func(t *testing.T, h *harness) {
				st := h.state()
				if st.ChampionVersion != 2 || !slices.Contains(st.Removed, "ace") || st.LastN != 0 || !st.Cutoff.IsZero() {
					t.Errorf("state after the promotion: %+v", st)
				}
				ev := h.rt.events[len(h.rt.events)-1]
				if ev.PBetter == nil || *ev.PBetter < 0.95 || ev.Champion != "learn-v2" || ev.Stats["ace"].N != 6 || ev.Stats["learn-v2"].N != 6 {
					t.Errorf("promoted event: %+v", ev)
				}
			},
		},
		{
			name:     "a control champion, replaced, stays in the experiment",
			tune:     func(lc *config.Learn, _ *Options) { lc.Champion = "baseline" },
			stats:    map[string]policies.Stats{"baseline": binary(6, 0), "learn-v2": binary(6, 6)},
			champion: "learn-v2", statuses: map[string]string{"baseline": armRetired, "learn-v2": armChampion},
			events: []string{"promoted learn-v2"},
			served: []string{"baseline", "ace", "learn-v2"},
			check: func(t *testing.T, h *harness) {
				if st := h.state(); len(st.Removed) > 0 {
					t.Errorf("removed %v: the control never leaves", st.Removed)
				}
			},
		},
		{
			name:     "too few rewarded episodes of the candidate: it waits",
			stats:    map[string]policies.Stats{"ace": binary(6, 0), "learn-v2": binary(5, 5)},
			champion: "ace", statuses: map[string]string{"ace": armChampion, "learn-v2": armCandidate},
			served: []string{"baseline", "ace", "learn-v2"},
		},
		{
			name:     "too few rewarded episodes of the champion: it waits",
			stats:    map[string]policies.Stats{"ace": binary(5, 0), "learn-v2": binary(6, 6)},
			champion: "ace", statuses: map[string]string{"ace": armChampion, "learn-v2": armCandidate},
			served: []string{"baseline", "ace", "learn-v2"},
		},
		{
			name:     "no verdict yet: it waits",
			stats:    map[string]policies.Stats{"ace": binary(20, 10), "learn-v2": binary(20, 11)},
			champion: "ace", statuses: map[string]string{"ace": armChampion, "learn-v2": armCandidate},
			served: []string{"baseline", "ace", "learn-v2"},
		},
		{
			// Both clear the bar against the champion; the likelier is promoted and
			// the other, judged against the champion it was made for, runs on.
			name:     "two winners: the likelier is promoted",
			two:      true,
			stats:    map[string]policies.Stats{"ace": binary(10, 2), "learn-v2": binary(8, 7), "learn-v3": binary(8, 8)},
			champion: "learn-v3", statuses: map[string]string{"ace": armRetired, "learn-v2": armCandidate, "learn-v3": armChampion},
			events: []string{"promoted learn-v3"},
			served: []string{"baseline", "learn-v2", "learn-v3"},
			check: func(t *testing.T, h *harness) {
				// The row means something only while both clear the bar, v3 by more.
				ace := binary(10, 2)
				p2 := policies.ProbBetter(binary(8, 7), ace, 0, uint64(2)<<32|8)
				p3 := policies.ProbBetter(binary(8, 8), ace, 0, uint64(3)<<32|8)
				if p2 < 0.95 || p3 <= p2 {
					t.Fatalf("P(v2 better) = %.4f, P(v3 better) = %.4f: the row needs both ≥ 0.95, v3's higher", p2, p3)
				}
			},
		},
	})
}

// TestStopping: a candidate leaves the experiment when the adaptive guardrail stopped
// it (whatever its count), when it is worse than the champion with confidence 1 −
// promote_alpha, or when learn.max_trial rewarded episodes gave no verdict.
func TestStopping(t *testing.T) {
	maxTrial := func(lc *config.Learn, _ *Options) { lc.MaxTrial = 8 }
	judgeRows(t, []verdict{
		{
			name:     "a loser is stopped",
			stats:    map[string]policies.Stats{"ace": binary(6, 6), "learn-v2": binary(6, 0)},
			champion: "ace", statuses: map[string]string{"ace": armChampion, "learn-v2": armStopped},
			events: []string{"stopped learn-v2"}, reason: "worse than the champion ace",
			served: []string{"baseline", "ace"},
			check: func(t *testing.T, h *harness) {
				if ev := h.rt.events[len(h.rt.events)-1]; ev.PBetter == nil || *ev.PBetter > 0.05 {
					t.Errorf("stopped event: %+v", ev)
				}
			},
		},
		{
			name:     "stopped by the guardrail before min_episodes",
			stats:    map[string]policies.Stats{"ace": binary(6, 0), "learn-v2": binary(1, 0)},
			guard:    map[string]bool{"learn-v2": true},
			champion: "ace", statuses: map[string]string{"ace": armChampion, "learn-v2": armStopped},
			events: []string{"stopped learn-v2"}, reason: "the adaptive guardrail: worse than the control baseline",
			served: []string{"baseline", "ace"},
		},
		{
			name:     "the guardrail stopped another arm: the candidate runs on",
			stats:    map[string]policies.Stats{"ace": binary(6, 0), "learn-v2": binary(1, 0)},
			guard:    map[string]bool{"ace": true},
			champion: "ace", statuses: map[string]string{"ace": armChampion, "learn-v2": armCandidate},
			served: []string{"baseline", "ace", "learn-v2"},
		},
		{
			name:     "inconclusive after max_trial: stopped",
			tune:     maxTrial,
			stats:    map[string]policies.Stats{"ace": binary(8, 4), "learn-v2": binary(8, 4)},
			champion: "ace", statuses: map[string]string{"ace": armChampion, "learn-v2": armStopped},
			events: []string{"stopped learn-v2"}, reason: "inconclusive after 8 rewarded episodes",
			served: []string{"baseline", "ace"},
		},
		{
			name:     "short of max_trial: it runs on",
			tune:     maxTrial,
			stats:    map[string]policies.Stats{"ace": binary(8, 4), "learn-v2": binary(7, 4)},
			champion: "ace", statuses: map[string]string{"ace": armChampion, "learn-v2": armCandidate},
			served: []string{"baseline", "ace", "learn-v2"},
		},
		{
			name:     "without max_trial a tie runs on",
			stats:    map[string]policies.Stats{"ace": binary(40, 20), "learn-v2": binary(40, 20)},
			champion: "ace", statuses: map[string]string{"ace": armChampion, "learn-v2": armCandidate},
			served: []string{"baseline", "ace", "learn-v2"},
		},
	})
}

// schedule is one row of the step-scheduling table: do drives the learner's rounds
// and the clock; then the optimiser step ran steps times.
type schedule struct {
	name  string
	tune  func(*config.Learn, *Options)
	do    func(h *harness)
	steps int
	check func(t *testing.T, h *harness)
}

// TestStepScheduling: when the next reflect → mutate step runs.
func TestStepScheduling(t *testing.T) {
	rows := []schedule{
		{
			name: "the first round seeds version 1 and does not step",
			do:   func(h *harness) {},
			check: func(t *testing.T, h *harness) {
				if st := h.state(); h.latest() != 1 || st.Steps != 0 || h.status("ace") != armChampion {
					t.Errorf("state %+v, latest version %d", st, h.latest())
				}
			},
		},
		{
			name: "fewer than learn.every new rewarded episodes: no step",
			do:   func(h *harness) { h.runs("ace", 4, 0); h.round() },
		},
		{
			name: "learn.every of them: a step on exactly those, tried as a candidate",
			do: func(h *harness) {
				ids := h.runs("ace", 5, 0)
				h.round()
				h.batchIs(0, ids, "the champion's new episodes")
			},
			steps: 1,
			check: func(t *testing.T, h *harness) {
				c := h.step.Calls()[0]
				if c.Version != 2 || c.Batch.Iteration != 1 || c.Base.Index("learnt-2") >= 0 || len(c.Base.Entries) != 1 {
					t.Errorf("step: version %d, iteration %d, base %+v", c.Version, c.Batch.Iteration, c.Base.Entries)
				}
				if st := h.state(); st.Steps != 1 || st.LastN != 5 || h.status("learn-v2") != armCandidate {
					t.Errorf("state after the step: %+v", st)
				}
				if got := h.rt.servedArms(); !slices.Equal(got, []string{"baseline", "ace", "learn-v2"}) {
					t.Errorf("the runtime serves %v", got)
				}
			},
		},
		{
			name: "other arms' episodes neither count nor feed the step",
			do: func(h *harness) {
				h.runs("baseline", 5, 0)
				ids := h.runs("ace", 4, 0)
				h.round()
				if n := len(h.step.Calls()); n != 0 {
					h.t.Fatalf("stepped on 4 of the champion's episodes and 5 of another arm's")
				}
				ids = append(ids, h.runs("ace", 1, 0)...)
				h.round()
				h.batchIs(0, ids, "the champion's episodes only")
			},
			steps: 1,
		},
		{
			name: "the next step counts from the last one and reads only what came since",
			do: func(h *harness) {
				h.runs("ace", 5, 0)
				h.round()
				h.runs("ace", 4, 0)
				h.round()
				if n := len(h.step.Calls()); n != 1 {
					h.t.Fatalf("%d steps after 4 more episodes", n)
				}
				ids := h.runs("ace", 1, 0)
				h.round()
				if got := batchIDs(h.step.Calls()[1]); len(got) != 5 || !slices.Contains(got, ids[0]) {
					h.t.Errorf("second batch %v; want the 5 episodes since the first step", got)
				}
			},
			steps: 2,
		},
		{
			name:  "max_candidates running: no step",
			tune:  func(lc *config.Learn, _ *Options) { lc.MaxCandidates = 1 },
			do:    func(h *harness) { h.runs("ace", 5, 0); h.round(); h.runs("ace", 5, 0); h.round() },
			steps: 1,
		},
		{
			name: "a stop frees the slot in the same round",
			tune: func(lc *config.Learn, _ *Options) { lc.MaxCandidates = 1 },
			do: func(h *harness) {
				h.runs("ace", 5, 0)
				h.round()
				h.runs("ace", 5, 0)
				h.rt.mu.Lock()
				h.rt.stopped = map[string]bool{"learn-v2": true}
				h.rt.mu.Unlock()
				h.round()
			},
			steps: 2,
			check: func(t *testing.T, h *harness) {
				if h.status("learn-v2") != armStopped || h.status("learn-v3") != armCandidate {
					t.Errorf("v2 %q, v3 %q", h.status("learn-v2"), h.status("learn-v3"))
				}
			},
		},
		{
			name: "a failed step backs off, doubling, until one succeeds",
			do: func(h *harness) {
				h.step.Set(func(s *learntest.Step) { s.Err = errModel })
				h.runs("ace", 5, 0)
				calls := func() int { return len(h.step.Calls()) }
				mustFail := func() {
					h.t.Helper()
					if err := h.l.lead(h.ctx, 1); err == nil {
						h.t.Fatal("a round whose step failed reported no error")
					}
				}
				mustFail() // call 1; the next after check_every<<1 = 2 s
				h.round()
				h.advance(1999 * time.Millisecond)
				h.round()
				if calls() != 1 {
					h.t.Fatalf("%d calls inside the first back-off", calls())
				}
				h.advance(time.Millisecond)
				mustFail() // call 2; the next after 4 s
				h.advance(3999 * time.Millisecond)
				h.round()
				if calls() != 2 {
					h.t.Fatalf("%d calls inside the second back-off", calls())
				}
				h.advance(time.Millisecond)
				h.step.Set(func(s *learntest.Step) { s.Err = nil })
				h.round() // call 3 succeeds
			},
			steps: 3,
			check: func(t *testing.T, h *harness) {
				if h.status("learn-v2") != armCandidate || h.l.fails != 0 || !h.l.retryAt.IsZero() {
					t.Errorf("after the success: v2 %q, fails %d, retry at %v", h.status("learn-v2"), h.l.fails, h.l.retryAt)
				}
			},
		},
		{
			name: "the buffer lags the statistics: it waits, then steps on what it has",
			do: func(h *harness) {
				h.count("ace", 2, 0) // counted, not in the buffer yet
				ids := h.runs("ace", 3, 0)
				h.round() // the wait starts: max(2 × check_every, 2 s)
				h.advance(1999 * time.Millisecond)
				h.round()
				if n := len(h.step.Calls()); n != 0 {
					h.t.Fatalf("stepped on %d of 5 episodes before the wait ended", n)
				}
				h.advance(time.Millisecond)
				h.round()
				h.batchIs(0, ids, "the 3 in the buffer")
			},
			steps: 1,
		},
		{
			// Not even the guidance refresh runs on an empty batch.
			name: "nothing in the buffer: it waits however long",
			do: func(h *harness) {
				h.l.guide = func(context.Context, []*replay.Task) (learn.GuidanceResult, error) {
					h.t.Error("guidance refreshed without an episode to step on")
					return learn.GuidanceResult{}, nil
				}
				h.count("ace", 5, 0)
				h.round()
				h.advance(time.Hour)
				h.round()
			},
		},
		{
			name: "statistics that restarted are counted from zero",
			do: func(h *harness) {
				h.runs("ace", 5, 0)
				h.round()
				h.setStats(map[string]policies.Stats{}) // in-memory statistics, a restart
				h.round()                               // fewer than at the last step
				h.runs("ace", 5, 0)
				h.round()
			},
			steps: 2,
		},
		{
			name: "a promotion feeds the new champion's episodes to a step at once",
			do: func(h *harness) {
				h.runs("ace", 5, 0)
				h.round()
				ids := h.runs("learn-v2", 6, 1)
				h.count("ace", 1, 0)
				h.round()
				h.batchIs(1, ids, "the new champion's episodes")
			},
			steps: 2,
			check: func(t *testing.T, h *harness) {
				if c := h.step.Calls()[1]; c.Version != 3 || c.Base.Index("learnt-2") < 0 {
					t.Errorf("the step after the promotion: version %d from %+v; want v3 from v2", c.Version, c.Base.Entries)
				}
			},
		},
		{
			name: "a step that changed only counts is kept, not tried, and the next starts from it",
			do: func(h *harness) {
				h.step.Set(func(s *learntest.Step) { s.Mode = learntest.CountsOnly })
				h.runs("ace", 5, 0)
				h.round()
				if st := h.state(); h.latest() != 2 || st.BaseVersion != 2 || h.status("learn-v2") != "" {
					h.t.Fatalf("after a counts-only step: latest %d, state %+v", h.latest(), st)
				}
				if got := h.rt.actions(0); !slices.Equal(got, []string{"version ace", "version v2"}) {
					h.t.Fatalf("events %q", got)
				}
				h.step.Set(func(s *learntest.Step) { s.Mode = learntest.AddRule })
				h.runs("ace", 5, 0)
				h.round()
			},
			steps: 2,
			check: func(t *testing.T, h *harness) {
				c := h.step.Calls()[1]
				if c.Version != 3 || c.Base.Entries[0].Helpful != 1 {
					t.Errorf("second step: version %d from %+v; want v2's counts", c.Version, c.Base.Entries)
				}
				if a := h.state().arm("learn-v3"); a == nil || a.Parent != 2 || a.Status != armCandidate {
					t.Errorf("learn-v3: %+v", a)
				}
			},
		},
		{
			name: "a step that changed nothing writes no version; the count moves on",
			do: func(h *harness) {
				h.step.Set(func(s *learntest.Step) { s.Mode = learntest.NoChange })
				h.runs("ace", 5, 0)
				h.round()
				h.runs("ace", 4, 0)
				h.round()
			},
			steps: 1,
			check: func(t *testing.T, h *harness) {
				if st := h.state(); h.latest() != 1 || st.Steps != 1 || st.LastN != 5 || len(st.candidates()) != 0 {
					t.Errorf("latest %d, state %+v", h.latest(), st)
				}
			},
		},
		{
			name: "no batch to reflect on: no step",
			tune: func(_ *config.Learn, o *Options) {
				o.Pair = func([]*replay.Episode, int, uint64) []learn.Item { return nil }
			},
			do: func(h *harness) { h.runs("ace", 5, 0); h.round() },
		},
		{
			name: "statistics not loaded: the round fails without a step",
			do: func(h *harness) {
				h.runs("ace", 5, 0)
				h.rt.mu.Lock()
				h.rt.statsErr = errModel
				h.rt.mu.Unlock()
				if err := h.l.lead(h.ctx, 1); err == nil {
					h.t.Fatal("a round without statistics reported no error")
				}
			},
		},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			h := started(t, r.tune)
			r.do(h)
			if n := len(h.step.Calls()); n != r.steps {
				t.Fatalf("%d steps; want %d", n, r.steps)
			}
			if r.check != nil {
				r.check(t, h)
			}
		})
	}
}
