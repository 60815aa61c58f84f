// Package metrics owns camproxy's Prometheus metrics: their names, labels and
// buckets, registered on a registry the caller provides (never the default one).
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "camproxy"

// Metrics is every metric camproxy exports. The names are a contract (DESIGN.md).
// A series labelled by arm is labelled by its experiment too (an arm's name is its
// experiment's own: two experiments may each have a baseline); the experiment label's
// values are the configured experiments' names, "" on calls no experiment took.
type Metrics struct {
	Requests        *prometheus.CounterVec   // protocol, experiment, arm, code
	RequestDuration *prometheus.HistogramVec // protocol, experiment, arm
	UpstreamTTFB    *prometheus.HistogramVec // protocol
	Context         *prometheus.CounterVec   // experiment, arm, result
	AugmentDuration *prometheus.HistogramVec // augmenter
	ContextDuration *prometheus.HistogramVec // experiment, arm: time to a new episode's context (cache or augmenter)
	ArmWeight       *prometheus.GaugeVec     // experiment, arm: current traffic share
	BreakerState    *prometheus.GaugeVec     // augmenter; 0 closed, 1 half-open, 2 open
	Episodes        *prometheus.CounterVec   // experiment, arm
	SideCalls       *prometheus.CounterVec   // reason: an agent's auxiliary calls relayed unaugmented
	Rewards         *prometheus.CounterVec   // experiment, arm
	RewardSum       *prometheus.GaugeVec     // experiment, arm; a gauge: rewards may be negative, and a replaced reward moves it back
	ReplayEvents    *prometheus.CounterVec   // type, sink, result
	ReplayQueue     prometheus.Gauge
	ReplaySpooled   *prometheus.GaugeVec   // sink: events waiting in the local spool
	Tokens          *prometheus.CounterVec // experiment, arm, direction
	Dependencies    *Dependencies          // dependency_up{dependency,part}
	// RolloutsInFlight and RolloutsQueued are the rollouts (POST /v1/rollouts) holding
	// one of rollouts.max_in_flight slots, and those waiting for one.
	RolloutsInFlight, RolloutsQueued prometheus.Gauge
	// Sockets are the open Responses WebSocket sessions; Turns the augmented calls
	// by the transport they arrived on (http, websocket).
	Sockets prometheus.Gauge
	Turns   *prometheus.CounterVec // transport
	// Rejected are the data-plane calls refused past server.max_in_flight, by reason
	// (queue_full, queue_timeout); Admission reports the calls holding a slot and
	// those waiting for one (in_flight, queued), read when scraped.
	Rejected  *prometheus.CounterVec // reason
	Admission *Admission
}

// latencyBuckets spans 100µs to ~100s: gateway overhead up to long generations.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2.5, 16)

// New creates the metrics and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "requests_total",
			Help: "Data-plane requests by protocol, experiment, arm and HTTP status code."}, []string{"protocol", "experiment", "arm", "code"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "request_duration_seconds",
			Help: "Time from request to the end of the response.", Buckets: latencyBuckets}, []string{"protocol", "experiment", "arm"}),
		UpstreamTTFB: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "upstream_ttfb_seconds",
			Help: "Time until the upstream's response headers arrived.", Buckets: latencyBuckets}, []string{"protocol"}),
		Context: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "context_total",
			Help: "Context decisions by experiment, arm and result (miss, hit, episode, none, fail-open, shed, skip)."}, []string{"experiment", "arm", "result"}),
		AugmentDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "augment_duration_seconds",
			Help: "Duration of augmenter calls (cache misses).", Buckets: latencyBuckets}, []string{"augmenter"}),
		ContextDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "context_duration_seconds",
			Help: "Time to get a new episode's context (cache, then augmenter), by experiment and arm.", Buckets: latencyBuckets}, []string{"experiment", "arm"}),
		ArmWeight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "arm_weight",
			Help: "Share of its experiment's new episodes assigned to each arm (configured, or set by adaptive allocation)."}, []string{"experiment", "arm"}),
		BreakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "breaker_state",
			Help: "Circuit breaker state per augmenter: 0 closed, 1 half-open, 2 open."}, []string{"augmenter"}),
		Episodes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "episodes_total",
			Help: "Episodes started, by experiment and arm."}, []string{"experiment", "arm"}),
		SideCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "side_calls_total",
			Help: "Side calls (an agent's title, compaction or probe calls) relayed unaugmented, by reason."}, []string{"reason"}),
		Rewards: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "rewards_total",
			Help: "Episodes rewarded, by experiment and arm (a replaced reward is not counted again)."}, []string{"experiment", "arm"}),
		RewardSum: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "reward_sum",
			Help: "Sum of the current rewards of rewarded episodes, by experiment and arm."}, []string{"experiment", "arm"}),
		ReplayEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "replay_events_total",
			Help: "Replay events by type, sink and result."}, []string{"type", "sink", "result"}),
		Dependencies: &Dependencies{desc: prometheus.NewDesc(namespace+"_dependency_up",
			"1 while a part of camproxy uses its shared dependency, 0 while it serves from its local fallback or cannot reach it.",
			[]string{"dependency", "part"}, nil)},
		ReplayQueue: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "replay_queue_depth",
			Help: "Replay events waiting in the in-memory queue."}),
		ReplaySpooled: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "replay_spooled_events",
			Help: "Replay events waiting in the local spool of a sink that was down or behind."}, []string{"sink"}),
		Tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "tokens_total",
			Help: "Tokens reported by upstreams, by experiment, arm and direction (input, output)."}, []string{"experiment", "arm", "direction"}),
		RolloutsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "rollouts_in_flight",
			Help: "Rollouts holding one of rollouts.max_in_flight slots: their agent runs, or they wait for its reward."}),
		RolloutsQueued: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "rollouts_queued",
			Help: "Rollouts waiting for a slot: all rollouts.max_in_flight are taken."}),
		Sockets: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "websocket_sessions",
			Help: "Open Responses API WebSocket sessions (one socket, one session)."}),
		Turns: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "turns_total",
			Help: "Augmented calls that ran the pipeline, by the transport they arrived on (http, websocket)."}, []string{"transport"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "rejected_total",
			Help: "Data-plane calls refused with 503 past server.max_in_flight, by reason (queue_full, queue_timeout)."}, []string{"reason"}),
		Admission: &Admission{
			inFlight: prometheus.NewDesc(namespace+"_in_flight",
				"Data-plane calls holding one of server.max_in_flight slots (a stream until its last event).", nil, nil),
			queued: prometheus.NewDesc(namespace+"_queued",
				"Data-plane calls waiting for a slot, at most server.queue_timeout.", nil, nil),
			limit: prometheus.NewDesc(namespace+"_in_flight_limit",
				"Data-plane calls admitted at once now: server.max_in_flight, or less while the CPU is saturated.", nil, nil)},
	}
	reg.MustRegister(m.Requests, m.RequestDuration, m.UpstreamTTFB, m.Context, m.AugmentDuration, m.ContextDuration, m.ArmWeight, m.BreakerState,
		m.Episodes, m.SideCalls, m.Rewards, m.RewardSum, m.ReplayEvents, m.ReplayQueue, m.ReplaySpooled, m.Tokens, m.Dependencies,
		m.RolloutsInFlight, m.RolloutsQueued, m.Sockets, m.Turns, m.Rejected, m.Admission)
	return m
}

// Admission is camproxy_in_flight, camproxy_queued and camproxy_in_flight_limit, read
// from the data plane's admission limit when scraped: the call path moves its own
// counters, no gauge.
type Admission struct {
	inFlight, queued, limit *prometheus.Desc
	mu                      sync.Mutex
	read                    func() (inFlight, queued, limit int)
}

// Set names the function the gauges read (the data plane's, once it is built).
func (a *Admission) Set(read func() (inFlight, queued, limit int)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.read = read
}

func (a *Admission) Describe(ch chan<- *prometheus.Desc) {
	ch <- a.inFlight
	ch <- a.queued
	ch <- a.limit
}

func (a *Admission) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	read := a.read
	a.mu.Unlock()
	var n, q, l int
	if read != nil {
		n, q, l = read()
	}
	ch <- prometheus.MustNewConstMetric(a.inFlight, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(a.queued, prometheus.GaugeValue, float64(q))
	ch <- prometheus.MustNewConstMetric(a.limit, prometheus.GaugeValue, float64(l))
}

// Dependencies is camproxy_dependency_up{dependency,part}: each part (the context
// cache, the episode store, …) reports its state when scraped, so the gauge is never
// stale, whatever path (a call, a retry loop, a recovery) changed it.
type Dependencies struct {
	desc  *prometheus.Desc
	mu    sync.Mutex
	parts []dependencyPart
}

type dependencyPart struct {
	dependency, part string
	up               func() bool
}

// Add reports part of dependency (e.g. "redis", "cache") as up() says.
func (d *Dependencies) Add(dependency, part string, up func() bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.parts = append(d.parts, dependencyPart{dependency, part, up})
}

// Up is the gauge's value for one part now: 1, 0, or -1 for a part never added.
func (d *Dependencies) Up(dependency, part string) float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.parts {
		if p.dependency == dependency && p.part == part {
			return gaugeValue(p.up())
		}
	}
	return -1
}

func (d *Dependencies) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

func (d *Dependencies) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	parts := append([]dependencyPart(nil), d.parts...)
	d.mu.Unlock()
	for _, p := range parts {
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, gaugeValue(p.up()), p.dependency, p.part)
	}
}

func gaugeValue(up bool) float64 {
	if up {
		return 1
	}
	return 0
}
