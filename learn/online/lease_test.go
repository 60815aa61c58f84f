package online

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/internal/testkit"
)

// TestRedisLease: the lease has one holder; a holder that stops renewing (a crash)
// loses it after the TTL; a former holder can neither renew nor release it.
func TestRedisLease(t *testing.T) {
	rs := testkit.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	key := "camproxy-test:lease"
	ctx := context.Background()
	a := &redisLease{rdb: rdb, key: key, id: "a", ttl: 200 * time.Millisecond}
	b := &redisLease{rdb: rdb, key: key, id: "b", ttl: 200 * time.Millisecond}
	if ok, err := a.Acquire(ctx); !ok || err != nil {
		t.Fatalf("a: %v %v", ok, err)
	}
	if ok, err := b.Acquire(ctx); ok || err != nil {
		t.Fatalf("b took a held lease: %v %v", ok, err)
	}
	if ok, _ := a.Acquire(ctx); !ok {
		t.Fatal("the holder could not renew")
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 200*time.Millisecond {
		t.Fatalf("lease TTL %v", ttl)
	}
	if err := b.Release(ctx); err != nil || rdb.Get(ctx, key).Val() != "a" {
		t.Fatalf("a non-holder released the lease: %v, holder %q", err, rdb.Get(ctx, key).Val())
	}
	// a crashes: no renewal. b gets the lease once it expired.
	testkit.Eventually(t, "b holds the expired lease", func() bool {
		ok, err := b.Acquire(ctx)
		return ok && err == nil
	})
	if ok, _ := a.Acquire(ctx); ok {
		t.Fatal("the former holder renewed a lease it lost")
	}
	if err := a.Release(ctx); err != nil || rdb.Get(ctx, key).Val() != "b" {
		t.Fatalf("the former holder released the lease: holder %q", rdb.Get(ctx, key).Val())
	}
	if err := b.Release(ctx); err != nil || rdb.Exists(ctx, key).Val() != 0 {
		t.Fatal("the holder's release left the key")
	}
}
