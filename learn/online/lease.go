package online

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// lease is the learner lease: one holder in a fleet.
type lease interface {
	// Acquire takes the lease, or renews it when this replica holds it.
	Acquire(ctx context.Context) (bool, error)
	Release(ctx context.Context) error
}

// soleLease is a store without a lease (a directory, S3): this process is the learner.
type soleLease struct{}

func (soleLease) Acquire(context.Context) (bool, error) { return true, nil }
func (soleLease) Release(context.Context) error         { return nil }

// redisLease is SET NX PX, renewed and released only by its holder.
type redisLease struct {
	rdb redis.UniversalClient
	key string
	id  string
	ttl time.Duration
}

// renewScript extends the lease only while it is still ours.
var renewScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`)

// releaseScript deletes the lease only while it is still ours.
var releaseScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

func (r *redisLease) Acquire(ctx context.Context) (bool, error) {
	ok, err := r.rdb.SetNX(ctx, r.key, r.id, r.ttl).Result()
	if err != nil || ok {
		return ok, err
	}
	n, err := renewScript.Run(ctx, r.rdb, []string{r.key}, r.id, r.ttl.Milliseconds()).Int()
	return n == 1, err
}

func (r *redisLease) Release(ctx context.Context) error {
	return releaseScript.Run(ctx, r.rdb, []string{r.key}, r.id).Err()
}
