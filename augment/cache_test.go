package augment

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/internal/testkit"
)

const testRedisAddr = "127.0.0.1:6379"

// The Redis-down tests dial closed ports on purpose; go-redis would log each dial.
func init() { testkit.QuietRedis() }

// testRedis connects to the real Redis the tests need, or skips.
func testRedis(t *testing.T, db int) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testRedisAddr, DB: db})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		t.Skipf("skipping: this test needs a Redis server at %s (%v)", testRedisAddr, err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// testAugmenter returns an augmenter name unique to this test run and removes
// its Redis keys when the test ends, so tests never see each other's values.
func testAugmenter(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	name := "test-" + strings.ToLower(rand.Text()[:10])
	if rdb != nil {
		t.Cleanup(func() {
			ctx := context.Background()
			iter := rdb.Scan(ctx, 0, KeyPrefix+"{"+name+":*", 100).Iterator()
			for iter.Next(ctx) {
				rdb.Del(ctx, iter.Val())
			}
		})
	}
	return name
}

// newRedisCache is a cache on rdb whose Redis commands may take long: on a
// loaded test machine a timed-out command would fall back to a local load and
// make the one-load assertions flaky.
func newRedisCache(rdb *redis.Client) *Cache {
	c := NewCache(CacheOptions{LocalEntries: 100, TTL: time.Minute}, rdb, nil)
	c.opTime = 10 * time.Second
	return c
}

// counter is a load function that counts its calls, waits delay, and answers
// value.
type counter struct {
	calls atomic.Int32
	delay time.Duration
	value string
}

func (c *counter) load(ctx context.Context) (string, error) {
	c.calls.Add(1)
	if err := sleep(ctx, c.delay); err != nil {
		return "", err
	}
	return c.value, nil
}

// getAll runs n concurrent Gets of key, spreading them over caches, and returns
// their values and sources.
func getAll(t *testing.T, caches []*Cache, n int, key string, load func(context.Context) (string, error)) ([]string, []Source) {
	t.Helper()
	values, sources := make([]string, n), make([]Source, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			v, src, err := caches[i%len(caches)].Get(context.Background(), key, load)
			if err != nil {
				t.Errorf("Get %d: %v", i, err)
			}
			values[i], sources[i] = v, src
		})
	}
	wg.Wait()
	return values, sources
}

func countMisses(sources []Source) int {
	n := 0
	for _, s := range sources {
		if s == Miss {
			n++
		}
	}
	return n
}

func TestKeyNormalisation(t *testing.T) {
	base := Key("cam", "v1", "book a flight to Paris")
	for _, task := range []string{
		"book a flight to Paris",
		"  book a flight to Paris\n",
		"book  a\tflight\n\nto   Paris",
		"\u00a0book a flight to Paris", // non-breaking space is whitespace too
	} {
		if got := Key("cam", "v1", task); got != base {
			t.Errorf("Key(%q) = %s, want %s", task, got, base)
		}
	}
	for _, task := range []string{"book a flight to paris", "book a flight to Paris.", "bookaflight to Paris"} {
		if Key("cam", "v1", task) == base {
			t.Errorf("Key(%q) collides with the base task", task)
		}
	}
	if Key("cam", "v2", "book a flight to Paris") == base || Key("rag", "v1", "book a flight to Paris") == base {
		t.Error("augmenter or version does not change the key")
	}
	if !strings.HasPrefix(base, "camproxy:ctx:{cam:v1:") || !strings.HasSuffix(base, "}") || len(base) != len("camproxy:ctx:{cam:v1:}")+64 {
		t.Errorf("Key = %q, want camproxy:ctx:{cam:v1:<sha256 hex>}", base)
	}
}

func TestSourceString(t *testing.T) {
	if Hit.String() != "hit" || Miss.String() != "miss" {
		t.Errorf("Hit, Miss = %q, %q", Hit, Miss)
	}
}

func TestCacheSingleflight(t *testing.T) {
	c := NewCache(CacheOptions{LocalEntries: 100, TTL: time.Hour}, nil, nil)
	l := &counter{delay: 50 * time.Millisecond, value: "the context"}
	key := Key("cam", "v1", "task")
	values, sources := getAll(t, []*Cache{c}, 50, key, l.load)
	if n := l.calls.Load(); n != 1 {
		t.Fatalf("load called %d times, want 1", n)
	}
	if n := countMisses(sources); n != 1 {
		t.Errorf("%d Misses, want 1 (the leader; followers are Hits)", n)
	}
	for i, v := range values {
		if v != "the context" {
			t.Fatalf("Get %d = %q", i, v)
		}
	}
	v, src, err := c.Get(context.Background(), key, l.load)
	if err != nil || v != "the context" || src != Hit || l.calls.Load() != 1 {
		t.Fatalf("Get after load = %q, %v, %v (loads %d), want a local hit", v, src, err, l.calls.Load())
	}
}

func TestCacheTTL(t *testing.T) {
	// The local tier's expiry goroutine keeps it out of a synctest bubble, so the
	// clock is real. Two Gets in a row must fall inside the TTL for the second to
	// hit: where the machine took longer than that between them, the pair says
	// nothing and is tried again on a new key. The check after the TTL sleeps past
	// it (a sleep only lengthens).
	const ttl = 200 * time.Millisecond
	c := NewCache(CacheOptions{LocalEntries: 10, TTL: ttl}, nil, nil)
	var l *counter
	var key string
	tries := 0
	testkit.Eventually(t, "two Gets in a row inside the TTL", func() bool {
		tries++
		l, key = &counter{value: "v"}, Key("cam", "v1", fmt.Sprintf("task %d", tries))
		start := time.Now()
		_, first, err1 := c.Get(context.Background(), key, l.load)
		_, second, err2 := c.Get(context.Background(), key, l.load)
		if err1 != nil || first != Miss {
			t.Fatalf("first Get = %v, %v, want Miss", first, err1)
		}
		if time.Since(start) >= ttl {
			return false
		}
		if err2 != nil || second != Hit {
			t.Fatalf("Get within the TTL = %v, %v, want Hit", second, err2)
		}
		return true
	})
	time.Sleep(ttl + 100*time.Millisecond)
	if _, src, err := c.Get(context.Background(), key, l.load); err != nil || src != Miss {
		t.Fatalf("Get after TTL = %v, %v, want Miss", src, err)
	}
	if n := l.calls.Load(); n != 2 {
		t.Fatalf("load called %d times, want 2", n)
	}
}

func TestCacheLocalDisabled(t *testing.T) {
	c := NewCache(CacheOptions{LocalEntries: 0, TTL: time.Hour}, nil, nil)
	l := &counter{value: "v"}
	for range 3 {
		if _, src, err := c.Get(context.Background(), "k", l.load); err != nil || src != Miss {
			t.Fatalf("Get = %v, %v, want Miss", src, err)
		}
	}
	if n := l.calls.Load(); n != 3 {
		t.Fatalf("load called %d times, want 3 with no tier", n)
	}
}

func TestCacheLoadErrorNotCached(t *testing.T) {
	c := NewCache(CacheOptions{LocalEntries: 10, TTL: time.Hour}, nil, nil)
	var calls atomic.Int32
	load := func(context.Context) (string, error) {
		if calls.Add(1) == 1 {
			return "", errBoom
		}
		return "v", nil
	}
	if _, _, err := c.Get(context.Background(), "k", load); !errors.Is(err, errBoom) {
		t.Fatalf("err = %v, want errBoom", err)
	}
	if v, src, err := c.Get(context.Background(), "k", load); err != nil || v != "v" || src != Miss {
		t.Fatalf("Get after a failed load = %q, %v, %v, want a fresh load", v, src, err)
	}
}

func TestCacheDepartedCallerDoesNotCancelLoad(t *testing.T) {
	// In a bubble, synctest.Wait knows when the second caller has joined the
	// flight (it is blocked waiting for the load) instead of guessing with a sleep.
	// No local tier: its expiry goroutine never ends, and a late second caller then
	// starts a load of its own, which this test would catch (started closed twice).
	synctest.Test(t, func(t *testing.T) {
		c := NewCache(CacheOptions{LocalEntries: 0, TTL: time.Hour}, nil, nil)
		started, release := make(chan struct{}), make(chan struct{})
		var loadErr atomic.Value
		load := func(ctx context.Context) (string, error) {
			close(started)
			<-release
			if err := ctx.Err(); err != nil {
				loadErr.Store(err)
				return "", err
			}
			return "v", nil
		}

		leaving, leave := context.WithCancel(context.Background())
		leftErr := make(chan error, 1)
		go func() {
			_, _, err := c.Get(leaving, "k", load)
			leftErr <- err
		}()
		<-started
		stayed := make(chan string, 1)
		go func() {
			v, _, _ := c.Get(context.Background(), "k", load)
			stayed <- v
		}()
		synctest.Wait() // the second caller has joined the flight
		leave()
		if err := <-leftErr; !errors.Is(err, context.Canceled) {
			t.Fatalf("departed caller err = %v, want context.Canceled", err)
		}
		close(release)
		if v := <-stayed; v != "v" {
			t.Fatalf("remaining caller got %q, want v", v)
		}
		if err := loadErr.Load(); err != nil {
			t.Fatalf("the shared load saw %v", err)
		}
	})
}

func TestCacheRedisOneLoadAcrossProcesses(t *testing.T) {
	rdb := testRedis(t, 0)
	aug := testAugmenter(t, rdb)
	key := Key(aug, "v1", "shared task")
	// Two caches with separate local tiers and singleflight groups stand for two
	// camproxy processes.
	a, b := newRedisCache(rdb), newRedisCache(rdb)
	var calls atomic.Int32
	load := func(ctx context.Context) (string, error) {
		n := calls.Add(1)
		time.Sleep(100 * time.Millisecond)
		return fmt.Sprintf("context from load %d", n), nil
	}
	values, sources := getAll(t, []*Cache{a, b}, 40, key, load)
	if n := calls.Load(); n != 1 {
		t.Fatalf("load called %d times across both caches, want 1", n)
	}
	for i, v := range values {
		if v != "context from load 1" {
			t.Fatalf("Get %d = %q", i, v)
		}
	}
	if n := countMisses(sources); n != 1 {
		t.Errorf("%d Misses, want 1", n)
	}
	ctx := context.Background()
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("Redis TTL = %v, want (0, 1m]", ttl)
	}
	if n := rdb.Exists(ctx, key+":lock").Val(); n != 0 {
		t.Error("lock left behind")
	}

	// A third process finds the value in Redis and keeps it locally.
	c := newRedisCache(rdb)
	if v, src, err := c.Get(ctx, key, load); err != nil || src != Hit || v != "context from load 1" {
		t.Fatalf("Get from Redis = %q, %v, %v", v, src, err)
	}
	rdb.Del(ctx, key)
	if v, src, err := c.Get(ctx, key, load); err != nil || src != Hit || v != "context from load 1" {
		t.Fatalf("Get from the local tier = %q, %v, %v", v, src, err)
	}
}

func TestCacheRedisLockLoser(t *testing.T) {
	rdb := testRedis(t, 0)
	ctx := context.Background()
	c := newRedisCache(rdb)

	t.Run("winner publishes", func(t *testing.T) {
		key := Key(testAugmenter(t, rdb), "v1", "task")
		rdb.Set(ctx, key+":lock", "other process", time.Minute)
		time.AfterFunc(50*time.Millisecond, func() {
			rdb.Set(ctx, key, "theirs", time.Minute)
			rdb.Del(ctx, key+":lock")
		})
		l := &counter{value: "ours"}
		v, src, err := c.Get(ctx, key, l.load)
		if err != nil || v != "theirs" || src != Hit || l.calls.Load() != 0 {
			t.Fatalf("Get = %q, %v, %v (loads %d), want the winner's value", v, src, err, l.calls.Load())
		}
	})

	t.Run("winner fails", func(t *testing.T) {
		key := Key(testAugmenter(t, rdb), "v1", "task")
		rdb.Set(ctx, key+":lock", "other process", time.Minute)
		time.AfterFunc(50*time.Millisecond, func() { rdb.Del(ctx, key+":lock") })
		l := &counter{value: "ours"}
		v, src, err := c.Get(ctx, key, l.load)
		if err != nil || v != "ours" || src != Miss || l.calls.Load() != 1 {
			t.Fatalf("Get = %q, %v, %v (loads %d), want our own load", v, src, err, l.calls.Load())
		}
		if got := rdb.Get(ctx, key).Val(); got != "ours" {
			t.Fatalf("Redis has %q, want ours", got)
		}
	})

	t.Run("caller deadline while waiting", func(t *testing.T) {
		key := Key(testAugmenter(t, rdb), "v1", "task")
		rdb.Set(ctx, key+":lock", "other process", time.Minute)
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		l := &counter{value: "ours"}
		if _, _, err := c.Get(short, key, l.load); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		// The flight goes on without its caller: once the lock goes, it loads,
		// and a new caller joins it (or finds its value) rather than loading again.
		rdb.Del(ctx, key+":lock")
		if v, _, err := c.Get(ctx, key, l.load); err != nil || v != "ours" || l.calls.Load() != 1 {
			t.Fatalf("Get = %q, %v (loads %d), want the detached flight's value", v, err, l.calls.Load())
		}
	})
}

func TestCacheRedisLoadErrorReleasesLock(t *testing.T) {
	rdb := testRedis(t, 0)
	ctx := context.Background()
	key := Key(testAugmenter(t, rdb), "v1", "task")
	c := newRedisCache(rdb)
	if _, _, err := c.Get(ctx, key, func(context.Context) (string, error) { return "", errBoom }); !errors.Is(err, errBoom) {
		t.Fatalf("err = %v, want errBoom", err)
	}
	if rdb.Exists(ctx, key, key+":lock").Val() != 0 {
		t.Fatal("a failed load left a value or a lock in Redis")
	}
}

// countHook counts the commands a client processes.
type countHook struct{ n *atomic.Int32 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestCacheRedisDownFailsOpen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	// One dial per command, as camproxy's own clients are tuned: go-redis's default
	// retries and re-dials, with backoff, only lengthen the first Get.
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	var commands atomic.Int32
	rdb.AddHook(countHook{&commands})
	var logs testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	// No local tier, so every Get would go to the dead Redis.
	c := NewCache(CacheOptions{LocalEntries: 0, TTL: time.Minute}, rdb, log)
	c.cooldown = time.Hour // the Gets below all fall within it, however slow the machine
	l := &counter{value: "v"}
	for range 3 {
		v, src, err := c.Get(context.Background(), "k", l.load)
		if err != nil || v != "v" || src != Miss {
			t.Fatalf("Get with Redis down = %q, %v, %v, want a load", v, src, err)
		}
	}
	// The first Get found Redis down; the others skipped it during the cooldown.
	if n := commands.Load(); n != 1 {
		t.Errorf("%d Redis commands sent, want 1", n)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1 (rate-limited):\n%s", n, logs.String())
	}
	if c.redisUp() {
		t.Error("Redis used again during the cooldown")
	}

	// A short cooldown ends: Redis is tried again. (Sleeping at least the cooldown
	// is safe on any machine; it is the window above that must not be short.)
	short := NewCache(CacheOptions{LocalEntries: 0, TTL: time.Minute}, rdb, nil)
	short.cooldown = 20 * time.Millisecond
	if _, _, err := short.Get(context.Background(), "k", l.load); err != nil {
		t.Fatal(err)
	}
	if short.redisUp() {
		t.Error("Redis not skipped after it failed")
	}
	time.Sleep(short.cooldown)
	if !short.redisUp() {
		t.Error("Redis still skipped after the cooldown")
	}
}

func TestCacheFlush(t *testing.T) {
	// DB 15: Flush deletes every context key, which must not disturb other
	// packages' tests running against DB 0 at the same time.
	rdb := testRedis(t, 15)
	ctx := context.Background()
	key := Key(testAugmenter(t, rdb), "v1", "task")
	c := newRedisCache(rdb)
	l := &counter{value: "v"}
	if _, src, _ := c.Get(ctx, key, l.load); src != Miss {
		t.Fatalf("first Get = %v, want Miss", src)
	}
	c.Flush(ctx)
	if rdb.Exists(ctx, key).Val() != 0 {
		t.Fatal("Flush left the Redis key")
	}
	if _, src, _ := c.Get(ctx, key, l.load); src != Miss || l.calls.Load() != 2 {
		t.Fatalf("Get after Flush = %v (loads %d), want a new load", src, l.calls.Load())
	}
}
