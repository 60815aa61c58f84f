package proxy

import (
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/camproxy/camproxy/metrics"
)

// contextSources are the context decisions the data plane makes for a call.
var contextSources = [...]string{"miss", "hit", "episode", "none", "fail-open", "shed", "skip"}

// stats counts, per experiment and arm, the episodes this instance started and its
// context decisions: the dashboard's figures, read as a StatsSnapshot rather than back
// out of Prometheus. Arms are few and long-lived, so a call finds its arm's counters
// with a lock-free sync.Map load and counts with one atomic add; no lock is shared by
// every call.
type stats struct {
	arms   sync.Map // armKey → *armCounters
	series sync.Map // seriesKey → *callSeries
	ttfb   sync.Map // upstream name → prometheus.Observer (upstream_ttfb_seconds)
}

// upstreamTTFB returns the series of the upstream's time to first byte, looked up in
// the vector once per upstream rather than on every call.
func (s *stats) upstreamTTFB(m *metrics.Metrics, upstream string) prometheus.Observer {
	if o, ok := s.ttfb.Load(upstream); ok {
		return o.(prometheus.Observer)
	}
	o, _ := s.ttfb.LoadOrStore(upstream, m.UpstreamTTFB.WithLabelValues(upstream))
	return o.(prometheus.Observer)
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
	s.arm(experiment, arm).contextServed(source)
}

func (a *armCounters) contextServed(source string) {
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

// callSeries are the Prometheus series one call counts in, for one route, experiment,
// arm and transport: looked up once and kept, so that a call does not find each
// series by its label values (hashing them, checking them, a locked map lookup,
// and a string for its status code) five times over. Series are never deleted from
// these vectors, so a kept one stays the one exported. Routes, experiments and arms
// come from the configuration, so the keys are few. A series that not every call
// counts in (a status code, a token count, a context source) is made, as before, by
// the first call that counts in it: no series shows up at zero that did not before.
type callSeries struct {
	duration  prometheus.Observer
	turns     prometheus.Counter
	ok        lazyCounter // requests_total with code 200: nearly every call's
	tokensIn  lazyCounter
	tokensOut lazyCounter
	context   [len(contextSources)]lazyCounter

	route, experiment, arm string // the labels of the lazy series and of the rare ones
	transport              string
	m                      *metrics.Metrics
	counts                 *armCounters // the dashboard's counts of the experiment's arm
}

// lazyCounter is a series looked up by its first use. Two first uses at once may
// both look it up: they find the same series.
type lazyCounter struct {
	c atomic.Pointer[prometheus.Counter]
}

// get returns the series, looked up by lookup the first time.
func (l *lazyCounter) get(lookup func() prometheus.Counter) prometheus.Counter {
	if c := l.c.Load(); c != nil {
		return *c
	}
	c := lookup()
	l.c.Store(&c)
	return c
}

type seriesKey struct{ route, experiment, arm, transport string }

// callSeries returns the series of a call on route, of experiment and arm, that
// arrived by transport.
func (s *stats) callSeries(m *metrics.Metrics, route, experiment, arm, transport string) *callSeries {
	k := seriesKey{route, experiment, arm, transport}
	if c, ok := s.series.Load(k); ok {
		return c.(*callSeries)
	}
	c := &callSeries{route: route, experiment: experiment, arm: arm, transport: transport, m: m, counts: s.arm(experiment, arm),
		duration: m.RequestDuration.WithLabelValues(route, experiment, arm),
		turns:    m.Turns.WithLabelValues(transport),
	}
	got, _ := s.series.LoadOrStore(k, c)
	return got.(*callSeries)
}

// seriesList is a route's call series, found by comparing the labels of a few
// entries rather than by hashing all four in stats.series: a route sees a few
// experiments' arms over one or two transports. Copy on write; past maxListed
// entries, calls of a new kind look theirs up in stats.series as before.
type seriesList struct{ p atomic.Pointer[[]*callSeries] }

const maxListed = 16

// routeSeries is callSeries of a call on rt, looked up in rt's list first.
func (s *stats) routeSeries(m *metrics.Metrics, rt *route, experiment, arm, transport string) *callSeries {
	l := rt.series
	if l == nil {
		return s.callSeries(m, rt.Name, experiment, arm, transport)
	}
	if p := l.p.Load(); p != nil {
		for _, c := range *p {
			if c.arm == arm && c.experiment == experiment && c.transport == transport {
				return c
			}
		}
	}
	c := s.callSeries(m, rt.Name, experiment, arm, transport)
	for {
		old := l.p.Load()
		var next []*callSeries
		if old != nil {
			if len(*old) >= maxListed || slices.Contains(*old, c) {
				return c
			}
			next = append(slices.Clip(*old), c)
		} else {
			next = []*callSeries{c}
		}
		if l.p.CompareAndSwap(old, &next) {
			return c
		}
	}
}

// request counts a finished call with its status code.
func (c *callSeries) request(status int) {
	if status == 200 {
		c.ok.get(func() prometheus.Counter { return c.m.Requests.WithLabelValues(c.route, c.experiment, c.arm, "200") }).Inc()
		return
	}
	c.m.Requests.WithLabelValues(c.route, c.experiment, c.arm, strconv.Itoa(status)).Inc()
}

// tokens counts the tokens an upstream reported for a call.
func (c *callSeries) tokens(input, output int64) {
	c.tokensIn.get(func() prometheus.Counter { return c.m.Tokens.WithLabelValues(c.experiment, c.arm, "input") }).Add(float64(input))
	c.tokensOut.get(func() prometheus.Counter { return c.m.Tokens.WithLabelValues(c.experiment, c.arm, "output") }).Add(float64(output))
}

// contextServed counts a call's context decision, in Prometheus and for the
// dashboard.
func (c *callSeries) contextServed(source string) {
	c.counts.contextServed(source)
	for i, src := range contextSources {
		if src == source {
			c.context[i].get(func() prometheus.Counter { return c.m.Context.WithLabelValues(c.experiment, c.arm, src) }).Inc()
			return
		}
	}
	c.m.Context.WithLabelValues(c.experiment, c.arm, source).Inc()
}
