package online

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/camproxy/camproxy/admin"
	"github.com/camproxy/camproxy/augment"
	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/proxy"
)

// serving is a state with the playbooks of its served arms, ready to build a runtime.
type serving struct {
	st        *state
	playbooks map[int]*playbook.Playbook
}

// playbook returns version n, loaded once.
func (l *Learner) playbook(ctx context.Context, n int) (*playbook.Playbook, error) {
	if pb, ok := l.cache.Load(n); ok {
		return pb.(*playbook.Playbook), nil
	}
	pb, err := l.versions.Load(ctx, n)
	if err != nil {
		return nil, err
	}
	l.cache.Store(n, pb)
	return pb, nil
}

// prepare loads the playbooks st serves.
func (l *Learner) prepare(ctx context.Context, st *state) (*serving, error) {
	sv := &serving{st: st.clone(), playbooks: map[int]*playbook.Playbook{}}
	for _, arm := range st.served() {
		pb, err := l.playbook(ctx, arm.Version)
		if err != nil {
			return nil, err
		}
		sv.playbooks[arm.Version] = pb
	}
	return sv, nil
}

// serve makes st the state this replica serves, rebuilding its runtime when the
// generation moved. The runtime reads it through Shape while it rebuilds; the
// dashboard shows the state of the runtime that serves (Shaped), so it never names a
// version the runtime does not serve yet, or no longer.
func (l *Learner) serve(ctx context.Context, st *state) error {
	if cur := l.cur.Load(); cur != nil && cur.st.Gen == st.Gen {
		return nil
	}
	sv, err := l.prepare(ctx, st)
	if err != nil {
		return err
	}
	prev := l.cur.Swap(sv)
	if err := l.rt.Rebuild(); err != nil {
		l.cur.CompareAndSwap(sv, prev)
		return fmt.Errorf("runtime with learn generation %d: %w", st.Gen, err)
	}
	l.gauges(st)
	l.log.Info("learn: serving", "generation", st.Gen, "champion", st.Champion, "version", st.ChampionVersion,
		"candidates", len(st.candidates()))
	return nil
}

func (l *Learner) gauges(st *state) {
	l.m.version.Set(float64(st.ChampionVersion))
	l.m.candidates.Set(float64(len(st.candidates())))
}

// Shaped is one experiment's view as this replica serves it under its learner.
type Shaped struct {
	Config  *config.Config                 // the view with the learner's arms, adaptive allocation on
	Sources map[string]proxy.ContextSource // the augmenters of the learner's arms
	served  *serving                       // the state it was shaped from (nil before any)
}

// Shape is view (one of config.PerExperiment) as this replica serves it: the
// configured arms but those the learner removed, the learner's arms, and adaptive
// allocation on. The runtime built from it keeps it for View.
func (l *Learner) Shape(view *config.Config) *Shaped {
	c := *view
	c.Experiment.Adaptive.Enabled = true
	sv := l.cur.Load()
	if sv == nil {
		return &Shaped{Config: &c}
	}
	arms := make([]config.Arm, 0, len(view.Experiment.Arms)+len(sv.st.Arms))
	for _, a := range view.Experiment.Arms {
		if !slices.Contains(sv.st.Removed, a.Name) || a.Name == l.control {
			arms = append(arms, a)
		}
	}
	sources := map[string]proxy.ContextSource{}
	for _, a := range sv.st.served() {
		pb := sv.playbooks[a.Version]
		if pb == nil {
			continue
		}
		arms = append(arms, config.Arm{Name: a.Arm, Weight: 1, Augmenter: a.Arm})
		src := &versionSource{text: pb.Context(l.cfg.TopN), version: "v" + strconv.Itoa(a.Version)}
		sources[a.Arm] = proxy.ContextSource{Name: a.Arm, Version: src.Version, Timeout: time.Second, Augmenter: src}
	}
	c.Experiment.Arms = arms
	return &Shaped{Config: &c, Sources: sources, served: sv}
}

// versionSource serves one immutable version's context.
type versionSource struct{ text, version string }

func (v *versionSource) Augment(context.Context, augment.Request) (string, error) {
	if v.text == "" {
		return "", augment.ErrEmpty
	}
	return v.text, nil
}

func (v *versionSource) Version() string { return v.version }

// refreshStats keeps the learner arms' shared statistics for the dashboard.
func (l *Learner) refreshStats(ctx context.Context) map[string]policies.Stats {
	sv := l.cur.Load()
	if sv == nil {
		return nil
	}
	names := []string{sv.st.Champion, l.control}
	for _, a := range sv.st.Arms {
		names = append(names, a.Arm)
	}
	st, err := l.rt.Stats(ctx, l.exp, names)
	if err != nil {
		return nil
	}
	l.stats.Store(&st)
	return st
}

// lastStats are the statistics the learner loaded last (nil before any).
func (l *Learner) lastStats() map[string]policies.Stats {
	if p := l.stats.Load(); p != nil {
		return *p
	}
	return nil
}

// View is the learner as the dashboard shows it, with the state of served: what the
// runtime serving the experiment was shaped from (nil: none, or none yet).
func (l *Learner) View(served *Shaped) *admin.LearnState {
	out := &admin.LearnState{Experiment: l.exp, Leader: l.leader.Load(), Store: l.store.Location()}
	if served == nil || served.served == nil {
		return out
	}
	st := served.served.st
	out.Champion, out.ChampionVersion, out.Steps, out.Generation = st.Champion, st.ChampionVersion, st.Steps, st.Gen
	stats := l.lastStats()
	for _, a := range st.Arms {
		v := admin.LearnVersion{Version: a.Version, Arm: a.Arm, Parent: a.Parent, Iteration: a.Iteration, Entries: a.Entries,
			Status: a.Status, Reason: a.Reason, CreatedAt: a.CreatedAt}
		if s, ok := stats[a.Arm]; ok && s.N > 0 {
			m := s.Mean()
			v.Rewarded, v.MeanReward = int64(s.N), &m
		}
		out.Versions = append(out.Versions, v)
	}
	return out
}
