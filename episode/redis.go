package episode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the shared Store: every replica and sidecar sees the same episodes and tips,
// so a turn may land on any of them. Keys expire after the idle timeout.
type Redis struct {
	rdb  redis.UniversalClient
	idle time.Duration
}

// NewRedis returns a Redis-backed store. The caller owns rdb.
func NewRedis(rdb redis.UniversalClient, idle time.Duration) *Redis {
	return &Redis{rdb: rdb, idle: idle}
}

const epPrefix = "camproxy:ep:"

// Tip keys share one hash slot ({…}) so the claim script may touch several on a cluster.
func tipQueueKey(h uint64) string { return "{camproxy:tip}:q:" + strconv.FormatUint(h, 16) }
func tipLastKey(h uint64) string  { return "{camproxy:tip}:l:" + strconv.FormatUint(h, 16) }

func (r *Redis) Get(ctx context.Context, id string) (*Episode, error) {
	b, err := r.rdb.GetEx(ctx, epPrefix+id, r.idle).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("episode store: get %s: %w", id, err)
	}
	var ep Episode
	if err := json.Unmarshal(b, &ep); err != nil {
		return nil, fmt.Errorf("episode store: decode %s: %w", id, err)
	}
	return &ep, nil
}

func (r *Redis) Create(ctx context.Context, ep *Episode) (*Episode, bool, error) {
	b, err := json.Marshal(ep)
	if err != nil {
		return nil, false, fmt.Errorf("episode store: encode: %w", err)
	}
	ok, err := r.rdb.SetNX(ctx, epPrefix+ep.ID, b, r.idle).Result()
	if err != nil {
		return nil, false, fmt.Errorf("episode store: create %s: %w", ep.ID, err)
	}
	if ok {
		cp := *ep
		return &cp, true, nil
	}
	got, err := r.Get(ctx, ep.ID)
	return got, false, err
}

func (r *Redis) Update(ctx context.Context, ep *Episode) error {
	b, err := json.Marshal(ep)
	if err != nil {
		return fmt.Errorf("episode store: encode: %w", err)
	}
	if err := r.rdb.Set(ctx, epPrefix+ep.ID, b, r.idle).Err(); err != nil {
		return fmt.Errorf("episode store: update %s: %w", ep.ID, err)
	}
	return nil
}

func (r *Redis) SetTip(ctx context.Context, tip uint64, id string) error {
	return r.setTips(ctx, id, tip)
}

// setTips sets each of tips to id in one transaction: the tip keys share a slot.
func (r *Redis) setTips(ctx context.Context, id string, tips ...uint64) error {
	if len(tips) == 0 {
		return nil
	}
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, tip := range tips {
			q := tipQueueKey(tip)
			p.RPush(ctx, q, id)
			p.PExpire(ctx, q, r.idle)
			p.Set(ctx, tipLastKey(tip), id, r.idle)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("episode store: set tip: %w", err)
	}
	return nil
}

// Advance takes two round trips whatever the number of tips: the episode's key is in
// another slot than the tips' (a cluster refuses a transaction across slots).
func (r *Redis) Advance(ctx context.Context, ep *Episode, tips ...uint64) error {
	return errors.Join(r.Update(ctx, ep), r.setTips(ctx, ep.ID, tips...))
}

// claimScript pops the first unclaimed episode of the longest known tip, else returns
// that tip's latest episode: one round trip, atomic across replicas.
var claimScript = redis.NewScript(`
for i = 1, #KEYS, 2 do
  local id = redis.call('LPOP', KEYS[i])
  if id then return {(i+1)/2, id} end
  local last = redis.call('GET', KEYS[i+1])
  if last then return {(i+1)/2, last} end
end
return false`)

func (r *Redis) Claim(ctx context.Context, tips []uint64) (string, int, bool, error) {
	if len(tips) == 0 {
		return "", 0, false, nil
	}
	keys := make([]string, 0, 2*len(tips))
	for _, h := range tips {
		keys = append(keys, tipQueueKey(h), tipLastKey(h))
	}
	res, err := claimScript.Run(ctx, r.rdb, keys).Slice()
	if errors.Is(err, redis.Nil) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("episode store: claim: %w", err)
	}
	if len(res) != 2 {
		return "", 0, false, fmt.Errorf("episode store: claim: unexpected reply %v", res)
	}
	pos, _ := res[0].(int64)
	id, _ := res[1].(string)
	return id, int(pos) - 1, true, nil
}

func (r *Redis) Release(ctx context.Context, tip uint64, id string) error {
	q := tipQueueKey(tip)
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.LPush(ctx, q, id)
		p.PExpire(ctx, q, r.idle)
		return nil
	})
	if err != nil {
		return fmt.Errorf("episode store: release tip: %w", err)
	}
	return nil
}

func (r *Redis) Ping(ctx context.Context) error { return r.rdb.Ping(ctx).Err() }

// Close does nothing: the caller owns the client.
func (r *Redis) Close() error { return nil }
