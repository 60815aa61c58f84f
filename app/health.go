package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/admin"
	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/redisx"
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/replay/location"
)

// Redis-backed parts, as /readyz and camproxy_dependency_up{dependency="redis",part}
// name them.
const (
	partCache    = "cache"         // the context cache's shared tier and its load lock
	partEpisodes = "episodes"      // the episode store and stitching tips
	partStats    = "stats"         // adaptive allocation's reward statistics
	partStream   = "replay-stream" // a redis:// replay sink
	partLease    = "learn-lease"   // the online learner's lease
)

// addRedisPart reports one Redis-backed part: the gauge follows state (false while
// the part serves from its local fallback or its last Redis call failed), and
// /readyz says degraded, naming the part and why, while state is false or, when
// rdb is set, Redis does not answer a PING. Degraded, not down: every part fails
// open, so losing Redis must not take the instance out of service.
func (a *App) addRedisPart(part string, rdb redis.UniversalClient, state func() (bool, error)) {
	a.Metrics.Dependencies.Add("redis", part, func() bool { up, _ := state(); return up })
	a.redisChecks = append(a.redisChecks, admin.Check{Name: "redis:" + part, Degraded: true, Fn: func(ctx context.Context) error {
		if up, err := state(); !up {
			return fmt.Errorf("serving from local fallback: %v", err)
		}
		if rdb != nil {
			if err := ping(ctx, rdb); err != nil {
				return fmt.Errorf("redis does not answer: %w", err)
			}
		}
		return nil
	}})
}

// ping checks that rdb answers. On a Cluster it pings every master of the client's
// slot map: one PING goes to one node, and a map still naming a master that failed
// over would make every call to its slots fail while the PING said ready. A failed
// ping has the client reload its map.
func ping(ctx context.Context, rdb redis.UniversalClient) error {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return rdb.Ping(ctx).Err()
	}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		if err := node.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("%s: %w", node.Options().Addr, err)
		}
		return nil
	})
	if err != nil {
		cc.ReloadState(ctx)
	}
	return err
}

// opState is the state of a part with no fallback of its own (statistics, the
// lease): up while its last Redis call succeeded.
type opState struct {
	part string
	log  *slog.Logger
	err  atomic.Pointer[error] // nil = up
}

// observe records the outcome of one Redis call, logging the transitions.
func (s *opState) observe(err error) {
	if err == nil {
		if s.err.Swap(nil) != nil {
			s.log.Info("redis is back", "part", s.part)
		}
		return
	}
	if s.err.Swap(&err) == nil {
		s.log.Warn("redis failed", "part", s.part, "err", err)
	}
}

func (s *opState) state() (bool, error) {
	if p := s.err.Load(); p != nil {
		return false, *p
	}
	return true, nil
}

// trackedStats is a StatsStore whose Redis calls feed a part's state.
type trackedStats struct {
	policies.StatsStore
	st *opState
}

func (t trackedStats) Add(ctx context.Context, experiment, arm string, d policies.Stats) error {
	err := t.StatsStore.Add(ctx, experiment, arm, d)
	t.st.observe(err)
	return err
}

func (t trackedStats) Load(ctx context.Context, experiment string, arms []string) (map[string]policies.Stats, error) {
	m, err := t.StatsStore.Load(ctx, experiment, arms)
	t.st.observe(err)
	return m, err
}

// redisTuning is for the clients on the request path: a stalled Redis must cost one
// short deadline, not go-redis's defaults (5 s reads, retries with backoff). A URL
// that sets one of these keeps its own.
var redisTuning = redisx.Tuning{DialTimeout: time.Second, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
	MaxRetries: 1, DialerRetries: 1, ClusterReload: 5 * time.Second}

// redisClient returns a client for raw (any redisx form), one per distinct URL: the
// parts that name the same Redis share it.
func (a *App) redisClient(raw string) (redis.UniversalClient, error) {
	if raw == "" {
		return nil, nil
	}
	u, err := redisx.Parse(raw)
	if err != nil {
		return nil, err
	}
	u.Tune(redisTuning)
	if c, ok := a.redisByURL[u.Identity()]; ok {
		return c, nil
	}
	c, err := u.Client()
	if err != nil {
		return nil, err
	}
	if a.redisByURL == nil {
		a.redisByURL = map[string]redis.UniversalClient{}
	}
	a.redisByURL[u.Identity()] = c
	a.redis = append(a.redis, c)
	return c, nil
}

// streamParts reports each redis:// replay sink: degraded while events wait in its
// local spool (the sink failed; the recorder delivers them when it is back).
func (a *App) streamParts(cfg *config.Config) {
	if a.Recorder == nil {
		return
	}
	n := 0
	for _, uri := range cfg.Replay.Sinks {
		if sp, err := location.Parse(uri); err != nil || sp.Scheme != location.Redis {
			continue
		}
		part := partStream
		if n++; n > 1 {
			part = fmt.Sprintf("%s-%d", partStream, n)
		}
		label := location.Redact(uri)
		a.addRedisPart(part, nil, func() (bool, error) {
			if k := a.Recorder.Spooled()[label]; k > 0 {
				return false, fmt.Errorf("%d events spooled locally until the stream takes them", k)
			}
			return true, nil
		})
	}
}
