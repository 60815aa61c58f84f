package augment

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
)

// KeyPrefix starts every context cache key (and so every Redis key the cache
// writes); Flush deletes what is under it.
const KeyPrefix = "camproxy:ctx:"

// lockSuffix names a key's cross-process load lock: KEY:lock. The key's hash tag
// puts the lock in the value's slot on a Redis Cluster.
const lockSuffix = ":lock"

const (
	// lockTTL bounds how long a crashed lock holder can hold up other processes;
	// it is far above any sane augment deadline.
	lockTTL = 30 * time.Second
	// pollEvery is how often a process that lost the lock looks for the value.
	pollEvery = 10 * time.Millisecond
	// warnEvery rate-limits the Redis warning: a Redis outage would otherwise
	// log once per request.
	warnEvery = 5 * time.Second
	// redisOpTimeout bounds one Redis command (the dial included), so that a
	// dead Redis costs a call a fraction of the augment deadline, not all of it.
	// Read and write deadlines follow it only on a client built with
	// ContextTimeoutEnabled.
	redisOpTimeout = 500 * time.Millisecond
	// redisCooldown is how long the cache stays local-only after a Redis failure:
	// during an outage only one call per cooldown pays for finding Redis down.
	redisCooldown = 5 * time.Second
)

// CacheOptions configures the cache.
type CacheOptions struct {
	LocalEntries int           // in-process entries; 0 disables the local tier
	TTL          time.Duration // of local and Redis entries; 0 = no expiry
	// Cooldown is how long the cache stays local-only after a Redis failure; 0 = 5 s.
	Cooldown time.Duration
	// OpTimeout bounds one Redis command; 0 = 500 ms. Tests of a fleet on a loaded
	// machine lengthen it, so that a slow moment is not taken for an outage.
	OpTimeout time.Duration
}

// Source says where Get's value came from.
type Source int

const (
	Hit  Source = iota + 1 // served from the local tier, Redis, or another caller's load
	Miss                   // this call's load produced it
)

func (s Source) String() string {
	switch s {
	case Hit:
		return "hit"
	case Miss:
		return "miss"
	}
	return fmt.Sprintf("Source(%d)", int(s))
}

// Key is the cache key of a context: the augmenter, its version (so a changed
// prompt or model never serves old contexts) and a hash of the normalised task
// (so whitespace differences from SDK re-serialisation still hit):
// camproxy:ctx:{AUGMENTER:VERSION:SHA256}. The braces are a Redis Cluster hash tag:
// the value and its load lock (KEY:lock) share one slot, and different tasks spread
// over the cluster.
func Key(augmenter, version, task string) string {
	// The task's words joined by single spaces (strings.Fields), hashed, then the key
	// written in one buffer: one allocation for the key, none for the words of a
	// task of ordinary length.
	var words [1024]byte
	w := words[:0]
	for f := range strings.FieldsSeq(task) {
		if len(w) > 0 {
			w = append(w, ' ')
		}
		w = append(w, f...)
	}
	sum := sha256.Sum256(w)
	var kb [256]byte
	k := append(kb[:0], KeyPrefix...)
	k = append(append(append(append(k, '{'), augmenter...), ':'), version...)
	k = append(k, ':')
	k = hex.AppendEncode(k, sum[:])
	return string(append(k, '}'))
}

// Cached is the local tier's value for key, without loading it: a call that finds
// its context there needs no deadline, no span of a load, and no load function.
func (c *Cache) Cached(key string) (string, bool) { return c.localGet(key) }

// Cache is the two-tier context cache: an in-process LRU in front of Redis, with
// a load per key per process (singleflight) and, with Redis, one load per key
// across processes (a Redis lock). Redis is optional and fails open.
type Cache struct {
	ttl      time.Duration
	local    *expirable.LRU[string, string] // nil = no local tier
	rdb      redis.UniversalClient          // nil = local only
	log      *slog.Logger
	group    singleflight.Group
	unlock   *redis.Script
	lastWarn atomic.Int64          // unix nanos of the last Redis warning
	downTill atomic.Int64          // unix nanos until which Redis is skipped
	lastErr  atomic.Pointer[error] // the failure that started the cooldown
	cooldown time.Duration
	opTime   time.Duration // per Redis command
}

// NewCache builds a cache. rdb nil means local only; log nil discards.
func NewCache(o CacheOptions, rdb redis.UniversalClient, log *slog.Logger) *Cache {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cache{ttl: o.TTL, rdb: rdb, log: log, cooldown: redisCooldown, opTime: redisOpTimeout,
		// Delete the lock only if it is still ours: after lockTTL another process
		// may hold it.
		unlock: redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`),
	}
	if o.Cooldown > 0 {
		c.cooldown = o.Cooldown
	}
	if o.OpTimeout > 0 {
		c.opTime = o.OpTimeout
	}
	if o.LocalEntries > 0 {
		c.local = expirable.NewLRU[string, string](o.LocalEntries, nil, o.TTL)
	}
	return c
}

// Get returns the value under key, calling load at most once per key across the
// process (and across processes sharing Redis) when no tier has it. load runs
// detached from ctx, so a caller that leaves does not fail the others; each
// caller still returns when its own ctx is done. Load errors are not cached.
func (c *Cache) Get(ctx context.Context, key string, load func(context.Context) (string, error)) (string, Source, error) {
	if v, ok := c.localGet(key); ok {
		return v, Hit, nil
	}
	if err := ctx.Err(); err != nil {
		return "", 0, err // a caller already gone must not start a load
	}
	var leader atomic.Bool // set only in the caller whose fill function runs
	detached := context.WithoutCancel(ctx)
	ch := c.group.DoChan(key, func() (any, error) {
		leader.Store(true)
		return c.fill(detached, key, load)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return "", 0, r.Err
		}
		f := r.Val.(filled)
		if !leader.Load() {
			f.src = Hit // a follower got another caller's load
		}
		return f.v, f.src, nil
	case <-ctx.Done():
		return "", 0, ctx.Err()
	}
}

// filled is what one fill produced.
type filled struct {
	v   string
	src Source
}

// fill finds the value in Redis or loads it, once per key across processes.
func (c *Cache) fill(ctx context.Context, key string, load func(context.Context) (string, error)) (filled, error) {
	if !c.redisUp() {
		return c.loadLocal(ctx, key, load)
	}
	for {
		v, found, err := c.redisGet(ctx, key)
		if err != nil {
			return c.loadLocal(ctx, key, load)
		}
		if found {
			c.localAdd(key, v)
			return filled{v, Hit}, nil
		}
		token, won, err := c.lock(ctx, key)
		if err != nil {
			return c.loadLocal(ctx, key, load)
		}
		if won {
			return c.loadLocked(ctx, key, token, load)
		}
		if err := sleep(ctx, pollEvery); err != nil {
			return filled{}, err
		}
	}
}

// loadLocked loads while holding the cross-process lock, publishes the value to
// Redis, then releases the lock.
func (c *Cache) loadLocked(ctx context.Context, key, token string, load func(context.Context) (string, error)) (filled, error) {
	defer c.release(ctx, key, token)
	// The previous holder may have published between our GET and our SET NX.
	if v, found, err := c.redisGet(ctx, key); err == nil && found {
		c.localAdd(key, v)
		return filled{v, Hit}, nil
	}
	f, err := c.loadLocal(ctx, key, load)
	if err != nil {
		return f, err
	}
	octx, cancel := context.WithTimeout(ctx, c.opTime)
	defer cancel()
	if err := c.rdb.Set(octx, key, f.v, c.ttl).Err(); err != nil {
		c.redisFailed("set", key, err)
	}
	return f, nil
}

// loadLocal calls load and keeps a successful value in the local tier.
func (c *Cache) loadLocal(ctx context.Context, key string, load func(context.Context) (string, error)) (filled, error) {
	v, err := load(ctx)
	if err != nil {
		return filled{}, err
	}
	c.localAdd(key, v)
	return filled{v, Miss}, nil
}

// redisGet reads key; err is a Redis failure (already logged), not a miss.
func (c *Cache) redisGet(ctx context.Context, key string) (v string, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.opTime)
	defer cancel()
	v, err = c.rdb.Get(ctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", false, nil
	case err != nil:
		c.redisFailed("get", key, err)
		return "", false, err
	}
	return v, true, nil
}

// lock tries to take key's cross-process load lock with a fresh token.
func (c *Cache) lock(ctx context.Context, key string) (token string, won bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.opTime)
	defer cancel()
	token = rand.Text()
	won, err = c.rdb.SetNX(ctx, key+lockSuffix, token, lockTTL).Result()
	if err != nil {
		c.redisFailed("lock", key, err)
	}
	return token, won, err
}

// release drops the lock if it is still ours.
func (c *Cache) release(ctx context.Context, key, token string) {
	ctx, cancel := context.WithTimeout(ctx, c.opTime)
	defer cancel()
	if err := c.unlock.Run(ctx, c.rdb, []string{key + ":lock"}, token).Err(); err != nil {
		c.redisFailed("unlock", key, err)
	}
}

func (c *Cache) localGet(key string) (string, bool) {
	if c.local == nil {
		return "", false
	}
	return c.local.Get(key)
}

func (c *Cache) localAdd(key, v string) {
	if c.local != nil {
		c.local.Add(key, v)
	}
}

// redisUp reports whether this call should use Redis.
func (c *Cache) redisUp() bool {
	return c.rdb != nil && time.Now().UnixNano() >= c.downTill.Load()
}

// RedisState reports whether the cache shares its values through Redis now (true
// without Redis: nothing to fall back from) and, when it does not, the failure that
// put it on its local tier until the cooldown ends. After the cooldown the next
// call tries Redis again: an outage costs sharing, never the cache.
func (c *Cache) RedisState() (up bool, err error) {
	if c.redisUp() {
		return true, nil
	}
	if p := c.lastErr.Load(); p != nil {
		return false, *p
	}
	return false, errors.New("redis unavailable")
}

// redisFailed starts a local-only cooldown and warns. Redis is an optimisation
// too: its failure only costs the cross-process sharing.
func (c *Cache) redisFailed(op, key string, err error) {
	werr := fmt.Errorf("%s: %w", op, err)
	c.lastErr.Store(&werr)
	c.downTill.Store(time.Now().Add(c.cooldown).UnixNano())
	c.warn(op, key, err)
}

// warn logs a Redis failure at most once per warnEvery.
func (c *Cache) warn(op, key string, err error) {
	now := time.Now().UnixNano()
	last := c.lastWarn.Load()
	if now-last < int64(warnEvery) || !c.lastWarn.CompareAndSwap(last, now) {
		return
	}
	c.log.Warn("context cache: redis unavailable, continuing without it for a while",
		"op", op, "key", key, "cooldown", c.cooldown, "err", err)
}

// Flush drops every local entry and every Redis key under KeyPrefix.
func (c *Cache) Flush(ctx context.Context) {
	if c.local != nil {
		c.local.Purge()
	}
	if c.rdb == nil {
		return
	}
	var err error
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		// SCAN sees one node only: walk every master.
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return unlinkPrefix(ctx, node)
		})
	} else {
		err = unlinkPrefix(ctx, c.rdb)
	}
	if err != nil {
		c.redisFailed("flush", KeyPrefix+"*", err)
	}
}

// unlinkPrefix deletes the keys under KeyPrefix on one node, one UNLINK per key
// in a pipeline (a multi-key UNLINK would cross hash slots on a cluster).
func unlinkPrefix(ctx context.Context, rdb redis.Cmdable) error {
	iter := rdb.Scan(ctx, 0, KeyPrefix+"*", 1000).Iterator()
	pipe := rdb.Pipeline()
	for iter.Next(ctx) {
		pipe.Unlink(ctx, iter.Val())
		if pipe.Len() >= 1000 {
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if pipe.Len() > 0 {
		_, err := pipe.Exec(ctx)
		return err
	}
	return nil
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
