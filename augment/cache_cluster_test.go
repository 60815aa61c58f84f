package augment

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/camproxy/camproxy/internal/testkit"
)

// cluster is one real Redis Cluster (3 masters, 3 replicas) for this package's tests.
var cluster testkit.SharedCluster

func TestMain(m *testing.M) { os.Exit(cluster.Run(m)) }

// TestCacheOnCluster: two caches (two processes) on a Redis Cluster load each of 8
// tasks once between them; the tasks' keys land on several masters, each lock in
// its value's slot (no CROSSSLOT, no MOVED left unfollowed); Flush empties every
// master.
func TestCacheOnCluster(t *testing.T) {
	c := cluster.Get(t)
	rdb := testkit.RedisURLClient(t, c.URL())
	aug := testAugmenter(t, nil)
	a := NewCache(CacheOptions{LocalEntries: 100, TTL: time.Minute}, rdb, nil)
	b := NewCache(CacheOptions{LocalEntries: 100, TTL: time.Minute}, rdb, nil)
	a.opTime, b.opTime = 10*time.Second, 10*time.Second
	var calls atomic.Int32
	load := func(ctx context.Context) (string, error) {
		n := calls.Add(1)
		time.Sleep(20 * time.Millisecond)
		return fmt.Sprintf("context %d", n), nil
	}
	ctx := t.Context()
	masters := map[string]bool{}
	for i := range 8 {
		key := Key(aug, "v1", fmt.Sprintf("task %d", i))
		if testkit.Slot(key) != testkit.Slot(key+lockSuffix) {
			t.Fatalf("%s and its lock are in different slots", key)
		}
		m, err := c.MasterOf(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Addr] = true
		values, _ := getAll(t, []*Cache{a, b}, 6, key, load)
		for _, v := range values[1:] {
			if v != values[0] {
				t.Fatalf("task %d: values differ: %q", i, values)
			}
		}
		if got, err := rdb.Get(ctx, key).Result(); err != nil || got != values[0] {
			t.Fatalf("task %d in the cluster: %q, %v", i, got, err)
		}
	}
	if n := calls.Load(); n != 8 {
		t.Fatalf("%d loads for 8 tasks across two caches, want 8", n)
	}
	if len(masters) < 2 {
		t.Fatalf("8 tasks all on one master %v: the test would not see a cross-node problem", masters)
	}
	for _, cc := range []*Cache{a, b} {
		if up, err := cc.RedisState(); !up {
			t.Fatalf("cache fell back to local: %v", err)
		}
	}
	a.Flush(ctx)
	for i := range 8 {
		if n := rdb.Exists(ctx, Key(aug, "v1", fmt.Sprintf("task %d", i))).Val(); n != 0 {
			t.Fatalf("task %d survived Flush", i)
		}
	}
}

// TestCacheClusterFailover: the master of a task's slot is killed. Gets keep
// answering (fail open: local tier, local load); the cache says it is on its local
// tier while Redis fails; once the replica has taken over, the cache shares values
// through Redis again: a new task is loaded once by two caches.
func TestCacheClusterFailover(t *testing.T) {
	c := cluster.Get(t)
	rdb := testkit.RedisURLClient(t, c.URL())
	aug := testAugmenter(t, nil)
	newCache := func() *Cache {
		cc := NewCache(CacheOptions{LocalEntries: 100, TTL: time.Minute}, rdb, testkit.Logger(t, slog.LevelInfo))
		cc.cooldown = 100 * time.Millisecond
		return cc
	}
	a, b := newCache(), newCache()
	ctx := t.Context()
	key := Key(aug, "v1", "task before")
	m, err := c.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Restart(m)
		testkit.Eventually(t, "the cluster healthy again", func() bool { return c.Healthy(context.Background()) })
	})
	var calls atomic.Int32
	load := func(context.Context) (string, error) { return fmt.Sprintf("ctx %d", calls.Add(1)), nil }
	if _, _, err := a.Get(ctx, key, load); err != nil {
		t.Fatal(err)
	}
	m.Kill()
	sawDown := false
	testkit.Eventually(t, "the replica serving the killed master's slots", func() bool {
		// Calls during the election answer, from the local tier or a local load.
		if _, _, err := b.Get(ctx, Key(aug, "v1", fmt.Sprintf("during %d", calls.Load())), load); err != nil {
			t.Fatalf("Get during the failover: %v", err)
		}
		if up, _ := b.RedisState(); !up {
			sawDown = true
		}
		return c.Healthy(ctx)
	})
	if !sawDown {
		t.Log("the cache never saw Redis fail (the failover was quicker than a call)")
	}
	// A task of the promoted replica's slots: the client learns the new map from the
	// first call that fails there.
	promoted, err := c.MasterOf(ctx, key)
	if err != nil || promoted == m {
		t.Fatalf("master of the killed node's slot: %v, %v", promoted, err)
	}
	i := 0
	onPromoted := func() string {
		for ; ; i++ {
			k := Key(aug, "v1", fmt.Sprintf("task after %d", i))
			if n, err := c.MasterOf(ctx, k); err == nil && n == promoted {
				i++
				return k
			}
		}
	}
	testkit.Eventually(t, "both caches back on Redis", func() bool {
		for _, cc := range []*Cache{a, b} {
			probe := onPromoted()
			_, _, _ = cc.Get(ctx, probe, load)
			if up, _ := cc.RedisState(); !up || rdb.Exists(ctx, probe).Val() != 1 {
				return false
			}
		}
		return true
	})
	after := onPromoted()
	before := calls.Load()
	values, _ := getAll(t, []*Cache{a, b}, 6, after, load)
	if n := calls.Load() - before; n != 1 {
		t.Fatalf("%d loads of one task after the failover, want 1 (%q)", n, values)
	}
}
