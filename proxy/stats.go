package proxy

import (
	"maps"
	"sync"
	"sync/atomic"
)

// contextSources are the context decisions the data plane makes for a call.
var contextSources = [...]string{"miss", "hit", "episode", "none", "fail-open", "shed", "skip"}

// stats counts, per experiment and arm, the episodes this instance started and its
// context decisions: the dashboard's figures, read as a StatsSnapshot rather than back
// out of Prometheus. Arms are few and long-lived, so a call finds its arm's counters
// with a lock-free sync.Map load and counts with one atomic add; no lock is shared by
// every call.
type stats struct {
	arms sync.Map // armKey → *armCounters
}

// armKey is an arm of an experiment: two experiments may each have an arm of one name.
type armKey struct{ experiment, arm string }

type armCounters struct {
	episodes atomic.Int64
	context  [len(contextSources)]atomic.Int64
	other    sync.Map // a source not in contextSources → *atomic.Int64
}

func (s *stats) arm(experiment, name string) *armCounters {
	k := armKey{experiment, name}
	if a, ok := s.arms.Load(k); ok {
		return a.(*armCounters)
	}
	a, _ := s.arms.LoadOrStore(k, &armCounters{})
	return a.(*armCounters)
}

// episodeStarted counts an episode this instance created.
func (s *stats) episodeStarted(experiment, arm string) { s.arm(experiment, arm).episodes.Add(1) }

// contextServed counts a call's context decision.
func (s *stats) contextServed(experiment, arm, source string) {
	a := s.arm(experiment, arm)
	for i, src := range contextSources {
		if src == source {
			a.context[i].Add(1)
			return
		}
	}
	n, _ := a.other.LoadOrStore(source, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

// StatsSnapshot is the data plane's counts since the Server started: by experiment
// and arm, and by arm name summed over the experiments (one experiment's arms, in the
// one-experiment form).
type StatsSnapshot struct {
	Experiments map[string]map[string]ArmStats
	Arms        map[string]ArmStats
}

// ArmStats is one arm's counts.
type ArmStats struct {
	Episodes int64            // episodes started
	Context  map[string]int64 // context decisions by source (miss, hit, episode, none, fail-open, shed, skip); zeros left out
}

// Stats reads the data plane's counts (the dashboard).
func (s *Server) Stats() StatsSnapshot { return s.stats.snapshot() }

func (s *stats) snapshot() StatsSnapshot {
	out := StatsSnapshot{Experiments: map[string]map[string]ArmStats{}, Arms: map[string]ArmStats{}}
	s.arms.Range(func(k, v any) bool {
		key, a := k.(armKey), v.(*armCounters)
		st := ArmStats{Episodes: a.episodes.Load(), Context: map[string]int64{}}
		for i, src := range contextSources {
			if n := a.context[i].Load(); n > 0 {
				st.Context[src] = n
			}
		}
		a.other.Range(func(k, v any) bool {
			if n := v.(*atomic.Int64).Load(); n > 0 {
				st.Context[k.(string)] = n
			}
			return true
		})
		if out.Experiments[key.experiment] == nil {
			out.Experiments[key.experiment] = map[string]ArmStats{}
		}
		out.Experiments[key.experiment][key.arm] = st
		out.Arms[key.arm] = st.add(out.Arms[key.arm])
		return true
	})
	return out
}

// add is s and t counted together.
func (s ArmStats) add(t ArmStats) ArmStats {
	out := ArmStats{Episodes: s.Episodes + t.Episodes, Context: maps.Clone(s.Context)}
	if out.Context == nil {
		out.Context = map[string]int64{}
	}
	for src, n := range t.Context {
		out.Context[src] += n
	}
	return out
}
