package online

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/learn/learntest"
	"github.com/camproxy/camproxy/policies"
)

// fakeLease answers what the test sets.
type fakeLease struct {
	mu       sync.Mutex
	held     bool
	err      error
	released int
}

func (f *fakeLease) Acquire(context.Context) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held, f.err
}

func (f *fakeLease) Release(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released++
	return nil
}

func (f *fakeLease) set(held bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held, f.err = held, err
}

// TestRenew: each lease call decides whether this replica leads: a tenure runs while
// the lease is held, and ends (its context with it) when it is lost or a call fails.
func TestRenew(t *testing.T) {
	type answer struct {
		held bool
		err  error
	}
	errRedis := errors.New("redis: connection refused")
	rows := []struct {
		name     string
		answers  []answer
		leader   bool
		tenure   int // the running tenure's number, 0 = none
		observed []error
		ended    bool // the first tenure's context ended
	}{
		{name: "held: leads", answers: []answer{{held: true}}, leader: true, tenure: 1, observed: []error{nil}},
		{name: "renewed: the same tenure", answers: []answer{{held: true}, {held: true}}, leader: true, tenure: 1, observed: []error{nil, nil}},
		{name: "another holds it: follows", answers: []answer{{}}, observed: []error{nil}},
		{name: "the call fails: follows", answers: []answer{{err: errRedis}}, observed: []error{errRedis}},
		{name: "lost: the tenure ends", answers: []answer{{held: true}, {}}, observed: []error{nil, nil}, ended: true},
		{name: "lost to a failed call: the tenure ends", answers: []answer{{held: true}, {err: errRedis}}, observed: []error{nil, errRedis}, ended: true},
		{name: "held again: a new tenure", answers: []answer{{held: true}, {}, {held: true}}, leader: true, tenure: 2,
			observed: []error{nil, nil, nil}, ended: true},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			h := newHarness(t, nil)
			fl := &fakeLease{}
			h.l.lease = fl
			var observed []error
			h.l.observe = func(err error) { observed = append(observed, err) }
			tn := newTenure()
			var first context.Context
			for _, a := range r.answers {
				fl.set(a.held, a.err)
				h.l.renew(h.ctx, tn, time.Second)
				if ctx, _ := tn.current(); first == nil && ctx != nil {
					first = ctx
				}
			}
			if h.l.Leader() != r.leader || testutil.ToFloat64(h.l.m.leader) != map[bool]float64{true: 1}[r.leader] {
				t.Errorf("leader %v (gauge %v); want %v", h.l.Leader(), testutil.ToFloat64(h.l.m.leader), r.leader)
			}
			ctx, id := tn.current()
			if (ctx != nil) != (r.tenure > 0) || ctx != nil && id != r.tenure {
				t.Errorf("tenure %d (running %v); want %d", id, ctx != nil, r.tenure)
			}
			if !slices.EqualFunc(observed, r.observed, func(a, b error) bool { return errors.Is(a, b) || a == b }) {
				t.Errorf("observed %v; want %v", observed, r.observed)
			}
			if ended := first != nil && first.Err() != nil; ended != r.ended {
				t.Errorf("the first tenure ended: %v; want %v", ended, r.ended)
			}
		})
	}
}

// TestLostLeaseAbandonsTheStep: a step in flight when the lease is lost is abandoned
// (its tenure's context ends), nothing of it is written, and the next round follows.
func TestLostLeaseAbandonsTheStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := started(t, nil)
		fl := &fakeLease{held: true}
		h.l.lease = fl
		tn := newTenure()
		h.l.renew(h.ctx, tn, time.Second)
		inFlight, giveUp := make(chan struct{}), make(chan struct{})
		h.step.Set(func(s *learntest.Step) {
			s.Wait = func(ctx context.Context) error {
				close(inFlight)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-giveUp:
					return errors.New("the test gave up")
				}
			}
		})
		h.runs("ace", 5, 0)
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.l.tick(h.ctx, tn)
		}()
		<-inFlight
		fl.set(false, nil)
		h.l.renew(h.ctx, tn, time.Second)
		synctest.Wait()
		select {
		case <-done:
		default:
			close(giveUp)
			<-done
			t.Fatal("the step in flight ran on after the lease was lost")
		}
		if st := h.state(); h.latest() != 1 || st.Steps != 0 || len(st.candidates()) != 0 || h.l.Leader() {
			t.Fatalf("after the lost lease: latest %d, state %+v, leader %v", h.latest(), st, h.l.Leader())
		}
		if got := h.rt.actions(0); !slices.Equal(got, []string{"version ace"}) {
			t.Fatalf("events %q", got)
		}
		h.l.tick(h.ctx, tn)
		if h.l.st != nil {
			t.Fatal("a round without the lease kept the leader's working state")
		}
	})
}

// TestFollowerServesAndNeverSteps: a replica without the lease serves the state the
// holder writes (rebuilding its runtime as the generation moves) and never steps or
// decides, however many episodes it counts.
func TestFollowerServesAndNeverSteps(t *testing.T) {
	leader := started(t, nil)
	f := newHarness(t, func(lc *config.Learn, _ *Options) {
		lc.Store, lc.From = leader.l.cfg.Store, leader.l.from
	})
	f.l.lease = &fakeLease{}
	tn := newTenure()
	f.l.renew(f.ctx, tn, time.Second)
	f.count("ace", 50, 0)
	f.l.tick(f.ctx, tn)
	if got := f.rt.servedArms(); !slices.Equal(got, []string{"baseline", "ace"}) {
		t.Fatalf("the follower serves %v", got)
	}
	leader.runs("ace", 5, 0)
	leader.round()
	f.l.tick(f.ctx, tn)
	if got := f.rt.servedArms(); !slices.Equal(got, []string{"baseline", "ace", "learn-v2"}) {
		t.Fatalf("the follower serves %v after the leader's step", got)
	}
	if v := f.l.View(f.rt.served); v.Champion != "ace" || len(v.Versions) != 2 || v.Leader {
		t.Fatalf("the follower's view: %+v", v)
	}
	// A tenure the lease call is ending (the flag already says lost) does not lead,
	// though the candidate now wins in its statistics.
	f.setStats(map[string]policies.Stats{"ace": binary(6, 0), "learn-v2": binary(6, 6)})
	tn.begin(f.ctx)
	f.l.tick(f.ctx, tn)
	if n, evs := len(f.step.Calls()), f.rt.actions(0); n != 0 || len(evs) != 0 {
		t.Fatalf("the follower stepped %d times and decided %q", n, evs)
	}
	if st := f.state(); st.Champion != "ace" {
		t.Fatalf("the follower wrote the state: %+v", st)
	}
}

// TestCloseStopsTheLoop: Close ends the loop (Done closes), gives the lease back,
// and no round runs after it.
func TestCloseStopsTheLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		fl := &fakeLease{held: true}
		h.l.lease = fl
		h.l.Start()
		time.Sleep(3 * h.l.cfg.CheckEvery)
		synctest.Wait()
		if !h.l.Leader() || h.latest() != 1 {
			t.Fatalf("the loop did not lead: leader %v, latest version %d", h.l.Leader(), h.latest())
		}
		h.l.Close()
		select {
		case <-h.l.Done():
		default:
			t.Fatal("Done is open after Close")
		}
		fl.mu.Lock()
		released := fl.released
		fl.mu.Unlock()
		if released != 1 {
			t.Fatalf("the lease was released %d times", released)
		}
		h.runs("ace", 5, 0)
		time.Sleep(3 * h.l.cfg.CheckEvery)
		synctest.Wait()
		if n := len(h.step.Calls()); n != 0 {
			t.Fatalf("%d steps after Close", n)
		}
	})
}

// TestViewIsTheRuntimes: the dashboard's view of the learner is the state the
// serving runtime was built from. A round that changes the state rebuilds the
// runtime first: until it is rebuilt, and when the rebuild fails, the view names what
// the runtime serves, never the new state.
func TestViewIsTheRuntimes(t *testing.T) {
	h := started(t, nil)
	h.runs("ace", 5, 0)
	h.round()
	before := h.rt.served
	if v := h.l.View(before); v.Champion != "ace" || len(v.Versions) != 2 || v.Versions[1].Status != armCandidate {
		t.Fatalf("view with the candidate: %+v", v)
	}

	// The candidate wins, but the runtime cannot be rebuilt.
	h.setStats(map[string]policies.Stats{"ace": binary(6, 0), "learn-v2": binary(6, 6)})
	h.rt.mu.Lock()
	h.rt.fail = errors.New("an augmenter does not load")
	h.rt.mu.Unlock()
	if err := h.l.lead(h.ctx, 1); err == nil {
		t.Fatal("a round whose runtime was not rebuilt reported no error")
	}
	if st := h.state(); st.Champion != "learn-v2" {
		t.Fatalf("the promotion was not written: %+v", st)
	}
	if h.rt.served != before || h.l.View(h.rt.served).Champion != "ace" {
		t.Fatalf("the view moved without the runtime: %+v", h.l.View(h.rt.served))
	}
	if s := h.l.Shape(h.rt.view); !slices.ContainsFunc(s.Config.Experiment.Arms, func(a config.Arm) bool { return a.Name == "ace" }) {
		t.Fatal("a failed rebuild left the new state to the next one: the old champion is gone from the shape")
	}

	// The next round serves it: the view moves with the runtime.
	h.rt.mu.Lock()
	h.rt.fail = nil
	h.rt.mu.Unlock()
	h.round()
	after := h.rt.served
	if v := h.l.View(after); v.Champion != "learn-v2" || v.ChampionVersion != 2 {
		t.Fatalf("view after the rebuild: %+v", v)
	}
	if got := h.rt.servedArms(); !slices.Equal(got, []string{"baseline", "learn-v2"}) {
		t.Fatalf("the runtime serves %v", got)
	}
	if v := h.l.View(before); v.Champion != "ace" {
		t.Fatalf("the old runtime's view changed: %+v", v)
	}
	if v := h.l.View(nil); v.Champion != "" || v.Experiment != exp {
		t.Fatalf("view of no runtime: %+v", v)
	}
}
