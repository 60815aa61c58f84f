package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/camproxy/camproxy/augment"
	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/proxy"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/report"
)

// This file is the dashboard: the page at /ui and the JSON it reads, /v1/status,
// /v1/episodes?recent=N and /v1/episodes/{id}/turns. Counters are this instance's
// since it started, as on /metrics. Every figure is a typed snapshot read from the
// package that keeps it, through the small interfaces below.

// TrafficStats is the data plane's count of episodes started and context decisions,
// by arm (*proxy.Server).
type TrafficStats interface {
	Stats() proxy.StatsSnapshot
}

// ReplayBacklog is what the replay recorder holds back from its sinks (*replay.Recorder).
type ReplayBacklog interface {
	Backlog() replay.Backlog
}

//go:embed ui/index.html
var indexHTML []byte

// Experiment is the running experiment as the dashboard shows it.
type Experiment struct {
	Name       string
	Adaptive   bool // shares are set by Thompson sampling
	Arms       []ArmState
	Augmenters []AugmenterState
	// Learners are the online learners, one per experiment with learn.enabled, in
	// the config's match order.
	Learners []*LearnState
}

// LearnState is one experiment's online learner as this replica serves it.
type LearnState struct {
	Experiment      string
	Leader          bool   // this replica holds the experiment's learner lease
	Store           string // where the versions are
	Champion        string
	ChampionVersion int
	Steps           int
	Generation      int64
	Versions        []LearnVersion // oldest first
}

// LearnVersion is one playbook version and the arm that serves it.
type LearnVersion struct {
	Version, Parent, Iteration, Entries int
	Arm                                 string
	Status                              string // candidate | champion | stopped | retired
	Reason                              string
	CreatedAt                           time.Time
	Rewarded                            int64    // rewarded episodes of its arm, the whole fleet's
	MeanReward                          *float64 // their mean reward
	Share                               float64  // its arm's share of its experiment's new episodes (0 when it does not run)
}

// ArmState is one arm of the running experiment.
type ArmState struct {
	Name      string
	Augmenter string  // "none" or an augmenter name
	Share     float64 // share of new episodes, 0..1
	Stopped   bool    // stopped by the adaptive guardrail
}

// AugmenterState is one augmenter of the running experiment.
type AugmenterState struct {
	Name    string
	Type    string                  // cam, rag, playbook
	Breaker string                  // closed, half-open, open
	Latency augment.LatencySnapshot // its calls (cache misses the breaker let through)
}

// Turn is what the dashboard keeps of one finished call of an episode: no message
// content, only its outcome and timings.
type Turn struct {
	Turn         int       `json:"turn"`
	Status       int       `json:"status"`
	Error        string    `json:"error,omitempty"`
	AugmentMs    float64   `json:"augment_ms"`
	TTFBMs       float64   `json:"ttfb_ms"`
	TotalMs      float64   `json:"total_ms"`
	InputTokens  int64     `json:"input_tokens"`
	OutputTokens int64     `json:"output_tokens"`
	At           time.Time `json:"at"`
}

// Status is GET /v1/status.
type Status struct {
	Experiment string            `json:"experiment"`
	Adaptive   bool              `json:"adaptive"`
	Since      time.Time         `json:"since"` // counters are since this instance started
	At         time.Time         `json:"at"`
	Episodes   int64             `json:"episodes"` // started, every arm
	Arms       []ArmStatus       `json:"arms"`
	Context    ContextStatus     `json:"context"`
	Augmenters []AugmenterStatus `json:"augmenters"`
	Replay     ReplayStatus      `json:"replay"`
	// Learn is the online learner while exactly one runs (the one-experiment form's
	// shape); Learners lists every experiment's, in match order.
	Learn    *LearnStatus   `json:"learn,omitempty"`
	Learners []*LearnStatus `json:"learners,omitempty"`
}

// LearnStatus is one experiment's online learner on the dashboard: the champion,
// and every playbook version with the arm that serves it.
type LearnStatus struct {
	Experiment      string               `json:"experiment"`
	Leader          bool                 `json:"leader"` // this replica holds the experiment's learner lease
	Store           string               `json:"store"`
	Champion        string               `json:"champion"`
	ChampionVersion int                  `json:"champion_version"`
	Steps           int                  `json:"steps"`
	Generation      int64                `json:"generation"`
	Versions        []LearnVersionStatus `json:"versions"` // newest first
}

// LearnVersionStatus is one version.
type LearnVersionStatus struct {
	Version    int       `json:"version"`
	Arm        string    `json:"arm"`
	Parent     int       `json:"parent"`
	Iteration  int       `json:"iteration"`
	Entries    int       `json:"entries"`
	Status     string    `json:"status"` // champion | candidate | stopped | retired
	Reason     string    `json:"reason,omitempty"`
	Share      float64   `json:"share"`    // of new episodes (0 when its arm does not run)
	Rewarded   int64     `json:"rewarded"` // rewarded episodes of its arm, across the fleet
	MeanReward *float64  `json:"mean_reward"`
	CreatedAt  time.Time `json:"created_at"`
}

// ArmStatus is one arm on the dashboard.
type ArmStatus struct {
	Name       string       `json:"name"`
	Augmenter  string       `json:"augmenter,omitempty"`
	Share      float64      `json:"share"`
	Active     bool         `json:"active"`  // an arm of the running experiment (else: an earlier config's, or rollout)
	Stopped    bool         `json:"stopped"` // stopped by the adaptive guardrail
	Episodes   int64        `json:"episodes"`
	Rewarded   int64        `json:"rewarded"`
	MeanReward *float64     `json:"mean_reward"`
	CI95       *[2]float64  `json:"ci95"` // Student's t interval of the mean, as in camproxy report
	Context    ContextCount `json:"context"`
}

// ContextCount counts context decisions by result.
type ContextCount map[string]int64

// ContextStatus is the context cache's effect.
type ContextStatus struct {
	Results ContextCount `json:"results"`  // miss, hit, episode, none, fail-open, shed, skip
	HitRate *float64     `json:"hit_rate"` // hit / (hit + miss): new episodes served from the cache
}

// AugmenterStatus is one augmenter's breaker and latency.
type AugmenterStatus struct {
	Name    string   `json:"name"`
	Type    string   `json:"type,omitempty"`
	Breaker string   `json:"breaker"` // closed, half-open, open ("" when unknown)
	Calls   uint64   `json:"calls"`   // augmenter calls (cache misses)
	MeanMs  *float64 `json:"mean_ms"`
	P50Ms   *float64 `json:"p50_ms"` // estimated from the histogram's buckets, as histogram_quantile
	P90Ms   *float64 `json:"p90_ms"`
	P99Ms   *float64 `json:"p99_ms"`
}

// ReplayStatus is the replay recorder's backlog.
type ReplayStatus struct {
	Queue        int64            `json:"queue"`         // events in memory
	Spooled      map[string]int64 `json:"spooled"`       // events in the local spool, by sink
	SpooledTotal int64            `json:"spooled_total"` // every sink
}

// dashboard serves the page and its JSON.
type dashboard struct {
	o       *Options
	since   time.Time
	rewards rewardStats
	csp     string
}

// newDashboard hooks the dashboard's reward statistics into o.Reward.
func newDashboard(o *Options) *dashboard {
	d := &dashboard{o: o, since: time.Now().UTC(), rewards: rewardStats{arms: map[armKey]*moments{}}, csp: pageCSP(indexHTML)}
	next := o.Reward
	o.Reward = func(ctx context.Context, experiment, arm string, reward float64, previous *float64) {
		d.rewards.observe(experiment, arm, reward, previous)
		if next != nil {
			next(ctx, experiment, arm, reward, previous)
		}
	}
	return d
}

func (d *dashboard) mount(r chi.Router) {
	r.Get("/", func(w http.ResponseWriter, req *http.Request) { http.Redirect(w, req, "ui", http.StatusFound) })
	r.Get("/ui", d.page)
	r.Get("/v1/status", d.status)
	if d.o.Episodes != nil {
		r.Get("/v1/episodes", d.recent)
		r.Get("/v1/episodes/{id}/turns", d.turns)
	}
}

// pageCSP allows the page's own inline style and script (by hash) and requests to
// this origin, nothing else: no CDN, and no script a stored task or context could
// smuggle in.
func pageCSP(page []byte) string {
	hash := func(open, end string) string {
		_, rest, ok := bytes.Cut(page, []byte(open))
		if !ok {
			return "'none'"
		}
		body, _, ok := bytes.Cut(rest, []byte(end))
		if !ok {
			return "'none'"
		}
		sum := sha256.Sum256(body)
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	return "default-src 'none'; script-src " + hash("<script>", "</script>") + "; style-src " + hash("<style>", "</style>") +
		"; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}

func (d *dashboard) page(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", d.csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	_, _ = w.Write(indexHTML)
}

func (d *dashboard) status(w http.ResponseWriter, _ *http.Request) {
	st := d.build()
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, st)
}

// build assembles the status from the running experiment, the data plane's and the
// replay recorder's snapshots and the dashboard's reward statistics.
func (d *dashboard) build() Status {
	st := Status{Since: d.since, At: time.Now().UTC(), Arms: []ArmStatus{}, Augmenters: []AugmenterStatus{},
		Context: ContextStatus{Results: ContextCount{}}, Replay: ReplayStatus{Spooled: map[string]int64{}}}

	var ex Experiment
	if d.o.Experiment != nil {
		ex = d.o.Experiment()
	}
	st.Experiment, st.Adaptive = ex.Name, ex.Adaptive
	for _, l := range ex.Learners {
		ls := &LearnStatus{Experiment: l.Experiment, Leader: l.Leader, Store: l.Store, Champion: l.Champion,
			ChampionVersion: l.ChampionVersion, Steps: l.Steps, Generation: l.Generation, Versions: []LearnVersionStatus{}}
		for i := len(l.Versions) - 1; i >= 0; i-- {
			v := l.Versions[i]
			ls.Versions = append(ls.Versions, LearnVersionStatus{Version: v.Version, Arm: v.Arm, Parent: v.Parent,
				Iteration: v.Iteration, Entries: v.Entries, Status: v.Status, Reason: v.Reason, Share: v.Share,
				Rewarded: v.Rewarded, MeanReward: v.MeanReward, CreatedAt: v.CreatedAt})
		}
		st.Learners = append(st.Learners, ls)
	}
	if len(st.Learners) == 1 {
		st.Learn = st.Learners[0]
	}

	arms := map[string]*ArmStatus{}
	arm := func(name string) *ArmStatus {
		a := arms[name]
		if a == nil {
			a = &ArmStatus{Name: name, Context: ContextCount{}}
			arms[name] = a
		}
		return a
	}
	var order []string
	for _, as := range ex.Arms {
		a := arm(as.Name)
		a.Augmenter, a.Share, a.Active, a.Stopped = as.Augmenter, as.Share, true, as.Stopped
		order = append(order, as.Name)
	}
	if d.o.Traffic != nil {
		for name, t := range d.o.Traffic.Stats().Arms {
			a := arm(name)
			a.Episodes = t.Episodes
			st.Episodes += t.Episodes
			for res, n := range t.Context {
				a.Context[res] += n
				st.Context.Results[res] += n
			}
		}
	}
	for name, m := range d.rewards.snapshot(ex.Name) {
		a := arm(name)
		a.Rewarded = int64(m.n)
		a.MeanReward, a.CI95 = m.meanCI()
	}
	// Arms of an earlier config or of rollouts, after the running ones, by name.
	var others []string
	for name := range arms {
		if !slices.Contains(order, name) {
			others = append(others, name)
		}
	}
	slices.Sort(others)
	for _, name := range append(order, others...) {
		st.Arms = append(st.Arms, *arms[name])
	}
	if hit, miss := st.Context.Results["hit"], st.Context.Results["miss"]; hit+miss > 0 {
		st.Context.HitRate = ptr(float64(hit) / float64(hit+miss))
	}

	for _, as := range ex.Augmenters {
		a := AugmenterStatus{Name: as.Name, Type: as.Type, Breaker: as.Breaker, Calls: as.Latency.Count}
		if l := as.Latency; l.Count > 0 {
			a.MeanMs = ptr(l.Sum.Seconds() / float64(l.Count) * 1000)
			a.P50Ms, a.P90Ms, a.P99Ms = quantileMs(0.5, l), quantileMs(0.9, l), quantileMs(0.99, l)
		}
		st.Augmenters = append(st.Augmenters, a)
	}
	slices.SortFunc(st.Augmenters, func(a, b AugmenterStatus) int { return strings.Compare(a.Name, b.Name) })

	if d.o.Backlog != nil {
		b := d.o.Backlog.Backlog()
		st.Replay.Queue = int64(b.Queue)
		for sink, n := range b.Spooled {
			st.Replay.Spooled[sink] = int64(n)
			st.Replay.SpooledTotal += int64(n)
		}
	}
	return st
}

func ptr[T any](v T) *T { return &v }

// quantileMs estimates the q-quantile of a histogram in milliseconds as Prometheus's
// histogram_quantile does: linear interpolation inside the bucket holding the rank,
// the lowest bucket starting at 0, a rank beyond the last bucket (in +Inf) giving the
// highest finite bound.
func quantileMs(q float64, h augment.LatencySnapshot) *float64 {
	if h.Count == 0 {
		return nil
	}
	rank := q * float64(h.Count)
	lower, below := 0.0, 0.0
	for _, b := range h.Buckets {
		upper, cum := b.UpperBound, float64(b.Count)
		if cum >= rank {
			v := upper
			if n := cum - below; n > 0 {
				v = lower + (upper-lower)*(rank-below)/n
			}
			return ptr(v * 1000)
		}
		lower, below = upper, cum
	}
	return ptr(lower * 1000)
}

// rewardStats are the dashboard's reward moments per arm of each experiment, fed
// by every reward posted to this instance; a replaced reward moves them back.
type rewardStats struct {
	mu   sync.Mutex
	arms map[armKey]*moments
}

// armKey is an arm of an experiment ("": the episode recorded none).
type armKey struct{ experiment, arm string }

type moments struct{ n, sum, sumSq float64 }

func (s *rewardStats) observe(experiment, arm string, reward float64, previous *float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := armKey{experiment, arm}
	m := s.arms[k]
	if m == nil {
		m = &moments{}
		s.arms[k] = m
	}
	if previous == nil {
		m.n++
	} else {
		m.sum -= *previous
		m.sumSq -= *previous * *previous
	}
	m.sum += reward
	m.sumSq += reward * reward
}

// snapshot is the moments of experiment's arms, by arm, with those of episodes that
// recorded no experiment (stored before episodes carried one: the running
// experiment's when there is one); other experiments' arms of the same names are
// left out.
func (s *rewardStats) snapshot(experiment string) map[string]moments {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]moments{}
	for k, v := range s.arms {
		if k.experiment != experiment && k.experiment != "" {
			continue
		}
		m := out[k.arm]
		m.n, m.sum, m.sumSq = m.n+v.n, m.sum+v.sum, m.sumSq+v.sumSq
		out[k.arm] = m
	}
	return out
}

// meanCI is the mean and its 95% Student's t interval (from two rewards on), the
// interval camproxy report prints.
func (m moments) meanCI() (*float64, *[2]float64) {
	if m.n < 1 {
		return nil, nil
	}
	mean := m.sum / m.n
	if m.n < 2 {
		return &mean, nil
	}
	variance := max((m.sumSq-m.n*mean*mean)/(m.n-1), 0)
	half := report.TQuantile(0.975, m.n-1) * math.Sqrt(variance/m.n)
	return &mean, &[2]float64{mean - half, mean + half}
}

// recentRow is one row of GET /v1/episodes?recent=N.
type recentRow struct {
	ID            string    `json:"episode_id"`
	TaskID        string    `json:"task_id"`
	Task          string    `json:"task"`
	Experiment    string    `json:"experiment"` // "" for an episode stored before episodes carried one
	Arm           string    `json:"arm"`
	ContextSource string    `json:"context_source"`
	Model         string    `json:"model"`
	Turns         int       `json:"turns"`
	Reward        *float64  `json:"reward"`
	Success       *bool     `json:"success"`
	StartedAt     time.Time `json:"started_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// maxTaskPreview bounds the task text of a list row; the episode itself has it whole.
const maxTaskPreview = 300

// recent handles GET /v1/episodes?recent=N: the N episodes this instance started
// last, newest first (default 20); those that idled out of the store are left out.
func (d *dashboard) recent(w http.ResponseWriter, r *http.Request) {
	n := 20
	if s := r.URL.Query().Get("recent"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			writeErr(w, http.StatusBadRequest, fmt.Sprintf(`"recent" must be a whole number ≥ 1 (got %q)`, s))
			return
		}
		n = v
	}
	rows := []recentRow{}
	if d.o.Recent != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		for _, id := range d.o.Recent.IDs(n) {
			ep, err := d.o.Episodes.Get(ctx, id)
			if errors.Is(err, episode.ErrNotFound) {
				continue
			}
			if err != nil {
				writeErr(w, http.StatusServiceUnavailable, "episode store unavailable; retry")
				return
			}
			task := ep.Task
			if len(task) > maxTaskPreview {
				task = truncate(task, maxTaskPreview) + "…"
			}
			rows = append(rows, recentRow{ID: ep.ID, TaskID: ep.TaskID, Task: task, Experiment: ep.Experiment, Arm: ep.Arm, ContextSource: ep.ContextSource,
				Model: ep.Model, Turns: ep.Turns, Reward: ep.Reward, Success: ep.Success, StartedAt: ep.StartedAt, UpdatedAt: ep.UpdatedAt})
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"episodes": rows})
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// turns handles GET /v1/episodes/{id}/turns: the calls of an episode this instance
// served (at most its last 64), with their status, timings and tokens.
func (d *dashboard) turns(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	var (
		turns   []Turn
		omitted int
		ok      bool
	)
	if d.o.Recent != nil {
		turns, omitted, ok = d.o.Recent.Turns(id)
	}
	if !ok {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("episode %q is not among this instance's recent episodes", id))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"episode_id": id, "turns": turns, "omitted": omitted})
}
