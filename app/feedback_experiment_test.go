package app

import (
	"context"
	"testing"
	"time"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/internal/testkit"
)

// TestFeedbackOnlyItsExperiment: a reward for an episode of another experiment
// whose arm has a name of the running experiment's (cam) does not move the running
// experiment's statistics, in memory or in Redis; its own episode's reward does,
// and so does that of an episode stored before episodes carried their experiment
// (the one experiment's).
func TestFeedbackOnlyItsExperiment(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			var redisURL string
			if store == "redis" {
				testkit.QuietRedis()
				redisURL = testkit.StartRedis(t).URL()
			}
			e := newEnv(t, func(c *config.Config) {
				c.Cache.RedisURL = redisURL // the reward statistics' store too
				c.Experiment.Name = "support"
				c.Experiment.Arms = []config.Arm{{Name: "baseline", Weight: 1, Augmenter: "none"}, {Name: "cam", Weight: 1, Augmenter: "cam"}}
				c.Experiment.Adaptive = config.Adaptive{Enabled: true, UpdatePeriod: time.Hour, MinShare: 0.05, Alpha: 0.05, MinEpisodes: 10}
			})
			ctx := context.Background()
			for _, ep := range []*episode.Episode{
				{ID: "cod-1", Experiment: "coding", Arm: "cam", TaskID: "fix"},
				{ID: "sup-1", Experiment: "support", Arm: "cam", TaskID: "refund"},
				{ID: "old-1", Arm: "cam", TaskID: "refund"},
			} {
				if _, _, err := e.app.Episodes.Create(ctx, ep); err != nil {
					t.Fatal(err)
				}
			}
			cam := func() float64 {
				t.Helper()
				s, err := e.app.stats.Load(ctx, "support", []string{"cam"})
				if err != nil {
					t.Fatal(err)
				}
				return s["cam"].N
			}
			postFeedback(t, e.admin, "cod-1", 1)
			if n := cam(); n != 0 {
				t.Fatalf("coding's episode was counted for support's cam: %v rewards", n)
			}
			postFeedback(t, e.admin, "sup-1", 1)
			postFeedback(t, e.admin, "old-1", 0)
			if n := cam(); n != 2 {
				t.Fatalf("support's cam has %v rewards, want its own episode's and the unlabelled one's", n)
			}
		})
	}
}
