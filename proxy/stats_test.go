package proxy

import (
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/camproxy/camproxy/metrics"
	"github.com/camproxy/camproxy/protocol/registry"
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

// TestCallSeries: a call's kept series count what looking each one up by its labels
// counted (the same names, labels and values), and a series is made only by the
// first call that counts in it, as before: no zero-valued series for a status, a
// token direction or a context source that no call had.
func TestCallSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	var s stats
	c := s.callSeries(m, "openai", "support", "cam", "http")
	if again := s.callSeries(m, "openai", "support", "cam", "http"); again != c {
		t.Fatal("the series of one route, experiment, arm and transport were looked up twice")
	}
	c.request(200)
	c.request(200)
	c.request(502)
	c.duration.Observe(0.25)
	c.turns.Inc()
	c.contextServed("hit")
	c.contextServed("Source(9)")
	want := `
# HELP camproxy_requests_total Data-plane requests by protocol, experiment, arm and HTTP status code.
# TYPE camproxy_requests_total counter
camproxy_requests_total{arm="cam",code="200",experiment="support",protocol="openai"} 2
camproxy_requests_total{arm="cam",code="502",experiment="support",protocol="openai"} 1
# HELP camproxy_context_total Context decisions by experiment, arm and result (miss, hit, episode, none, fail-open, shed, skip).
# TYPE camproxy_context_total counter
camproxy_context_total{arm="cam",experiment="support",result="Source(9)"} 1
camproxy_context_total{arm="cam",experiment="support",result="hit"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "camproxy_requests_total", "camproxy_context_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.Tokens); n != 0 {
		t.Fatalf("%d token series before any call reported tokens", n)
	}
	c.tokens(4000, 60)
	c.tokens(1, 2)
	if in, out := testutil.ToFloat64(m.Tokens.WithLabelValues("support", "cam", "input")), testutil.ToFloat64(m.Tokens.WithLabelValues("support", "cam", "output")); in != 4001 || out != 62 {
		t.Fatalf("tokens input %v output %v, want 4001 and 62", in, out)
	}
	if got := s.snapshot().Experiments["support"]["cam"].Context; !maps.Equal(got, map[string]int64{"hit": 1, "Source(9)": 1}) {
		t.Fatalf("the dashboard counted %v", got)
	}
}

// TestUpstreamTTFBSeries: the upstream's time-to-first-byte series is looked up once
// per upstream and counts in the series of its label, as WithLabelValues did.
func TestUpstreamTTFBSeries(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	var s stats
	o := s.upstreamTTFB(m, "openai")
	if again := s.upstreamTTFB(m, "openai"); again != o {
		t.Fatal("the upstream's series was looked up twice")
	}
	o.Observe(0.1)
	s.upstreamTTFB(m, "anthropic").Observe(0.2)
	s.upstreamTTFB(m, "openai").Observe(0.3)
	for name, want := range map[string]uint64{"openai": 2, "anthropic": 1} {
		var d dto.Metric
		if err := m.UpstreamTTFB.WithLabelValues(name).(prometheus.Metric).Write(&d); err != nil {
			t.Fatal(err)
		}
		if got := d.GetHistogram().GetSampleCount(); got != want {
			t.Errorf("%s: %d observations, want %d", name, got, want)
		}
	}
}

// TestRouteSeries: a route's list finds the series stats.callSeries keeps for the
// same labels, each kind of call its own (experiment, arm, transport), past the
// list's size as well as within it, and with no list at all.
func TestRouteSeries(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	var s stats
	rt := &route{Protocol: registry.Chat, series: &seriesList{}}
	bare := &route{Protocol: registry.Chat}
	for round := range 2 {
		for i := range 2 * maxListed {
			for _, tr := range []string{"http", "websocket"} {
				x, arm := "x"+strconv.Itoa(i%3), "arm"+strconv.Itoa(i)
				want := s.callSeries(m, rt.Name, x, arm, tr)
				for _, r := range []*route{rt, bare} {
					if got := s.routeSeries(m, r, x, arm, tr); got != want {
						t.Fatalf("round %d: %s/%s/%s: a series other than stats.callSeries'", round, x, arm, tr)
					}
				}
			}
		}
	}
	if n := len(*rt.series.p.Load()); n != maxListed {
		t.Fatalf("the route lists %d series, want %d", n, maxListed)
	}
}
