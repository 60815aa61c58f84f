package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/camproxy/camproxy/admin"
	"github.com/camproxy/camproxy/augment"
	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/learn/online"
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/proxy"
)

// runtime is the reloadable part of a camproxy: the proxy's Runtime, its experiments
// each with the adaptive allocator steering its policy, and the configured augmenters
// they share.
type runtime struct {
	rt      *proxy.Runtime
	exps    []*expRun                      // rt.Experiments' own parts, in their order
	sources map[string]proxy.ContextSource // the configured augmenters (without learnt ones)
}

// expRun is one experiment of a runtime: the proxy's experiment and its allocator.
type expRun struct {
	x        *proxy.Experiment
	adaptive *policies.Adaptive // nil unless its adaptive.enabled
	period   time.Duration
	learnt   *online.Shaped // its learner's shape it was built from; nil without a learner
}

// experiment is the runtime's experiment named name, or nil. "" names the one
// experiment of a runtime that has one: episodes recorded before experiments had
// names on them belong to it.
func (r *runtime) experiment(name string) *expRun {
	if name == "" && len(r.exps) == 1 {
		return r.exps[0]
	}
	for _, e := range r.exps {
		if e.x.Name == name {
			return e
		}
	}
	return nil
}

// Experiments are cfg's experiments as the proxy chooses among them (proxy.Choose),
// in match order: each one's name, match, task rules, placements and arms, without
// augmenters. `camproxy task explain` asks the proxy's own matcher with them.
func Experiments(cfg *config.Config) ([]*proxy.Experiment, error) {
	xs, _, err := buildExperiments(cfg, nil)
	return xs, err
}

// shapeFunc changes one experiment's view before it is built (the learner's arms,
// adaptive allocation on) and gives the augmenters of the arms it added; nil leaves
// the view as it is.
type shapeFunc func(view *config.Config) *online.Shaped

// buildExperiments makes one proxy experiment per view of cfg (cfg.PerExperiment),
// each shaped first when shape is not nil, and returns them with the views they were
// built from. An experiment's Augmenters are the learnt ones shape gave (nil: none).
// Experiments that read the task by the top-level rules share one compiled slice of
// them, so the proxy reads a body once for all of them.
func buildExperiments(cfg *config.Config, shape shapeFunc) ([]*proxy.Experiment, []*config.Config, error) {
	top, err := cfg.Task.Compile()
	if err != nil {
		return nil, nil, fmt.Errorf("task.rules: %w", err)
	}
	views := cfg.PerExperiment()
	xs := make([]*proxy.Experiment, 0, len(views))
	for i, view := range views {
		key := "experiment"
		if len(cfg.Experiments) > 0 {
			key = fmt.Sprintf("experiments[%s]", view.Experiment.Name)
		}
		var learnt map[string]proxy.ContextSource
		if shape != nil {
			if s := shape(view); s != nil {
				view, learnt = s.Config, s.Sources
				views[i] = view
			}
		}
		rules := top
		if !reflect.DeepEqual(view.Task, cfg.Task) {
			if rules, err = view.Task.Compile(); err != nil {
				return nil, nil, fmt.Errorf("%s.task.rules: %w", key, err)
			}
		}
		policy, armPlace, err := buildPolicy(view)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", key, err)
		}
		m := view.Experiment.Match
		match, err := proxy.NewMatch(m.Agents, m.KeyFingerprints, m.Protocols, m.Paths, m.Models, m.Task)
		if err != nil {
			return nil, nil, fmt.Errorf("%s.match: %w", key, err)
		}
		xs = append(xs, &proxy.Experiment{Name: view.Experiment.Name, Match: match, TaskRules: rules, ArmPlacement: armPlace,
			Policy: policy, Augmenters: learnt, Placement: proxy.Placement{Mode: protocol.Placement(view.Placement.Mode), Template: view.Placement.Template}})
	}
	return xs, views, nil
}

// buildRuntime makes the experiments (task rules, placements, arms, matches), the
// augmenters and the side-call rules from cfg.
func (a *App) buildRuntime(cfg *config.Config) (*runtime, error) {
	return a.buildRuntimeWith(cfg, nil)
}

// buildRuntimeWith is buildRuntime reusing the configured augmenters of reuse when it
// is not nil (the config did not change: a rag store is not loaded and embedded again).
func (a *App) buildRuntimeWith(cfg *config.Config, reuse map[string]proxy.ContextSource) (*runtime, error) {
	side, err := cfg.SideCalls.Compile()
	if err != nil {
		return nil, fmt.Errorf("side_calls: %w", err)
	}
	// Each experiment keeps the shape it was built from: the dashboard shows its
	// learner's state as this runtime serves it, never one it does not serve yet.
	shapes := map[string]*online.Shaped{}
	xs, views, err := buildExperiments(cfg, func(view *config.Config) *online.Shaped {
		s := a.shapeFor(view)
		if s != nil {
			shapes[view.Experiment.Name] = s
		}
		return s
	})
	if err != nil {
		return nil, err
	}
	sources := map[string]proxy.ContextSource{}
	if reuse != nil {
		for name := range cfg.Augmenters {
			if src, ok := reuse[name]; ok {
				sources[name] = src
			}
		}
	} else if sources, err = buildAugmenters(cfg, a.Metrics, a.log); err != nil {
		return nil, err
	}
	run := &runtime{rt: &proxy.Runtime{Experiments: xs, SideCalls: side}, sources: sources}
	for i, x := range xs {
		learnt := x.Augmenters
		x.Augmenters = sources
		if len(learnt) > 0 {
			x.Augmenters = maps.Clone(sources)
			maps.Copy(x.Augmenters, learnt)
		}
		e := &expRun{x: x, learnt: shapes[x.Name]}
		if ad := views[i].Experiment.Adaptive; ad.Enabled {
			e.period = ad.UpdatePeriod
			e.adaptive, err = policies.NewAdaptive(x.Policy, a.stats, policies.AdaptiveOptions{UpdatePeriod: ad.UpdatePeriod,
				MinShare: ad.MinShare, Alpha: ad.Alpha, MinEpisodes: ad.MinEpisodes, Control: ad.Control}, a.log)
			if err != nil {
				return nil, fmt.Errorf("experiment %s: adaptive: %w", x.Name, err)
			}
		}
		run.exps = append(run.exps, e)
	}
	return run, nil
}

// activate makes run the one serving new calls and starts its allocators, one per
// adaptive experiment; the previous runtime's stop. Calls in flight finish on the
// runtime they started on.
func (a *App) activate(run *runtime) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopRun != nil {
		a.stopRun()
		a.stopRun = nil
	}
	a.run = run
	for _, e := range run.exps {
		if e.adaptive != nil {
			// Allocate from the statistics now: a reload must not hand a stopped arm
			// its configured share until the first period ends.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = e.adaptive.Update(ctx)
			cancel()
		}
	}
	a.Proxy.SetRuntime(run.rt)
	a.Metrics.ArmWeight.Reset() // arms and experiments that left
	ctx, cancel := context.WithCancel(context.Background())
	a.stopRun = cancel
	for _, e := range run.exps {
		a.setWeights(e.x.Policy)
		if e.adaptive != nil {
			go a.allocate(ctx, e)
		}
	}
}

// allocate recomputes an experiment's adaptive weights every update period.
func (a *App) allocate(ctx context.Context, e *expRun) {
	t := time.NewTicker(e.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := e.adaptive.Update(ctx); err != nil {
				a.log.Warn("adaptive allocation: update failed; keeping the current weights", "experiment", e.x.Name, "err", err)
				continue
			}
			a.setWeights(e.x.Policy)
		}
	}
}

// setWeights publishes an experiment's arm shares (its policy's name is its own).
func (a *App) setWeights(p *policies.Policy) {
	for i, w := range p.Weights() {
		a.Metrics.ArmWeight.WithLabelValues(p.Name(), p.Arms()[i].Name).Set(w)
	}
}

// observeReward feeds a reward to the allocator of the rewarded episode's experiment,
// if it has one: another experiment's statistics never move, whatever its arm is
// called. An episode that records no experiment (stored before episodes carried
// one) is the one experiment's of a one-experiment config (runtime.experiment).
func (a *App) observeReward(ctx context.Context, experiment, arm string, reward float64, previous *float64) {
	a.mu.Lock()
	run := a.run
	a.mu.Unlock()
	if run == nil {
		return
	}
	e := run.experiment(experiment)
	if e == nil || e.adaptive == nil {
		return
	}
	if err := e.adaptive.Observe(ctx, arm, reward, previous); err != nil {
		a.log.Warn("adaptive allocation: reward not counted", "experiment", e.x.Name, "arm", arm, "err", err)
	}
}

// rebuild builds the runtime again from the current config (the learner's state
// changed) and activates it: calls in flight finish on the old runtime, live episodes
// keep their arm and context.
func (a *App) rebuild() error {
	a.buildMu.Lock()
	defer a.buildMu.Unlock()
	a.mu.Lock()
	cfg, cur := a.cfg, a.run
	a.mu.Unlock()
	if a.Proxy == nil || cur == nil {
		return nil // still in New: the first runtime is built there
	}
	// The config is the one cur was built from (reloads hold buildMu too).
	run, err := a.buildRuntimeWith(cfg, cur.sources)
	if err != nil {
		return err
	}
	a.activate(run)
	return nil
}

// ErrRestartRequired names config changes a reload cannot apply.
var ErrRestartRequired = errors.New("needs a restart")

// Reload applies a new config to experiments, augmenters, placements, task rules and
// learners without dropping a call: calls in flight finish on the old runtime, live
// episodes keep their arm and context. An added experiment's learner (or one whose
// learn section changed) starts, a removed one's stops and releases its lease, an
// unchanged one runs on. Keys that need a restart (listeners, upstreams, cache,
// episode store, replay) are reported and left as they are; an invalid config
// changes nothing.
func (a *App) Reload(cfg *config.Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("config reload refused: %w", err)
	}
	a.buildMu.Lock()
	// The learners of added experiments (or changed learn sections) are made and
	// read their state before the runtime is built, so it serves their versions.
	plan, err := a.planLearners(cfg)
	if err != nil {
		a.buildMu.Unlock()
		return fmt.Errorf("config reload refused: %w", err)
	}
	a.mu.Lock()
	old, oldLearn := a.cfg, a.learn
	a.learn = plan.next
	a.mu.Unlock()
	run, err := a.buildRuntime(cfg)
	if err != nil {
		a.mu.Lock()
		a.learn = oldLearn
		a.mu.Unlock()
		a.buildMu.Unlock()
		a.discardLearners(plan)
		return fmt.Errorf("config reload refused: %w", err)
	}
	var kept []string
	for _, k := range []struct {
		key       string
		old, next any
	}{
		{"server", old.Server, cfg.Server}, {"upstreams", old.Upstreams, cfg.Upstreams}, {"cache", old.Cache, cfg.Cache},
		{"episodes", old.Episodes, cfg.Episodes}, {"replay", old.Replay, cfg.Replay},
	} {
		if !reflect.DeepEqual(k.old, k.next) {
			kept = append(kept, k.key)
		}
	}
	a.mu.Lock()
	next := *old
	next.Task, next.SideCalls, next.Placement, next.Augmenters = cfg.Task, cfg.SideCalls, cfg.Placement, cfg.Augmenters
	next.Experiment, next.Experiments, next.Learn = cfg.Experiment, cfg.Experiments, cfg.Learn
	a.cfg = &next
	a.mu.Unlock()
	a.activate(run)
	a.buildMu.Unlock()
	a.applyLearners(plan) // the learners that left stop, releasing their leases; the new ones start
	a.log.Info("config reloaded", "experiments", cfg.ExperimentNames(), "augmenters", len(cfg.Augmenters))
	if len(kept) > 0 {
		return fmt.Errorf("%v changed and %w; they keep their old values", kept, ErrRestartRequired)
	}
	return nil
}

// experiment is the running experiment as the dashboard shows it: the last in match
// order (the default, when there is one; the one experiment of the one-experiment
// form). experimentView shows any.
func (a *App) experiment() admin.Experiment {
	a.mu.Lock()
	run, cfg := a.run, a.cfg
	a.mu.Unlock()
	return a.experimentView(cfg, run, run.exps[len(run.exps)-1])
}

// experimentView is one experiment of run as the dashboard shows it: its arms with
// their current shares, the learners as run serves them, and each of its augmenters'
// breaker.
func (a *App) experimentView(cfg *config.Config, run *runtime, e *expRun) admin.Experiment {
	p := e.x.Policy
	ex := admin.Experiment{Name: p.Name(), Adaptive: e.adaptive != nil}
	ex.Learners = a.learnViews(run)
	var stopped map[string]bool
	if e.adaptive != nil {
		stopped = e.adaptive.Stopped()
	}
	shares := p.Weights()
	for i, arm := range p.Arms() {
		ex.Arms = append(ex.Arms, admin.ArmState{Name: arm.Name, Augmenter: arm.Augmenter, Share: shares[i], Stopped: stopped[arm.Name]})
	}
	for name, src := range e.x.Augmenters {
		st := admin.AugmenterState{Name: name, Type: cfg.Augmenters[name].Type}
		if online.IsLearnArm(name) {
			st.Type = config.AugmenterPlaybook // a learnt version
		}
		if g, ok := src.Augmenter.(interface{ State() gobreaker.State }); ok {
			st.Breaker = g.State().String()
		}
		if g, ok := src.Augmenter.(*augment.Guard); ok {
			st.Latency = g.Latency()
		}
		ex.Augmenters = append(ex.Augmenters, st)
	}
	return ex
}
