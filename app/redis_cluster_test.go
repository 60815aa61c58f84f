package app

import (
	"context"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
)

// TestEveryRedisPartOnCluster: one URL form names the cluster for every part —
// cache, episodes, statistics, the replay stream and the learner's store and lease —
// and each part reports itself: dependency_up 1 and /readyz ready while the cluster
// serves; the lease held on it. Then the master of the lease's slot is killed:
// /readyz names redis:learn-lease (or another part on that master) degraded, and
// once the replica has taken over every part is up again and the lease is held.
func TestEveryRedisPartOnCluster(t *testing.T) {
	c := testkit.StartRedisCluster(t)
	prefix := "camproxy-test:" + strings.ToLower(t.Name())
	url := c.URL()
	e := newEnvWith(t, func(cfg *config.Config) {
		learnConfig(t, url+"&prefix="+prefix)(cfg)
		cfg.Cache.RedisURL = url
		cfg.Episodes.Store = config.StoreRedis
		cfg.Replay.Sinks = append(cfg.Replay.Sinks, url+"&stream="+prefix+":replay")
	}, Options{Logger: testLogger(t), RedisCooldown: 200e6})
	rdb := c.Client()
	defer rdb.Close()
	ctx := context.Background()
	leaseKey := prefix + ":learn-lease"
	parts := []string{"cache", "episodes", "stats", "replay-stream", "learn-lease"}
	allUp := func() bool {
		m := e.metric("camproxy_dependency_up")
		for _, p := range parts {
			if !strings.Contains(m, `part="`+p+`"} 1`) {
				return false
			}
		}
		code, status, _ := testkit.Readyz(e.admin)
		return code == 200 && status == "ready" && rdb.Get(ctx, leaseKey).Val() == e.app.learnerFor(e.cfg.Experiment.Name).Replica()
	}
	testkit.Eventually(t, "every part up, the lease held on the cluster", allUp)
	e.turn(newAgent("book a flight to Lisbon", false))

	m, err := c.MasterOf(ctx, leaseKey)
	if err != nil {
		t.Fatal(err)
	}
	m.Kill()
	t.Cleanup(func() { _ = c.Restart(m) })
	testkit.Eventually(t, "readyz degraded naming a Redis part", func() bool {
		_, status, deg := testkit.Readyz(e.admin)
		for k := range deg {
			if status == "degraded" && strings.HasPrefix(k, "redis:") {
				return true
			}
		}
		return false
	})
	testkit.Eventually(t, "every part up again after the failover", func() bool {
		e.turn(newAgent("book a flight to Porto", false)) // calls answer throughout
		return c.Healthy(ctx) && allUp()
	})
}
