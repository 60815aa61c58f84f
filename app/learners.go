package app

// This file keeps a learner per experiment (issue 30): each experiment whose view
// (config.PerExperiment) has learn.enabled gets its own learner — its own store,
// state, lease and batch, reading only its experiment's episodes. A reload starts the
// learners of added experiments, stops (releasing their leases) those of removed
// ones or of ones whose learner changed, and keeps the others running.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/admin"
	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/proxy"
)

// learnLoadTimeout bounds a new learner's first read of its state: a store that does
// not answer soon is left to the learner's loop.
const learnLoadTimeout = 3 * time.Second

// learnerSpec is what a learner is made from: a reload keeps the running learner of
// an experiment whose spec did not change.
type learnerSpec struct {
	Learn                  config.Learn
	Control, Initial, From string
	Seed                   config.Augmenter // the initial champion's augmenter
	Sole                   bool             // the one-experiment form: unlabelled episodes are its
}

func specOf(view *config.Config, sole bool) learnerSpec {
	s := learnerSpec{Learn: view.Learn, Control: view.Experiment.Control(), Initial: view.LearnChampion(), From: view.LearnFrom(), Sole: sole}
	for _, arm := range view.Experiment.Arms {
		if arm.Name == s.Initial && arm.Augmenter != config.AugmenterNone {
			s.Seed = view.Augmenters[arm.Augmenter]
		}
	}
	return s
}

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
// removed, its versions' arms, adaptive allocation on) and the sources of its arms;
// without one, view itself.
func (a *App) shapeFor(view *config.Config) (*config.Config, map[string]proxy.ContextSource) {
	if l := a.learnerFor(view.Experiment.Name); l != nil {
		return l.shape(view)
	}
	return view, nil
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
		spec := specOf(view, sole)
		l := cur.get(name)
		if l == nil || !reflect.DeepEqual(l.spec, spec) {
			var err error
			if l, err = newLearner(a, view, spec); err != nil {
				a.discardLearners(p)
				return nil, fmt.Errorf("experiment %s: %w", name, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), learnLoadTimeout)
			l.load(ctx) // serve its learnt versions from the first call
			cancel()
			p.added = append(p.added, l)
		}
		p.next.byName[name] = l
		p.next.order = append(p.next.order, l)
	}
	for _, l := range cur.all() {
		if p.next.byName[l.exp] != l {
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
		l.close()
		if cur.get(l.exp) == nil {
			a.learnMetrics().forget(l.exp)
		}
	}
}

// apply stops the learners that left (each releases its lease: another replica takes
// over at once) and starts the new ones once the app serves. It must run without
// buildMu: a learner being stopped may wait for it to rebuild the runtime.
func (a *App) applyLearners(p *learnerPlan) {
	for _, l := range p.removed {
		l.close()
		if p.next.get(l.exp) == nil {
			a.learnMetrics().forget(l.exp)
			l.log.Info("learn: stopped; the experiment has no learner now")
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.serving {
		for _, l := range p.added {
			l.start()
		}
	}
}

// experimentRun is the policy and adaptive allocator (nil when off) of the runtime
// serving experiment exp, or nils when none serves it.
func (a *App) experimentRun(exp string) (*policies.Policy, *policies.Adaptive) {
	a.mu.Lock()
	run := a.run
	a.mu.Unlock()
	if run == nil {
		return nil, nil
	}
	if e := run.experiment(exp); e != nil {
		return e.x.Policy, e.adaptive
	}
	return nil, nil
}

// learnViews are the learners as the dashboard shows them, in match order, each
// version with its arm's share of its experiment's new episodes.
func (a *App) learnViews() []*admin.LearnState {
	var out []*admin.LearnState
	for _, l := range a.learners().all() {
		v := l.view()
		if p, _ := a.experimentRun(l.exp); p != nil {
			share := map[string]float64{}
			w := p.Weights()
			for i, arm := range p.Arms() {
				share[arm.Name] = w[i]
			}
			for i := range v.Versions {
				v.Versions[i].Share = share[v.Versions[i].Arm]
			}
		}
		out = append(out, v)
	}
	return out
}

// learnMetrics are the learners' series, labelled by experiment; registered with the
// first learner.
type learnMetrics struct {
	steps, guidance             *prometheus.CounterVec
	decisions                   *prometheus.CounterVec // experiment, action
	version, leader, candidates *prometheus.GaugeVec
}

func (a *App) learnMetrics() *learnMetrics {
	a.learnMetricsOnce.Do(func() {
		exp := []string{"experiment"}
		m := &learnMetrics{
			steps: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "camproxy", Name: "learn_steps_total",
				Help: "Optimiser steps this replica ran (as the learner lease holder), by experiment."}, exp),
			guidance: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "camproxy", Name: "learn_guidance_total",
				Help: "Guidance records the learner appended to learn.guidance_file (tasks whose runs now have mixed outcomes), by experiment."}, exp),
			decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "camproxy", Name: "learn_decisions_total",
				Help: "Learner decisions this replica made, by experiment and action (version, candidate, promoted, stopped)."}, []string{"experiment", "action"}),
			version: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "camproxy", Name: "learn_version",
				Help: "The playbook version of the champion arm this replica serves, by experiment."}, exp),
			leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "camproxy", Name: "learn_leader",
				Help: "1 while this replica holds the experiment's learner lease."}, exp),
			candidates: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "camproxy", Name: "learn_candidates",
				Help: "Candidate arms this replica serves, by experiment."}, exp),
		}
		a.Registry.MustRegister(m.steps, m.guidance, m.decisions, m.version, m.leader, m.candidates)
		a.learnM = m
	})
	return a.learnM
}

// forget drops an experiment's series: its learner stopped (the label's values are
// the configured experiments' only).
func (m *learnMetrics) forget(exp string) {
	l := prometheus.Labels{"experiment": exp}
	m.steps.DeletePartialMatch(l)
	m.guidance.DeletePartialMatch(l)
	m.decisions.DeletePartialMatch(l)
	m.version.DeletePartialMatch(l)
	m.leader.DeletePartialMatch(l)
	m.candidates.DeletePartialMatch(l)
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
			if rdb := l.leaseClient(); rdb != nil {
				if err := ping(ctx, rdb); err != nil {
					errs = append(errs, fmt.Errorf("experiment %s: redis does not answer: %w", l.exp, err))
				}
			}
		}
		return errors.Join(errs...)
	}}
}

// leaseState is down while a learner's last lease call failed, naming its experiment.
func (a *App) leaseState() (bool, error) {
	for _, l := range a.learners().all() {
		if l.leaseState == nil {
			continue
		}
		if up, err := l.leaseState.state(); !up {
			return false, fmt.Errorf("experiment %s: %w", l.exp, err)
		}
	}
	return true, nil
}

// leaseClient is the Redis client of l's lease, or nil.
func (l *learner) leaseClient() redis.UniversalClient {
	if r, ok := l.lease.(*redisLease); ok {
		return r.rdb
	}
	return nil
}
