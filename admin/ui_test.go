package admin

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/camproxy/camproxy/augment"
	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/metrics"
	"github.com/camproxy/camproxy/proxy"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/report"
)

// uiEnv is an admin plane with a memory episode store, its own registry, a fixed
// running experiment and the data plane's and the recorder's snapshots as set here.
type uiEnv struct {
	t       *testing.T
	h       http.Handler
	m       *metrics.Metrics
	store   episode.Store
	recent  *Recent
	ex      Experiment
	traffic proxy.StatsSnapshot
	backlog replay.Backlog
}

func (e *uiEnv) Stats() proxy.StatsSnapshot { return e.traffic }
func (e *uiEnv) Backlog() replay.Backlog    { return e.backlog }

// count adds n context decisions of source on arm, as the data plane counts them.
func (e *uiEnv) count(arm, source string, n int64) {
	a := e.traffic.Arms[arm]
	if a.Context == nil {
		a.Context = map[string]int64{}
	}
	a.Context[source] += n
	e.traffic.Arms[arm] = a
}

// started counts an episode the data plane started on arm.
func (e *uiEnv) started(arm string) {
	a := e.traffic.Arms[arm]
	a.Episodes++
	e.traffic.Arms[arm] = a
}

func newUIEnv(t *testing.T, token string, live bool) *uiEnv {
	t.Helper()
	reg := prometheus.NewRegistry()
	e := &uiEnv{t: t, m: metrics.New(reg), store: episode.NewMemory(time.Minute, nil), recent: NewRecent(3),
		traffic: proxy.StatsSnapshot{Arms: map[string]proxy.ArmStats{}}, backlog: replay.Backlog{Spooled: map[string]int{}}}
	t.Cleanup(func() { _ = e.store.Close() })
	e.ex = Experiment{Name: "ab", Arms: []ArmState{{Name: "baseline", Augmenter: "none", Share: 0.25}, {Name: "cam", Augmenter: "cam", Share: 0.75}},
		Augmenters: []AugmenterState{{Name: "cam", Type: "cam", Breaker: "open"}}}
	o := Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Gatherer: reg, Metrics: e.m, Episodes: e.store,
		Record: func(any) {}, Recent: e.recent, Token: token, Traffic: e, Backlog: e}
	if live {
		o.Experiment = func() Experiment { return e.ex }
	}
	e.h = New(o)
	return e
}

func (e *uiEnv) do(method, path, body string, hdr map[string]string) *httptest.ResponseRecorder {
	e.t.Helper()
	req := localRequest(method, path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, req)
	return w
}

func (e *uiEnv) episode(id, arm, task string, turns int) {
	e.t.Helper()
	now := time.Now().UTC()
	if _, _, err := e.store.Create(context.Background(), &episode.Episode{ID: id, Arm: arm, TaskID: "t-" + id, Task: task,
		Context: "ctx of " + id, ContextSource: "miss", Turns: turns, StartedAt: now, UpdatedAt: now}); err != nil {
		e.t.Fatal(err)
	}
	for i := range turns {
		e.recent.Add(id, Turn{Turn: i, Status: 200, TotalMs: 12.5, InputTokens: 100, OutputTokens: 7, At: now})
	}
}

func (e *uiEnv) reward(id string, r float64) {
	e.t.Helper()
	if w := e.do(http.MethodPost, "/v1/feedback", fmt.Sprintf(`{"episode_id":%q,"reward":%v}`, id, r), nil); w.Code != http.StatusAccepted {
		e.t.Fatalf("feedback %s: %d %s", id, w.Code, w.Body)
	}
}

func (e *uiEnv) status() Status {
	e.t.Helper()
	w := e.do(http.MethodGet, "/v1/status", "", nil)
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
		e.t.Fatalf("status: %d %s", w.Code, w.Body)
	}
	var st Status
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		e.t.Fatal(err)
	}
	return st
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// tCI is the 95% t interval of xs, computed the long way.
func tCI(xs ...float64) (mean float64, ci [2]float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	half := report.TQuantile(0.975, float64(len(xs)-1)) * math.Sqrt(ss/float64(len(xs)-1)) / math.Sqrt(float64(len(xs)))
	return mean, [2]float64{mean - half, mean + half}
}

// TestUIStatus: /v1/status reports what the running experiment, the data plane, the
// recorder and the posted rewards say, arm by arm: shares, episodes, mean reward with its t interval
// (a replaced reward replaces, not adds), the cache hit rate, the breaker, latency
// percentiles and the replay backlog.
func TestUIStatus(t *testing.T) {
	e := newUIEnv(t, "", true)
	for i, arm := range []string{"cam", "cam", "cam", "baseline", "baseline", "rollout"} {
		id := fmt.Sprintf("ep-%d", i)
		e.episode(id, arm, "task "+id, 1)
		e.started(arm)
	}
	e.reward("ep-0", 1)
	e.reward("ep-1", 0.5)
	e.reward("ep-2", 0)
	e.reward("ep-2", 0.25) // replaces 0
	e.reward("ep-3", 1)
	e.reward("ep-5", 0.5)
	e.count("cam", "miss", 2)
	e.count("cam", "hit", 1)
	e.count("cam", "episode", 9)
	e.count("baseline", "none", 2)
	var lat augment.Latency
	for range 10 {
		lat.Observe(200 * time.Millisecond) // bucket (0.153, 0.381]
	}
	e.ex.Augmenters[0].Latency = lat.Snapshot()
	e.backlog = replay.Backlog{Queue: 4, Spooled: map[string]int{"file:///r": 2, "redis://:****@h:6379/0": 5}}

	st := e.status()
	if st.Experiment != "ab" || st.Episodes != 6 || st.Since.IsZero() {
		t.Fatalf("head: %+v", st)
	}
	camMean, camCI := tCI(1, 0.5, 0.25)
	cases := []struct {
		arm              string
		share            float64
		active           bool
		episodes, reward int64
		mean             *float64
		ci               *[2]float64
	}{
		{"baseline", 0.25, true, 2, 1, ptr(1.0), nil},
		{"cam", 0.75, true, 3, 3, &camMean, &camCI},
		{"rollout", 0, false, 1, 1, ptr(0.5), nil}, // not an arm of the experiment: listed after
	}
	if len(st.Arms) != len(cases) {
		t.Fatalf("arms: %+v", st.Arms)
	}
	for i, c := range cases {
		a := st.Arms[i]
		if a.Name != c.arm || a.Share != c.share || a.Active != c.active || a.Episodes != c.episodes || a.Rewarded != c.reward {
			t.Errorf("arm %d: got %+v, want %+v", i, a, c)
		}
		if (a.MeanReward == nil) != (c.mean == nil) || (a.MeanReward != nil && !near(*a.MeanReward, *c.mean)) {
			t.Errorf("%s mean %v, want %v", c.arm, a.MeanReward, c.mean)
		}
		if (a.CI95 == nil) != (c.ci == nil) || (a.CI95 != nil && (!near(a.CI95[0], c.ci[0]) || !near(a.CI95[1], c.ci[1]))) {
			t.Errorf("%s ci %v, want %v", c.arm, a.CI95, c.ci)
		}
	}
	if st.Arms[1].Context["hit"] != 1 || st.Context.Results["episode"] != 9 || st.Context.HitRate == nil || !near(*st.Context.HitRate, 1.0/3) {
		t.Errorf("context: %+v %+v", st.Context, st.Arms[1].Context)
	}
	if len(st.Augmenters) != 1 {
		t.Fatalf("augmenters: %+v", st.Augmenters)
	}
	g := st.Augmenters[0]
	if g.Name != "cam" || g.Type != "cam" || g.Breaker != "open" || g.Calls != 10 || g.MeanMs == nil || !near(*g.MeanMs, 200) {
		t.Errorf("augmenter: %+v", g)
	}
	// All ten in one bucket: the median interpolates to its middle.
	lo, hi := 0.0001*math.Pow(2.5, 8), 0.0001*math.Pow(2.5, 9)
	if g.P50Ms == nil || math.Abs(*g.P50Ms-1000*(lo+(hi-lo)/2)) > 1e-6 || *g.P99Ms > 1000*hi || *g.P90Ms < *g.P50Ms {
		t.Errorf("percentiles p50 %v p90 %v p99 %v in (%v, %v] ms", *g.P50Ms, *g.P90Ms, *g.P99Ms, 1000*lo, 1000*hi)
	}
	if st.Replay.Queue != 4 || st.Replay.SpooledTotal != 7 || st.Replay.Spooled["redis://:****@h:6379/0"] != 5 {
		t.Errorf("replay: %+v", st.Replay)
	}

	// The running experiment changes (a reload, the adaptive allocator): the next
	// status follows.
	e.ex.Arms[0].Share, e.ex.Arms[1].Share, e.ex.Arms[0].Stopped = 0.9, 0.1, true
	e.ex.Augmenters[0].Breaker = "closed"
	st = e.status()
	if st.Arms[0].Share != 0.9 || !st.Arms[0].Stopped || st.Augmenters[0].Breaker != "closed" {
		t.Errorf("after a change: %+v %+v", st.Arms[0], st.Augmenters[0])
	}
}

// TestUIStatusWithoutExperiment: without a live experiment view only the arms the
// data plane counted are listed, none of them active, and no augmenter; nothing
// rewarded gives no mean, no hit or miss no rate.
func TestUIStatusWithoutExperiment(t *testing.T) {
	e := newUIEnv(t, "", false)
	// Nothing at all yet: empty lists, never null (the page iterates them).
	w := e.do(http.MethodGet, "/v1/status", "", nil)
	for _, want := range []string{`"arms":[]`, `"augmenters":[]`, `"hit_rate":null`, `"spooled":{}`} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("empty status lacks %s: %s", want, w.Body)
		}
	}
	e.started("a")
	e.count("a", "none", 1)
	st := e.status()
	if len(st.Arms) != 1 || st.Arms[0].Name != "a" || st.Arms[0].Active || st.Arms[0].Episodes != 1 || st.Arms[0].Context["none"] != 1 ||
		st.Arms[0].MeanReward != nil || st.Context.HitRate != nil {
		t.Errorf("arms: %+v context %+v", st.Arms, st.Context)
	}
	if len(st.Augmenters) != 0 {
		t.Errorf("augmenters: %+v", st.Augmenters)
	}
}

func TestUIQuantile(t *testing.T) {
	bucket := func(ub float64, n uint64) augment.LatencyBucket {
		return augment.LatencyBucket{UpperBound: ub, Count: n}
	}
	hist := func(count uint64, b ...augment.LatencyBucket) augment.LatencySnapshot {
		return augment.LatencySnapshot{Count: count, Buckets: b} // the rest are in +Inf
	}
	cases := []struct {
		name string
		q    float64
		h    augment.LatencySnapshot
		want *float64 // ms
	}{
		{"empty", 0.5, hist(0, bucket(1, 0)), nil},
		{"first bucket from 0", 0.5, hist(4, bucket(0.1, 4), bucket(1, 4)), ptr(50.0)},
		{"interpolated", 0.5, hist(10, bucket(0.1, 0), bucket(0.3, 10)), ptr(200.0)},
		{"across buckets", 0.9, hist(10, bucket(0.1, 5), bucket(0.2, 8), bucket(0.4, 10)), ptr(300.0)},
		{"+Inf bucket: highest bound", 0.99, hist(10, bucket(0.1, 5), bucket(0.2, 6)), ptr(200.0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := quantileMs(c.q, c.h)
			if (got == nil) != (c.want == nil) || (got != nil && math.Abs(*got-*c.want) > 1e-9) {
				t.Errorf("got %v, want %v", deref(got), deref(c.want))
			}
		})
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestUIRewardMoments(t *testing.T) {
	type obs struct {
		r    float64
		prev *float64
	}
	m01, ci01 := tCI(0, 1)
	cases := []struct {
		name string
		obs  []obs
		mean *float64
		ci   *[2]float64
	}{
		{"none", nil, nil, nil},
		{"one: a mean, no interval", []obs{{0.5, nil}}, ptr(0.5), nil},
		{"two", []obs{{0, nil}, {1, nil}}, &m01, &ci01},
		{"identical: zero width", []obs{{1, nil}, {1, nil}, {1, nil}}, ptr(1.0), &[2]float64{1, 1}},
		{"replaced", []obs{{0, nil}, {0, nil}, {1, ptr(0.0)}}, &m01, &ci01},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := rewardStats{arms: map[armKey]*moments{}}
			for _, o := range c.obs {
				s.observe("x", "a", o.r, o.prev)
				s.observe("y", "a", 1-o.r, nil) // another experiment's arm a: apart
			}
			mean, ci := s.snapshot("x")["a"].meanCI()
			if (mean == nil) != (c.mean == nil) || (mean != nil && !near(*mean, *c.mean)) {
				t.Errorf("mean %v, want %v", deref(mean), deref(c.mean))
			}
			if (ci == nil) != (c.ci == nil) || (ci != nil && (!near(ci[0], c.ci[0]) || !near(ci[1], c.ci[1]))) {
				t.Errorf("ci %v, want %v", ci, c.ci)
			}
		})
	}
}

func TestUIRecent(t *testing.T) {
	r := NewRecent(2)
	r.Add("a", Turn{Turn: 0})
	r.Add("b", Turn{Turn: 0})
	r.Add("a", Turn{Turn: 1}) // a later turn does not make "a" newer
	r.Add("c", Turn{Turn: 0}) // over capacity: "a", the oldest, is forgotten
	for i := 1; i < recentTurns+5; i++ {
		r.Add("c", Turn{Turn: i})
	}
	cases := []struct {
		name string
		n    int
		want string
	}{{"all", 10, "c b"}, {"one", 1, "c"}, {"zero", 0, ""}}
	for _, c := range cases {
		if got := strings.Join(r.IDs(c.n), " "); got != c.want {
			t.Errorf("%s: IDs(%d) = %q, want %q", c.name, c.n, got, c.want)
		}
	}
	if _, _, ok := r.Turns("a"); ok {
		t.Error("an evicted episode still has turns")
	}
	turns, omitted, ok := r.Turns("c")
	if !ok || len(turns) != recentTurns || omitted != 5 || turns[0].Turn != 5 || turns[len(turns)-1].Turn != recentTurns+4 {
		t.Errorf("c: %d turns from %d, %d omitted", len(turns), turns[0].Turn, omitted)
	}
	if NewRecent(0).cap != DefaultRecent {
		t.Error("NewRecent(0) is not the default size")
	}
}

// TestUIEndpoints: the page, its JSON routes and their errors, with and without the
// admin token.
func TestUIEndpoints(t *testing.T) {
	e := newUIEnv(t, "", true)
	e.episode("ep-old", "cam", "an old task", 1)
	e.recent.Add("ep-gone", Turn{}) // served here, since idled out of the store
	e.episode("ep-new", "baseline", strings.Repeat("é", 400), 2)

	cases := []struct {
		name, path string
		code       int
		want       []string
		ctype      string
	}{
		{"root redirects to the page", "/", 302, nil, ""},
		{"recent, newest first, idled out left out", "/v1/episodes?recent=5", 200, []string{`"episode_id":"ep-new"`, `"episode_id":"ep-old"`}, "application/json"},
		{"recent=1", "/v1/episodes?recent=1", 200, []string{`"episode_id":"ep-new"`}, "application/json"},
		{"recent default", "/v1/episodes", 200, []string{`"ep-old"`}, "application/json"},
		{"recent=0", "/v1/episodes?recent=0", 400, []string{`whole number`}, "application/json"},
		{"recent=x", "/v1/episodes?recent=x", 400, []string{`(got \"x\")`}, "application/json"},
		{"turns", "/v1/episodes/ep-new/turns", 200, []string{`"turn":1`, `"output_tokens":7`, `"omitted":0`}, "application/json"},
		{"turns of an unknown episode", "/v1/episodes/nope/turns", 404, []string{"not among"}, "application/json"},
		{"the episode itself is unchanged", "/v1/episodes/ep-old", 200, []string{`"task":"an old task"`}, "application/json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := e.do(http.MethodGet, c.path, "", nil)
			if w.Code != c.code || (c.ctype != "" && w.Header().Get("Content-Type") != c.ctype) {
				t.Fatalf("%s: %d %s %s", c.path, w.Code, w.Header().Get("Content-Type"), w.Body)
			}
			for _, s := range c.want {
				if !strings.Contains(w.Body.String(), s) {
					t.Errorf("%s lacks %s: %s", c.path, s, w.Body)
				}
			}
			if c.code == 302 && w.Header().Get("Location") != "/ui" {
				t.Errorf("redirect to %q", w.Header().Get("Location"))
			}
			if c.name == "recent=1" && strings.Contains(w.Body.String(), "ep-old") {
				t.Error("recent=1 listed two episodes")
			}
			if c.name == "recent, newest first, idled out left out" {
				if strings.Index(w.Body.String(), "ep-new") > strings.Index(w.Body.String(), "ep-old") || strings.Contains(w.Body.String(), "ep-gone") {
					t.Errorf("order or idled-out episode: %s", w.Body)
				}
				var list struct{ Episodes []recentRow }
				_ = json.Unmarshal(w.Body.Bytes(), &list)
				if task := list.Episodes[0].Task; len(task) > maxTaskPreview+len("…") || !strings.HasSuffix(task, "é…") {
					t.Errorf("a long task is cut to %d bytes on a rune boundary: %q", len(task), task)
				}
			}
		})
	}
}

// TestUIPage: the page is one self-contained document: nothing loaded from anywhere
// else, and a CSP that admits exactly its own inline style and script.
func TestUIPage(t *testing.T) {
	e := newUIEnv(t, "", true)
	w := e.do(http.MethodGet, "/ui", "", nil)
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("ui: %d %v", w.Code, w.Header())
	}
	page := w.Body.String()
	if ext := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|@import|url\(\s*["']?(https?:)?//`).FindString(page); ext != "" {
		t.Errorf("the page loads something from elsewhere: %s", ext)
	}
	csp := w.Header().Get("Content-Security-Policy")
	for _, tag := range []string{"script", "style"} {
		m := regexp.MustCompile(`(?s)<`+tag+`>(.*?)</`+tag+`>`).FindAllStringSubmatch(page, -1)
		if len(m) != 1 {
			t.Fatalf("want one inline <%s>, got %d", tag, len(m))
		}
		sum := sha256.Sum256([]byte(m[0][1]))
		if want := tag + "-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %s", csp, want)
		}
	}
	for _, want := range []string{"default-src 'none'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP lacks %s: %s", want, csp)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || w.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers: %v", w.Header())
	}
}

// TestUIToken: with admin.token set the page and its JSON need it; a browser gets it
// once from ?token= and then rides the cookie.
func TestUIToken(t *testing.T) {
	e := newUIEnv(t, "s3cret", true)
	cases := []struct {
		name, path string
		hdr        map[string]string
		code       int
	}{
		{"page without token", "/ui", nil, 401},
		{"status without token", "/v1/status", nil, 401},
		{"recent without token", "/v1/episodes?recent=5", nil, 401},
		{"wrong token", "/ui?token=nope", nil, 401},
		{"bearer", "/v1/status", map[string]string{"Authorization": "Bearer s3cret"}, 200},
		{"cookie", "/v1/episodes?recent=5", map[string]string{"Cookie": "camproxy_admin=s3cret"}, 200},
		{"token in the address: cookie and redirect", "/ui?token=s3cret", nil, 303},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := e.do(http.MethodGet, c.path, "", c.hdr)
			if w.Code != c.code {
				t.Fatalf("%s: %d %s", c.path, w.Code, w.Body)
			}
			if c.code == 303 && (w.Header().Get("Location") != "/ui" || !strings.Contains(w.Header().Get("Set-Cookie"), "camproxy_admin=s3cret")) {
				t.Errorf("redirect %v", w.Header())
			}
		})
	}
}
