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
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/proxy"
)

// runtime is the reloadable part of a camproxy: the proxy's Runtime plus the adaptive
// allocator steering its policy.
type runtime struct {
	rt       *proxy.Runtime
	adaptive *policies.Adaptive // nil unless experiment.adaptive.enabled
	period   time.Duration
}

// buildRuntime makes task rules, placements, augmenters and the experiment from cfg.
func (a *App) buildRuntime(cfg *config.Config) (*runtime, error) {
	return a.buildRuntimeWith(cfg, nil)
}

// buildRuntimeWith is buildRuntime reusing the configured augmenters of reuse when it
// is not nil (the config did not change: a rag store is not loaded and embedded again).
func (a *App) buildRuntimeWith(cfg *config.Config, reuse map[string]proxy.ContextSource) (*runtime, error) {
	rules, err := cfg.Task.Compile()
	if err != nil {
		return nil, fmt.Errorf("task.rules: %w", err)
	}
	side, err := cfg.SideCalls.Compile()
	if err != nil {
		return nil, fmt.Errorf("side_calls: %w", err)
	}
	cfg, learnt := a.shapeFor(cfg) // its learner's arms, adaptive allocation on
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
	maps.Copy(sources, learnt)
	policy, armPlace, err := buildPolicy(cfg)
	if err != nil {
		return nil, err
	}
	run := &runtime{rt: &proxy.Runtime{TaskRules: rules, SideCalls: side, ArmPlacement: armPlace, Policy: policy, Augmenters: sources,
		Placement: proxy.Placement{Mode: protocol.Placement(cfg.Placement.Mode), Template: cfg.Placement.Template}}}
	if ad := cfg.Experiment.Adaptive; ad.Enabled {
		run.period = ad.UpdatePeriod
		run.adaptive, err = policies.NewAdaptive(policy, a.stats, policies.AdaptiveOptions{UpdatePeriod: ad.UpdatePeriod,
			MinShare: ad.MinShare, Alpha: ad.Alpha, MinEpisodes: ad.MinEpisodes, Control: ad.Control}, a.log)
		if err != nil {
			return nil, fmt.Errorf("experiment.adaptive: %w", err)
		}
	}
	a.setWeights(policy)
	return run, nil
}

// activate makes run the one serving new calls and starts its allocator.
func (a *App) activate(run *runtime) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopRun != nil {
		a.stopRun()
		a.stopRun = nil
	}
	a.run = run
	if run.adaptive != nil {
		// Allocate from the statistics now: a reload must not hand a stopped arm its
		// configured share until the first period ends.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if _, err := run.adaptive.Update(ctx); err == nil {
			a.setWeights(run.rt.Policy)
		}
		cancel()
	}
	a.Proxy.SetRuntime(run.rt)
	if run.adaptive != nil {
		ctx, cancel := context.WithCancel(context.Background())
		a.stopRun = cancel
		go a.allocate(ctx, run)
	}
}

// allocate recomputes the adaptive weights every update period.
func (a *App) allocate(ctx context.Context, run *runtime) {
	t := time.NewTicker(run.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := run.adaptive.Update(ctx); err != nil {
				a.log.Warn("adaptive allocation: update failed; keeping the current weights", "err", err)
				continue
			}
			a.setWeights(run.rt.Policy)
		}
	}
}

func (a *App) setWeights(p *policies.Policy) {
	for i, w := range p.Weights() {
		a.Metrics.ArmWeight.WithLabelValues(p.Arms()[i].Name).Set(w)
	}
}

// observeReward feeds a reward to the adaptive allocator of the rewarded episode's
// experiment, if one runs. A reward for another experiment's episode is never
// counted here, whatever its arm is called; an episode that records no experiment
// (stored before episodes carried one) is the running experiment's.
func (a *App) observeReward(ctx context.Context, experiment, arm string, reward float64, previous *float64) {
	a.mu.Lock()
	run := a.run
	a.mu.Unlock()
	if run == nil || run.adaptive == nil {
		return
	}
	if experiment != "" && experiment != run.rt.Policy.Name() {
		return
	}
	if err := run.adaptive.Observe(ctx, arm, reward, previous); err != nil {
		a.log.Warn("adaptive allocation: reward not counted", "arm", arm, "err", err)
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
	run, err := a.buildRuntimeWith(cfg, cur.rt.Augmenters)
	if err != nil {
		return err
	}
	a.activate(run)
	a.Metrics.ArmWeight.Reset() // arms that left the experiment
	a.setWeights(run.rt.Policy)
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
	next.Task, next.Placement, next.Augmenters, next.Experiment = cfg.Task, cfg.Placement, cfg.Augmenters, cfg.Experiment
	next.Experiments, next.Learn = cfg.Experiments, cfg.Learn
	a.cfg = &next
	a.mu.Unlock()
	a.activate(run)
	a.buildMu.Unlock()
	a.applyLearners(plan) // the learners that left stop, releasing their leases; the new ones start
	a.log.Info("config reloaded", "experiment", cfg.Experiment.Name, "arms", len(cfg.Experiment.Arms), "augmenters", len(cfg.Augmenters))
	if len(kept) > 0 {
		return fmt.Errorf("%v changed and %w; they keep their old values", kept, ErrRestartRequired)
	}
	return nil
}

// experiment is the running experiment as the dashboard shows it: the arms with
// their current shares, and each augmenter's breaker.
func (a *App) experiment() admin.Experiment {
	a.mu.Lock()
	run, cfg := a.run, a.cfg
	a.mu.Unlock()
	p := run.rt.Policy
	ex := admin.Experiment{Name: p.Name(), Adaptive: run.adaptive != nil}
	ex.Learners = a.learnViews()
	var stopped map[string]bool
	if run.adaptive != nil {
		stopped = run.adaptive.Stopped()
	}
	shares := p.Weights()
	for i, arm := range p.Arms() {
		ex.Arms = append(ex.Arms, admin.ArmState{Name: arm.Name, Augmenter: arm.Augmenter, Share: shares[i], Stopped: stopped[arm.Name]})
	}
	for name, src := range run.rt.Augmenters {
		st := admin.AugmenterState{Name: name, Type: cfg.Augmenters[name].Type}
		if isLearnArm(name) {
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
