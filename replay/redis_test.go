package replay

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/internal/testkit"
)

// The Redis-down tests dial closed ports on purpose; go-redis would log each dial.
func init() { testkit.QuietRedis() }

const testRedisAddr = "127.0.0.1:6379"

// testRedis returns a client for the local Redis, or skips the test when there is
// none (fails instead when CAMPROXY_REQUIRE_REDIS=1).
func testRedis(t *testing.T) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testRedisAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		if os.Getenv("CAMPROXY_REQUIRE_REDIS") == "1" {
			t.Fatalf("Redis at %s is required (CAMPROXY_REQUIRE_REDIS=1) but unreachable: %v", testRedisAddr, err)
		}
		t.Skipf("no Redis at %s (%v): skipping; set CAMPROXY_REQUIRE_REDIS=1 to make this a failure", testRedisAddr, err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// testStream returns a stream name unique to this test run, deleted at cleanup.
func testStream(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	name := fmt.Sprintf("camproxy:test:%s:%d", strings.ReplaceAll(t.Name(), "/", ":"), time.Now().UnixNano())
	t.Cleanup(func() { _ = rdb.Del(context.Background(), name).Err() })
	return name
}

func testLines(from, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"v":1,"type":"reward","id":"e%06d","episode_id":"ep","reward":1}`, from+i)
	}
	return out
}

func scanAll(t *testing.T, src Source) []string {
	t.Helper()
	var got []string
	if err := src.Scan(t.Context(), func(line []byte) error {
		got = append(got, string(line))
		return nil
	}); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return got
}

func checkLines(t *testing.T, got []string, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != string(want[i]) {
			t.Fatalf("line %d = %s, want %s", i, got[i], want[i])
		}
	}
}

func TestRedisSinkWriteScanPages(t *testing.T) {
	rdb := testRedis(t)
	stream := testStream(t, rdb)
	sink := NewRedisSink(rdb, stream, 0)
	if sink.Name() != "redis" {
		t.Errorf("Name = %q", sink.Name())
	}
	if p := sink.BatchPolicy(); p.MaxEvents != 512 || p.MaxWait != 50*time.Millisecond {
		t.Errorf("BatchPolicy = %+v", p)
	}
	var want [][]byte
	for n := 0; n < 2500; {
		size := min(512, 2500-n) // batches of 512, the last one short
		batch := testLines(n, size)
		if err := sink.Write(t.Context(), batch); err != nil {
			t.Fatalf("Write: %v", err)
		}
		want = append(want, batch...)
		n += size
	}
	if err := sink.Write(t.Context(), nil); err != nil {
		t.Fatalf("empty Write: %v", err)
	}
	if err := sink.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The caller's client stays open.
	if n, err := rdb.XLen(t.Context(), stream).Result(); err != nil || n != 2500 {
		t.Fatalf("XLEN = %d, %v; want 2500", n, err)
	}
	checkLines(t, scanAll(t, NewRedisSource(rdb, stream)), want)

	// Entries keep their one field "e".
	msgs, err := rdb.XRangeN(t.Context(), stream, "-", "+", 1).Result()
	if err != nil || len(msgs) != 1 || len(msgs[0].Values) != 1 || msgs[0].Values["e"] != string(want[0]) {
		t.Fatalf("first entry = %+v, %v", msgs, err)
	}
}

func TestRedisSourceScanStopsOnError(t *testing.T) {
	rdb := testRedis(t)
	stream := testStream(t, rdb)
	if err := NewRedisSink(rdb, stream, 0).Write(t.Context(), testLines(0, 1500)); err != nil {
		t.Fatal(err)
	}
	stop := fmt.Errorf("stop")
	n := 0
	err := NewRedisSource(rdb, stream).Scan(t.Context(), func([]byte) error {
		n++
		if n == 1200 {
			return stop
		}
		return nil
	})
	if err != stop || n != 1200 {
		t.Fatalf("Scan = %v after %d lines; want the callback's error after 1200", err, n)
	}
}

func TestRedisSourceEmptyAndForeignEntries(t *testing.T) {
	rdb := testRedis(t)
	stream := testStream(t, rdb)
	if got := scanAll(t, NewRedisSource(rdb, stream)); len(got) != 0 {
		t.Fatalf("missing stream scanned %d lines", len(got))
	}
	if err := rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: stream, Values: []any{"other", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	err := NewRedisSource(rdb, stream).Scan(t.Context(), func([]byte) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `no field "e"`) {
		t.Fatalf("Scan over a foreign entry = %v", err)
	}
}

func TestRedisSinkMaxLenTrimsApproximately(t *testing.T) {
	rdb := testRedis(t)
	stream := testStream(t, rdb)
	sink := NewRedisSink(rdb, stream, 1000)
	for i := 0; i < 10; i++ {
		if err := sink.Write(t.Context(), testLines(i*500, 500)); err != nil {
			t.Fatal(err)
		}
	}
	n, err := rdb.XLen(t.Context(), stream).Result()
	if err != nil {
		t.Fatal(err)
	}
	// "~" trims whole radix-tree nodes (100 entries by default): at least maxlen stay,
	// and far fewer than the 5000 written.
	if n < 1000 || n > 1500 {
		t.Fatalf("XLEN = %d after 5000 XADDs with MAXLEN ~ 1000", n)
	}
	got := scanAll(t, NewRedisSource(rdb, stream))
	if int64(len(got)) != n || got[len(got)-1] != string(testLines(4999, 1)[0]) {
		t.Fatalf("scan after trim: %d lines, last %q", len(got), got[len(got)-1])
	}
}

func TestRedisSinkDownFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	sink := NewRedisSink(rdb, "camproxy:replay", 0)
	sink.owned = true
	defer sink.Close()

	// The caller's deadline only keeps go-redis's dial retries short; how long the
	// Write took is not asserted (a Write that hung would meet go test's -timeout).
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = sink.Write(ctx, testLines(0, 3))
	if err == nil {
		t.Fatal("Write to a closed port succeeded")
	}
	t.Logf("Write failed after %v: %v", time.Since(start), err)
	if !strings.Contains(err.Error(), "camproxy:replay") {
		t.Errorf("error does not name the stream: %v", err)
	}
	if err := NewRedisSource(rdb, "camproxy:replay").Scan(ctx, func([]byte) error { return nil }); err == nil {
		t.Fatal("Scan of a closed port succeeded")
	}
}
