package proxy

import (
	"sync"
	"sync/atomic"
)

// contextSources are the context decisions the data plane makes for a call.
var contextSources = [...]string{"miss", "hit", "episode", "none", "fail-open", "skip"}

// stats counts, per arm, the episodes this instance started and its context
// decisions: the dashboard's figures, read as a StatsSnapshot rather than back out
// of Prometheus. Arms are few and long-lived, so a call finds its arm's counters with
// a lock-free sync.Map load and counts with one atomic add; no lock is shared by
// every call.
type stats struct {
	arms sync.Map // arm name → *armCounters
}

type armCounters struct {
	episodes atomic.Int64
	context  [len(contextSources)]atomic.Int64
	other    sync.Map // a source not in contextSources → *atomic.Int64
}

func (s *stats) arm(name string) *armCounters {
	if a, ok := s.arms.Load(name); ok {
		return a.(*armCounters)
	}
	a, _ := s.arms.LoadOrStore(name, &armCounters{})
	return a.(*armCounters)
}

// episodeStarted counts an episode this instance created.
func (s *stats) episodeStarted(arm string) { s.arm(arm).episodes.Add(1) }

// contextServed counts a call's context decision.
func (s *stats) contextServed(arm, source string) {
	a := s.arm(arm)
	for i, src := range contextSources {
		if src == source {
			a.context[i].Add(1)
			return
		}
	}
	n, _ := a.other.LoadOrStore(source, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

// StatsSnapshot is the data plane's counts since the Server started, by arm.
type StatsSnapshot struct {
	Arms map[string]ArmStats
}

// ArmStats is one arm's counts.
type ArmStats struct {
	Episodes int64            // episodes started
	Context  map[string]int64 // context decisions by source (miss, hit, episode, none, fail-open, skip); zeros left out
}

// Stats reads the data plane's counts (the dashboard).
func (s *Server) Stats() StatsSnapshot { return s.stats.snapshot() }

func (s *stats) snapshot() StatsSnapshot {
	out := StatsSnapshot{Arms: map[string]ArmStats{}}
	s.arms.Range(func(k, v any) bool {
		a := v.(*armCounters)
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
		out.Arms[k.(string)] = st
		return true
	})
	return out
}
