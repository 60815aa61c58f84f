package proxy

import (
	"maps"
	"sync"
	"testing"
)

// TestStats: episodes and context decisions are counted per arm; sources with no
// count are left out; a source outside the usual ones is still counted.
func TestStats(t *testing.T) {
	type call struct {
		arm, source string
		started     bool
	}
	cases := []struct {
		name  string
		calls []call
		want  map[string]ArmStats
	}{
		{"nothing", nil, map[string]ArmStats{}},
		{"one arm", []call{{"cam", "miss", true}, {"cam", "episode", false}, {"cam", "episode", false}, {"cam", "hit", true}},
			map[string]ArmStats{"cam": {Episodes: 2, Context: map[string]int64{"miss": 1, "hit": 1, "episode": 2}}}},
		{"two arms, an odd source", []call{{"cam", "fail-open", true}, {"baseline", "none", true}, {"baseline", "Source(9)", false}},
			map[string]ArmStats{"cam": {Episodes: 1, Context: map[string]int64{"fail-open": 1}},
				"baseline": {Episodes: 1, Context: map[string]int64{"none": 1, "Source(9)": 1}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s stats
			for _, cl := range c.calls {
				if cl.started {
					s.episodeStarted("default", cl.arm)
				}
				s.contextServed("default", cl.arm, cl.source)
			}
			got := s.snapshot().Arms
			if !maps.EqualFunc(got, c.want, func(a, b ArmStats) bool { return a.Episodes == b.Episodes && maps.Equal(a.Context, b.Context) }) {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestStatsByExperiment: two experiments' arms of one name are counted apart, and
// summed in Arms.
func TestStatsByExperiment(t *testing.T) {
	var s stats
	s.episodeStarted("support", "baseline")
	s.contextServed("support", "baseline", "none")
	s.episodeStarted("coding", "baseline")
	s.contextServed("coding", "baseline", "none")
	s.contextServed("coding", "baseline", "episode")
	got := s.snapshot()
	eq := func(a, b ArmStats) bool { return a.Episodes == b.Episodes && maps.Equal(a.Context, b.Context) }
	want := map[string]map[string]ArmStats{
		"support": {"baseline": {Episodes: 1, Context: map[string]int64{"none": 1}}},
		"coding":  {"baseline": {Episodes: 1, Context: map[string]int64{"none": 1, "episode": 1}}},
	}
	if !maps.EqualFunc(got.Experiments, want, func(a, b map[string]ArmStats) bool { return maps.EqualFunc(a, b, eq) }) {
		t.Errorf("by experiment: got %+v, want %+v", got.Experiments, want)
	}
	if sum := (ArmStats{Episodes: 2, Context: map[string]int64{"none": 2, "episode": 1}}); !eq(got.Arms["baseline"], sum) {
		t.Errorf("arms summed: got %+v, want %+v", got.Arms["baseline"], sum)
	}
}

// TestStatsConcurrent: calls on many goroutines, new arms among them, while the
// dashboard reads, lose no count (run with -race).
func TestStatsConcurrent(t *testing.T) {
	var s stats
	arms := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for range 1000 {
				s.episodeStarted("default", arms[g%3])
				s.contextServed("default", arms[g%3], contextSources[g])
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			_ = s.snapshot()
		}
	})
	wg.Wait()
	for _, arm := range arms {
		a := s.snapshot().Arms[arm]
		var n int64
		for _, v := range a.Context {
			n += v
		}
		if a.Episodes != 2000 || n != 2000 || len(a.Context) != 2 {
			t.Errorf("%s: %+v", arm, a)
		}
	}
}
