package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/replay/location"
)

// TestOpenRefuses: the sinks and sources take location.Parse's verdict, before
// touching anything (location's tests hold the table of URIs).
func TestOpenRefuses(t *testing.T) {
	for _, uri := range []string{"", "ftp://host/dir", "file://myhost/dir", "redis://127.0.0.1:1/0", "s3://b/p?foo=bar"} {
		want, perr := location.Parse(uri)
		if perr == nil {
			t.Fatalf("location.Parse(%q) accepted it: %+v", uri, want)
		}
		if _, err := OpenSink(t.Context(), uri, OpenOptions{}); !errors.Is(err, location.ErrBadURI) || err.Error() != perr.Error() {
			t.Errorf("OpenSink(%q): %v, want %v", uri, err, perr)
		}
		if _, err := OpenSource(t.Context(), uri); !errors.Is(err, location.ErrBadURI) || err.Error() != perr.Error() {
			t.Errorf("OpenSource(%q): %v, want %v", uri, err, perr)
		}
	}
}

func TestOpenFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "replay")
	uri := "file://" + filepath.ToSlash(dir)
	sink, err := OpenSink(t.Context(), uri, OpenOptions{Writer: "w1", FileSegmentBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if sink.Name() != "file" {
		t.Errorf("Name = %q", sink.Name())
	}
	want := testLines(0, 100)
	for i := 0; i < 100; i += 25 {
		if err := sink.Write(t.Context(), want[i:i+25]); err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "dt=*", "hr=*", "w1-*"))
	if len(segs) < 2 {
		t.Errorf("FileSegmentBytes not passed on: %d segments", len(segs))
	}
	src, err := OpenSource(t.Context(), uri)
	if err != nil {
		t.Fatal(err)
	}
	checkLines(t, scanAll(t, src), want)
}

func TestOpenFileRelative(t *testing.T) {
	t.Chdir(t.TempDir())
	sink, err := OpenSink(t.Context(), "file://./data/replay", OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := testLines(0, 3)
	if err := sink.Write(t.Context(), want); err != nil {
		t.Fatal(err)
	}
	_ = sink.Close()
	segs, _ := filepath.Glob(filepath.Join("data", "replay", "dt=*", "hr=*", "*.jsonl"))
	host, _ := os.Hostname()
	if len(segs) != 1 || !strings.HasPrefix(filepath.Base(segs[0]), fmt.Sprintf("%s-%d", host, os.Getpid())) {
		t.Errorf("segments %v: want one named after <hostname>-<pid>", segs)
	}
	src, err := OpenSource(t.Context(), "file://./data/replay")
	if err != nil {
		t.Fatal(err)
	}
	checkLines(t, scanAll(t, src), want)
}

func TestOpenRedis(t *testing.T) {
	rdb := testRedis(t)
	stream := testStream(t, rdb)
	uri := fmt.Sprintf("redis://%s/0?stream=%s&maxlen=100000", testRedisAddr, stream)
	sink, err := OpenSink(t.Context(), uri, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs, ok := sink.(*RedisSink)
	if !ok || rs.maxLen != 100000 || rs.stream != stream || rs.Name() != "redis" {
		t.Fatalf("OpenSink = %#v", sink)
	}
	want := testLines(0, 1500)
	for i := 0; i < len(want); i += 500 {
		if err := sink.Write(t.Context(), want[i:i+500]); err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	// The sink made its client, so Close closed it.
	if err := rs.rdb.Ping(t.Context()).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("client after Close: %v", err)
	}
	src, err := OpenSource(t.Context(), uri)
	if err != nil {
		t.Fatal(err)
	}
	checkLines(t, scanAll(t, src), want)
	c, ok := src.(io.Closer)
	if !ok {
		t.Fatal("the Redis source is not an io.Closer")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenS3(t *testing.T) {
	fake := testkit.StartS3(t, "replay")
	uri := "s3://replay/fleet/a?endpoint=" + fake.URL
	sink, err := OpenSink(t.Context(), uri, OpenOptions{Writer: "pod-7"})
	if err != nil {
		t.Fatal(err)
	}
	if sink.Name() != "s3" {
		t.Errorf("Name = %q", sink.Name())
	}
	want := testLines(0, 30)
	for i := 0; i < 30; i += 10 {
		if err := sink.Write(t.Context(), want[i:i+10]); err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	keys := fake.Keys(t, "replay", "fleet/a/")
	if len(keys) != 3 || !strings.Contains(keys[0], "-pod-7-000000.jsonl.gz") {
		t.Errorf("keys = %v", keys)
	}
	src, err := OpenSource(t.Context(), uri)
	if err != nil {
		t.Fatal(err)
	}
	checkLines(t, scanAll(t, src), want)

	// The region: the URI's, else the environment's, else us-east-1.
	for _, tc := range []struct{ uri, env, want string }{
		{"s3://b/p?region=eu-west-3", "ap-south-1", "eu-west-3"},
		{"s3://b/p", "ap-south-1", "ap-south-1"},
		{"s3://b/p", "", "us-east-1"},
	} {
		t.Setenv("AWS_REGION", tc.env)
		src, err := OpenSource(t.Context(), tc.uri)
		if err != nil {
			t.Fatal(err)
		}
		if got := src.(*S3Source).client.Options().Region; got != tc.want {
			t.Errorf("%s with AWS_REGION=%q: region %q, want %q", tc.uri, tc.env, got, tc.want)
		}
	}
}

func TestOpenDoesNotConnect(t *testing.T) {
	testkit.S3Env(t)
	// Nothing listens on these; opening must still succeed at once.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	for _, uri := range []string{
		"redis://127.0.0.1:1/0?stream=s",
		"s3://b/p?endpoint=http://127.0.0.1:1",
	} {
		sink, err := OpenSink(ctx, uri, OpenOptions{})
		if err != nil {
			t.Fatalf("OpenSink(%s): %v", uri, err)
		}
		_ = sink.Close()
		src, err := OpenSource(ctx, uri)
		if err != nil {
			t.Fatalf("OpenSource(%s): %v", uri, err)
		}
		if c, ok := src.(io.Closer); ok {
			_ = c.Close()
		}
	}
}

func TestOpenRedisOptionsThatPanicGoRedis(t *testing.T) {
	// go-redis panics on these at construction; OpenSink must return an error instead.
	for _, uri := range []string{
		"redis://127.0.0.1:1/0?stream=s&pool_size=3000000000",
		"redis://127.0.0.1:1?stream=s&addr=127.0.0.1:2&max_idle_conns=3000000000",
		"redis://127.0.0.1:1?stream=s&min_idle_conns=-99999999999999999999",
	} {
		if _, err := OpenSink(t.Context(), uri, OpenOptions{}); !errors.Is(err, location.ErrBadURI) || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("OpenSink(%s) = %v, want location.ErrBadURI", uri, err)
		}
		if _, err := OpenSource(t.Context(), uri); !errors.Is(err, location.ErrBadURI) {
			t.Errorf("OpenSource(%s) = %v, want location.ErrBadURI", uri, err)
		}
	}
	// Sentinel with latency routing needs the failover cluster client.
	uri := "redis://127.0.0.1:1?stream=s&master_name=m&route_by_latency=true"
	sink, err := OpenSink(t.Context(), uri, OpenOptions{})
	if err != nil {
		t.Fatalf("OpenSink(%s): %v", uri, err)
	}
	if _, ok := sink.(*RedisSink).rdb.(*redis.ClusterClient); !ok {
		t.Errorf("client is a %T", sink.(*RedisSink).rdb)
	}
	_ = sink.Close()
}
