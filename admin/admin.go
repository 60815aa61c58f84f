// Package admin owns the control plane: the chi router behind admin_listen with
// health, readiness, metrics, feedback, episodes, rollouts and the dashboard (/ui).
package admin

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/metrics"
)

// Check is one readiness condition.
type Check struct {
	Name string
	Fn   func(ctx context.Context) error
	// Degraded: a failure is reported but the instance stays ready (a dependency
	// with a local fallback).
	Degraded bool
}

// Options are the control plane's dependencies.
type Options struct {
	Logger   *slog.Logger
	Gatherer prometheus.Gatherer
	Metrics  *metrics.Metrics // may be nil
	Ready    []Check
	Episodes episode.Store
	Record   func(ev any) // takes replay events (the recorder's Add)
	// Reward, if set, sees every reward and the one it replaces (adaptive allocation),
	// with the rewarded episode's experiment and arm: the statistics it moves are that
	// experiment's only. experiment is "" for an episode stored before episodes
	// carried one; it is the experiment's only in a single-experiment config.
	Reward   func(ctx context.Context, experiment, arm string, reward float64, previous *float64)
	Rollouts RolloutOptions
	// Token, if set, is required on every endpoint but /healthz, /readyz and /metrics.
	// Without one the API answers loopback peers only, unless AllowUnauthenticated.
	Token string
	// LoopbackOnly: the API answers loopback peers only, token or not (a sidecar).
	LoopbackOnly bool
	// AllowUnauthenticated: without a token, every host may use the API.
	AllowUnauthenticated bool
	// Pprof mounts net/http/pprof at /debug/pprof/, behind the rules above.
	Pprof bool
	// The dashboard (/ui, /v1/status, /v1/episodes?recent=N): the running experiment,
	// the data plane's counts, the replay backlog and the episodes this instance
	// served. Each may be nil: what it would show is left out.
	Experiment func() Experiment
	Traffic    TrafficStats
	Backlog    ReplayBacklog
	Recent     *Recent
}

type api struct {
	o        Options
	rollouts *rollouts
}

// New returns the admin router.
func New(o Options) http.Handler {
	ui := newDashboard(&o) // before the api copies o: it counts the rewards o.Reward sees
	a := &api{o: o, rollouts: newRollouts(o.Rollouts, o.Metrics)}
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Use(guard(&o))
	if o.Episodes != nil {
		r.Post("/v1/feedback", a.feedback)
		r.Get("/v1/episodes/{id}", a.episodeInfo)
		r.Post("/v1/rollouts", a.rollout)
	}
	ui.mount(r)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), 2*time.Second)
		defer cancel()
		failed, degraded := map[string]string{}, map[string]string{}
		for _, c := range o.Ready {
			if err := c.Fn(ctx); err != nil {
				if c.Degraded {
					degraded[c.Name] = err.Error()
				} else {
					failed[c.Name] = err.Error()
				}
			}
		}
		if len(failed) > 0 {
			o.Logger.Warn("not ready", "failed", failed, "degraded", degraded)
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "failed": failed, "degraded": degraded})
			return
		}
		if len(degraded) > 0 {
			writeJSON(w, http.StatusOK, map[string]any{"status": "degraded", "degraded": degraded})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	if o.Pprof {
		mountPprof(r)
	}
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn)}))
	return r
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
