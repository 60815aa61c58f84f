package policies

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// RedisStats shares reward statistics across replicas: each reward is a few
// HINCRBYFLOATs, each update one pipelined read.
type RedisStats struct{ rdb redis.UniversalClient }

// NewRedisStats returns a store on rdb (owned by the caller).
func NewRedisStats(rdb redis.UniversalClient) *RedisStats { return &RedisStats{rdb: rdb} }

// statsKey is camproxy:exp:{EXPERIMENT}:arm:ARM: the hash tag keeps an experiment's
// arms in one Redis Cluster slot, so Load reads them in one round trip to one node.
func statsKey(experiment, arm string) string {
	return "camproxy:exp:{" + experiment + "}:arm:" + arm
}

func (r *RedisStats) Add(ctx context.Context, experiment, arm string, d Stats) error {
	k := statsKey(experiment, arm)
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for f, v := range map[string]float64{"n": d.N, "sum": d.Sum, "sumsq": d.SumSq, "succ": d.Successes, "nonbin": d.NonBinary} {
			if v != 0 {
				p.HIncrByFloat(ctx, k, f, v)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("experiment stats: %w", err)
	}
	return nil
}

func (r *RedisStats) Load(ctx context.Context, experiment string, arms []string) (map[string]Stats, error) {
	cmds := make([]*redis.MapStringStringCmd, len(arms))
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, a := range arms {
			cmds[i] = p.HGetAll(ctx, statsKey(experiment, a))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("experiment stats: %w", err)
	}
	out := map[string]Stats{}
	for i, a := range arms {
		m := cmds[i].Val()
		f := func(k string) float64 { v, _ := strconv.ParseFloat(m[k], 64); return v }
		out[a] = Stats{N: f("n"), Sum: f("sum"), SumSq: f("sumsq"), Successes: f("succ"), NonBinary: f("nonbin")}
	}
	return out, nil
}
