package app

// This file wires the online learners (learn/online) into the app: each experiment
// whose view (config.PerExperiment) has learn.enabled gets its own learner — its own
// store, state, lease and batch, reading only its experiment's episodes — which
// reaches the app through learnRuntime. A reload starts the learners of added
// experiments, stops (releasing their leases) those of removed ones or of ones whose
// learner changed, and keeps the others running.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/camproxy/camproxy/admin"
	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/learn/online"
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/replay"
)

// learnLoadTimeout bounds a new learner's first read of its state: a store that does
// not answer soon is left to the learner's loop.
const learnLoadTimeout = 3 * time.Second

// learner is an experiment's online learner (learn/online) as the app wires it: with
// the health of its Redis lease, which readiness reports.
type learner struct {
	*online.Learner
	lease *opState // nil without a Redis lease
}

// newLearner makes experiment spec's learner on this app; it makes no network call.
func (a *App) newLearner(spec online.Spec) (*learner, error) {
	log := a.log.With("component", "learn", "experiment", spec.Experiment)
	lease := &opState{part: partLease, log: log}
	l, err := online.New(context.Background(), learnRuntime{a}, spec, online.Options{Step: a.learnOpts.LearnStep,
		Pair: a.learnOpts.LearnPair, Logger: a.log, Metrics: a.learnMetrics(), ObserveLease: lease.observe})
	if err != nil {
		return nil, err
	}
	w := &learner{Learner: l}
	if l.LeaseClient() != nil {
		w.lease = lease
		a.addLeasePart()
	}
	return w, nil
}

// learnRuntime is the app as its learners need it (online.Runtime).
type learnRuntime struct{ a *App }

func (r learnRuntime) Rebuild() error { return r.a.rebuild() }

func (r learnRuntime) Stats(ctx context.Context, exp string, arms []string) (map[string]policies.Stats, error) {
	return r.a.stats.Load(ctx, exp, arms)
}

func (r learnRuntime) Stopped(exp string) map[string]bool {
	r.a.mu.Lock()
	run := r.a.run
	r.a.mu.Unlock()
	if run == nil {
		return nil
	}
	if e := run.experiment(exp); e != nil && e.adaptive != nil {
		return e.adaptive.Stopped()
	}
	return nil
}

func (r learnRuntime) Record(ev *replay.LearnEvent) { r.a.record(ev) }

// learnerSet is the learners of a config, by experiment name, in the config's match
// order. It is replaced whole, never changed: readers hold a snapshot.
type learnerSet struct {
	byName map[string]*learner
	order  []*learner
}

func (s *learnerSet) get(exp string) *learner {
	if s == nil {
		return nil
	}
	return s.byName[exp]
}

func (s *learnerSet) all() []*learner {
	if s == nil {
		return nil
	}
	return s.order
}

// learners is the current set (nil without learners).
func (a *App) learners() *learnerSet {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.learn
}

// learnerFor is experiment exp's learner, or nil.
func (a *App) learnerFor(exp string) *learner { return a.learners().get(exp) }

// shapeFor is one experiment's config (a view of config.PerExperiment) as this
// replica serves it: with a learner, its shape (the configured arms but those it
// removed, its versions' arms, adaptive allocation on, the sources of its arms);
// without one, nil.
func (a *App) shapeFor(view *config.Config) *online.Shaped {
	if l := a.learnerFor(view.Experiment.Name); l != nil {
		return l.Shape(view)
	}
	return nil
}

// learnerPlan is what a config asks of the running learners.
type learnerPlan struct {
	next    *learnerSet
	added   []*learner // made for this config, not started yet
	removed []*learner // running, and not in next
}

// planLearners makes the learners cfg has and the current set lacks (opening their
// stores and reading their state), keeps those whose spec is unchanged, and lists the
// rest to stop. Nothing runs or stops here: apply does that.
func (a *App) planLearners(cfg *config.Config) (*learnerPlan, error) {
	cur := a.learners()
	p := &learnerPlan{next: &learnerSet{byName: map[string]*learner{}}}
	sole := len(cfg.Experiments) == 0
	for _, view := range cfg.PerExperiment() {
		if !view.Learn.Enabled {
			continue
		}
		name := view.Experiment.Name
		spec := online.SpecOf(view, sole)
		l := cur.get(name)
		if l == nil || !reflect.DeepEqual(l.Spec(), spec) {
			var err error
			if l, err = a.newLearner(spec); err != nil {
				a.discardLearners(p)
				return nil, fmt.Errorf("experiment %s: %w", name, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), learnLoadTimeout)
			l.Load(ctx) // serve its learnt versions from the first call
			cancel()
			p.added = append(p.added, l)
		}
		p.next.byName[name] = l
		p.next.order = append(p.next.order, l)
	}
	for _, l := range cur.all() {
		if p.next.byName[l.Experiment()] != l {
			p.removed = append(p.removed, l)
		}
	}
	return p, nil
}

// discardLearners closes the learners plan made (for a config that was refused),
// and drops the series of those whose experiment has no running learner.
func (a *App) discardLearners(p *learnerPlan) {
	cur := a.learners()
	for _, l := range p.added {
		l.Close()
		if cur.get(l.Experiment()) == nil {
			a.learnMetrics().Forget(l.Experiment())
		}
	}
}

// apply stops the learners that left (each releases its lease: another replica takes
// over at once) and starts the new ones once the app serves. It must run without
// buildMu: a learner being stopped may wait for it to rebuild the runtime.
func (a *App) applyLearners(p *learnerPlan) {
	for _, l := range p.removed {
		l.Close()
		if exp := l.Experiment(); p.next.get(exp) == nil {
			a.learnMetrics().Forget(exp)
			a.log.Info("learn: stopped; the experiment has no learner now", "component", "learn", "experiment", exp)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.serving {
		for _, l := range p.added {
			l.Start()
		}
	}
}

// learnViews are the learners as the dashboard shows them, in match order, each
// with the state run was shaped from and each version with its arm's share of its
// experiment's new episodes in run.
func (a *App) learnViews(run *runtime) []*admin.LearnState {
	var out []*admin.LearnState
	for _, l := range a.learners().all() {
		e := run.experiment(l.Experiment())
		if e == nil {
			out = append(out, l.View(nil))
			continue
		}
		v := l.View(e.learnt)
		share := map[string]float64{}
		w := e.x.Policy.Weights()
		for i, arm := range e.x.Policy.Arms() {
			share[arm.Name] = w[i]
		}
		for i := range v.Versions {
			v.Versions[i].Share = share[v.Versions[i].Arm]
		}
		out = append(out, v)
	}
	return out
}

// learnMetrics are the learners' series; registered with the first learner.
func (a *App) learnMetrics() *online.Metrics {
	a.learnMetricsOnce.Do(func() { a.learnM = online.NewMetrics(a.Registry) })
	return a.learnM
}

// addLeasePart reports the learners' Redis leases as one part, learn-lease: up while
// every learner's last lease call succeeded. It is added with the first learner that
// leases on Redis (a reload may bring it); its readiness check is there from the start
// (passing while no learner leases on Redis), since the admin plane takes its checks
// once.
func (a *App) addLeasePart() {
	a.leasePartOnce.Do(func() {
		a.Metrics.Dependencies.Add("redis", partLease, func() bool { up, _ := a.leaseState(); return up })
	})
}

// leaseCheck is learn-lease's readiness check: each Redis lease's last call, and its
// Redis answering.
func (a *App) leaseCheck() admin.Check {
	return admin.Check{Name: "redis:" + partLease, Degraded: true, Fn: func(ctx context.Context) error {
		if up, err := a.leaseState(); !up {
			return fmt.Errorf("serving from local fallback: %v", err)
		}
		var errs []error
		for _, l := range a.learners().all() {
			if rdb := l.LeaseClient(); rdb != nil {
				if err := ping(ctx, rdb); err != nil {
					errs = append(errs, fmt.Errorf("experiment %s: redis does not answer: %w", l.Experiment(), err))
				}
			}
		}
		return errors.Join(errs...)
	}}
}

// leaseState is down while a learner's last lease call failed, naming its experiment.
func (a *App) leaseState() (bool, error) {
	for _, l := range a.learners().all() {
		if l.lease == nil {
			continue
		}
		if up, err := l.lease.state(); !up {
			return false, fmt.Errorf("experiment %s: %w", l.Experiment(), err)
		}
	}
	return true, nil
}
