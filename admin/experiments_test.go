package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/metrics"
	"github.com/camproxy/camproxy/policies"
)

// TestFeedbackExperiments: two experiments whose arms share names (baseline, cam)
// keep their reward statistics in one store, in memory or in Redis. A reward posted
// for one experiment's episode reaches Options.Reward with that experiment, is
// recorded naming it, and leaves the other experiment's statistics as they were;
// the dashboard shows only the running experiment's rewards.
func TestFeedbackExperiments(t *testing.T) {
	stores := map[string]func(t *testing.T) policies.StatsStore{
		"memory": func(*testing.T) policies.StatsStore { return policies.NewMemoryStats() },
		"redis": func(t *testing.T) policies.StatsStore {
			testkit.QuietRedis()
			rs := testkit.StartRedis(t)
			rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			return policies.NewRedisStats(rdb)
		},
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			stats := newStore(t)
			arms := []policies.Arm{{Name: "baseline", Weight: 1}, {Name: "cam", Weight: 1}}
			allocators := map[string]*policies.Adaptive{}
			for _, x := range []string{"support", "coding"} {
				p, err := policies.New(x, policies.StickyEpisode, false, arms)
				if err != nil {
					t.Fatal(err)
				}
				if allocators[x], err = policies.NewAdaptive(p, stats, policies.AdaptiveOptions{UpdatePeriod: time.Hour, MinShare: 0.05, Alpha: 0.05, MinEpisodes: 10}, nil); err != nil {
					t.Fatal(err)
				}
			}
			store := episode.NewMemory(time.Minute, nil)
			t.Cleanup(func() { _ = store.Close() })
			for _, ep := range []*episode.Episode{
				{ID: "sup-1", Experiment: "support", Arm: "cam", TaskID: "refund"},
				{ID: "cod-1", Experiment: "coding", Arm: "cam", TaskID: "fix"},
				{ID: "cod-2", Experiment: "coding", Arm: "baseline", TaskID: "fix"},
			} {
				if _, _, err := store.Create(ctx, ep); err != nil {
					t.Fatal(err)
				}
			}
			type seen struct{ experiment, arm string }
			var got []seen
			var rec events
			reg := prometheus.NewRegistry()
			h := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Gatherer: reg, Metrics: metrics.New(reg),
				Episodes: store, Record: rec.add,
				Experiment: func() Experiment {
					return Experiment{Name: "coding", Arms: []ArmState{{Name: "baseline"}, {Name: "cam"}}}
				},
				Reward: func(ctx context.Context, experiment, arm string, reward float64, previous *float64) {
					got = append(got, seen{experiment, arm})
					if a := allocators[experiment]; a != nil {
						if err := a.Observe(ctx, arm, reward, previous); err != nil {
							t.Error(err)
						}
					}
				}})
			post := func(id string, reward float64) {
				t.Helper()
				w := httptest.NewRecorder()
				h.ServeHTTP(w, localRequest(http.MethodPost, "/v1/feedback", strings.NewReader(fmt.Sprintf(`{"episode_id":%q,"reward":%v}`, id, reward))))
				if w.Code != http.StatusAccepted {
					t.Fatalf("feedback %s: %d %s", id, w.Code, w.Body)
				}
			}
			load := func(x string) map[string]policies.Stats {
				t.Helper()
				s, err := stats.Load(ctx, x, []string{"baseline", "cam"})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			post("cod-1", 0)
			post("cod-2", 1)
			coding := load("coding")

			post("sup-1", 1)
			post("sup-1", 0.5) // replaces the 1
			if after := load("coding"); after["cam"] != coding["cam"] || after["baseline"] != coding["baseline"] {
				t.Fatalf("support's rewards moved coding's statistics: %+v, was %+v", after, coding)
			}
			if s := load("support")["cam"]; s.N != 1 || s.Mean() != 0.5 {
				t.Fatalf("support cam: %+v, want one reward of 0.5", s)
			}
			if s := load("coding")["cam"]; s.N != 1 || s.Mean() != 0 {
				t.Fatalf("coding cam: %+v, want one reward of 0", s)
			}
			want := []seen{{"coding", "cam"}, {"coding", "baseline"}, {"support", "cam"}, {"support", "cam"}}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("Options.Reward saw %v, want %v", got, want)
			}
			for i, ev := range rec.got {
				if ev.Experiment != want[i].experiment {
					t.Fatalf("reward event %d records experiment %q, want %q", i, ev.Experiment, want[i].experiment)
				}
			}
			// The dashboard runs coding: its cam row has coding's one reward, not support's.
			var st Status
			w := httptest.NewRecorder()
			h.ServeHTTP(w, localRequest(http.MethodGet, "/v1/status", nil))
			if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
				t.Fatal(err)
			}
			for _, a := range st.Arms {
				if a.Name == "cam" && (a.Rewarded != 1 || *a.MeanReward != 0) {
					t.Fatalf("dashboard cam of coding: %+v", a)
				}
			}
			w = httptest.NewRecorder()
			h.ServeHTTP(w, localRequest(http.MethodGet, "/v1/episodes/sup-1", nil))
			var info map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &info); err != nil || info["experiment"] != "support" || info["reward"] != 0.5 {
				t.Fatalf("episode info: %v %s", err, w.Body)
			}
			// Unknown to the store (idled out): 404 as ever, and nothing is credited.
			w = httptest.NewRecorder()
			h.ServeHTTP(w, localRequest(http.MethodPost, "/v1/feedback", strings.NewReader(`{"episode_id":"gone","reward":1}`)))
			if w.Code != http.StatusNotFound || len(got) != len(want) {
				t.Fatalf("unknown episode: %d, %d rewards seen", w.Code, len(got))
			}
		})
	}
}
