package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestParseURIGood(t *testing.T) {
	for _, tc := range []struct {
		uri   string
		check func(t *testing.T, sp *uriSpec)
	}{
		{"file:///var/lib/camproxy/replay", func(t *testing.T, sp *uriSpec) {
			eq(t, sp.scheme, "file")
			eq(t, sp.dir, "/var/lib/camproxy/replay")
		}},
		{"file://./camproxy-data/replay", func(t *testing.T, sp *uriSpec) { eq(t, sp.dir, "camproxy-data/replay") }},
		{"file://../up/dir/", func(t *testing.T, sp *uriSpec) { eq(t, sp.dir, "../up/dir") }},
		{"file://.", func(t *testing.T, sp *uriSpec) { eq(t, sp.dir, ".") }},
		{"file://localhost/abs%20dir", func(t *testing.T, sp *uriSpec) { eq(t, sp.dir, "/abs dir") }},
		{"file:rel/dir", func(t *testing.T, sp *uriSpec) { eq(t, sp.dir, "rel/dir") }},
		{"redis://localhost:6379/0?stream=camproxy:replay", func(t *testing.T, sp *uriSpec) {
			eq(t, sp.scheme, "redis")
			eq(t, sp.stream, "camproxy:replay")
			eq(t, sp.maxLen, int64(0))
			eq(t, sp.redisOpts.Addr, "localhost:6379")
			eq(t, sp.redisOpts.DB, 0)
			eq(t, sp.redisOpts.ContextTimeoutEnabled, true)
			eq(t, sp.redisOpts.TLSConfig == nil, true)
		}},
		{"redis://:s3cret@10.0.0.1/3?stream=s&maxlen=1000000&dial_timeout=2s", func(t *testing.T, sp *uriSpec) {
			eq(t, sp.maxLen, int64(1000000))
			eq(t, sp.redisOpts.Addr, "10.0.0.1:6379")
			eq(t, sp.redisOpts.DB, 3)
			eq(t, sp.redisOpts.Password, "s3cret")
			eq(t, sp.redisOpts.DialTimeout, 2*time.Second)
		}},
		{"rediss://user:p%40ss@cache.example.com:6380?stream=a%2Fb&db=2", func(t *testing.T, sp *uriSpec) {
			eq(t, sp.stream, "a/b")
			eq(t, sp.redisOpts.Username, "user")
			eq(t, sp.redisOpts.Password, "p@ss")
			eq(t, sp.redisOpts.DB, 2)
			eq(t, sp.redisOpts.TLSConfig != nil && sp.redisOpts.TLSConfig.ServerName == "cache.example.com", true)
		}},
		{"redis://n1:7000?stream=s&addr=n2:7000&addr=n3:7000", func(t *testing.T, sp *uriSpec) {
			eq(t, sp.redisOpts == nil, true)
			eq(t, strings.Join(sp.redisCluster.Addrs, ","), "n1:7000,n2:7000,n3:7000")
			eq(t, sp.redisCluster.ContextTimeoutEnabled, true)
		}},
		{"redis://:pw@sentinel1:26379/1?stream=s&master_name=mymaster&addr=sentinel2:26379", func(t *testing.T, sp *uriSpec) {
			eq(t, sp.redisFailover.MasterName, "mymaster")
			eq(t, sp.redisFailover.DB, 1)
			eq(t, strings.Join(sp.redisFailover.SentinelAddrs, ","), "sentinel1:26379,sentinel2:26379")
			eq(t, sp.redisFailover.ContextTimeoutEnabled, true)
		}},
		{"s3://my-bucket/replay/prod?region=eu-west-1", func(t *testing.T, sp *uriSpec) {
			eq(t, sp.scheme, "s3")
			eq(t, sp.bucket, "my-bucket")
			eq(t, sp.prefix, "replay/prod")
			eq(t, sp.region, "eu-west-1")
			eq(t, sp.endpoint, "")
		}},
		{"s3://b?endpoint=http://127.0.0.1:9000", func(t *testing.T, sp *uriSpec) {
			eq(t, sp.bucket, "b")
			eq(t, sp.prefix, "")
			eq(t, sp.endpoint, "http://127.0.0.1:9000")
		}},
		{"s3://b/p/", func(t *testing.T, sp *uriSpec) { eq(t, sp.prefix, "p") }},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			sp, err := parseURI(tc.uri)
			if err != nil {
				t.Fatalf("parseURI: %v", err)
			}
			tc.check(t, sp)
		})
	}
}

func eq[T comparable](t *testing.T, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestParseURIBad(t *testing.T) {
	const pw = "Hunter2pw"
	for _, tc := range []struct{ uri, want string }{
		{"", "no scheme"},
		{"/var/lib/replay", "no scheme"},
		{"ftp://host/dir", `unknown scheme "ftp"`},
		{"http://host/dir", `unknown scheme "http"`},
		{"file://", "needs a directory"},
		{"file:", "needs a directory"},
		{"file://host/dir", `file URI host "host"`},
		{"file:///dir?segment=1", "no query parameters"},
		{"file://u:" + pw + "@localhost/dir", "no user"},
		{"redis://localhost:6379/0", "no stream name"},
		{"redis://:" + pw + "@localhost:6379/0?stream=", "no stream name"},
		{"redis://:" + pw + "@localhost:6379/x?stream=s", "database number"},
		{"redis://:" + pw + "@localhost:6379/-1?stream=s", "database number"},
		{"redis://localhost:6379/0/1?stream=s", "database number"},
		{"redis://localhost/0?stream=s&db=x", "database number"},
		{"redis://:" + pw + "@localhost?stream=s&maxlen=lots", `maxlen "lots"`},
		{"redis://localhost?stream=s&maxlen=-5", `maxlen "-5"`},
		{"redis://:" + pw + "@localhost?stream=s&dial_timeout=soon", "dial_timeout"},
		{"redis://:" + pw + "@localhost?stream=s&bogus=1", "unexpected option: bogus"},
		{"redis:///0?stream=s", "needs a host"},
		{"redis://n1:7000/2?stream=s&addr=n2:7000", "only database 0"},
		{"redis://n1:7000?stream=s&addr=n2", "addr"},
		{"redis://s1:26379?stream=s&master_name=", "master_name is empty"},
		{"rediss://:" + pw + "@host:port/0?stream=s", "not a valid URL"},
		{"redis://:" + pw + "#frag@host?stream=s", "not a valid URL"},
		{"redis://u:1234#" + pw + "@host?stream=s", `unexpected "#"`},
		{"redis://u:1234/" + pw + "@host?stream=s", "database number"},
		{"redis://host?stream=s&%zz=1", "bad query"},
		{"s3://", "needs a bucket"},
		{"s3:///prefix", "needs a bucket"},
		{"s3://key:" + pw + "@bucket/p", "credentials do not go in an s3 URI"},
		{"s3://bucket:9000/p", "host of an s3 URI is the bucket"},
		{"s3://b/p?region=US%20East", "region"},
		{"s3://b/p?regoin=us-east-1", `unknown query parameter "regoin"`},
		{"s3://b/p?endpoint=127.0.0.1:9000", "endpoint must be an http"},
		{"s3://b/p?endpoint=ftp://h", "endpoint must be an http"},
		{"s3://b/p?endpoint=http://u:" + pw + "@h", "endpoint must not hold credentials"},
		{"s3://b/p?endpoint=%zz", "bad query"},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			sp, err := parseURI(tc.uri)
			if err == nil {
				t.Fatalf("parseURI accepted it: %+v", sp)
			}
			if !errors.Is(err, ErrBadURI) {
				t.Errorf("error does not wrap ErrBadURI: %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), pw) {
				t.Errorf("error shows the password: %v", err)
			}
			// OpenSink and OpenSource fail the same way, before touching anything.
			if _, err := OpenSink(t.Context(), tc.uri, OpenOptions{}); !errors.Is(err, ErrBadURI) {
				t.Errorf("OpenSink: %v", err)
			}
			if _, err := OpenSource(t.Context(), tc.uri); !errors.Is(err, ErrBadURI) {
				t.Errorf("OpenSource: %v", err)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"file:///var/lib/replay", "file:///var/lib/replay"},
		{"redis://localhost:6379/0?stream=camproxy:replay", "redis://localhost:6379/0?stream=camproxy:replay"},
		{"redis://:secret@localhost:6379/0?stream=camproxy:replay&maxlen=10", "redis://:****@localhost:6379/0?stream=camproxy:replay&maxlen=10"},
		{"rediss://user:p%40ss@h:6380/1?stream=s", "rediss://user:****@h:6380/1?stream=s"},
		{"redis://user@h/0?stream=s", "redis://user@h/0?stream=s"},
		{"redis://:@h/0?stream=s", "redis://:****@h/0?stream=s"},
		{"s3://b/p?region=us-east-1&endpoint=http://127.0.0.1:9000", "s3://b/p?region=us-east-1&endpoint=http://127.0.0.1:9000"},
		{"s3://b/p?endpoint=http://u:pw@h:9000", "s3://****"},
		{"s3://b/p?token=abc&region=x&secret_key=def", "s3://b/p?token=****&region=x&secret_key=****"},
		{"redis://:pa ss@host:port", "****"},
		{"redis://u:1234/secret@host?stream=s", "redis://****"},
		{"redis://u:1234?x=secret@host", "redis://****"},
		{"file:///home/me@corp/replay", "file:///home/me@corp/replay"},
		{"not a url", "not a url"},
	} {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
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
	fake := newTestS3(t, "replay")
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
	keys := listKeys(t, fake.Client(), "replay", "fleet/a/")
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
	s3Env(t)
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
		if _, err := OpenSink(t.Context(), uri, OpenOptions{}); !errors.Is(err, ErrBadURI) || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("OpenSink(%s) = %v, want ErrBadURI", uri, err)
		}
		if _, err := OpenSource(t.Context(), uri); !errors.Is(err, ErrBadURI) {
			t.Errorf("OpenSource(%s) = %v, want ErrBadURI", uri, err)
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

func FuzzOpenURI(f *testing.F) {
	for _, s := range []string{
		"file:///var/lib/camproxy/replay", "file://./camproxy-data/replay", "file:rel", "file://",
		"redis://:pw@localhost:6379/0?stream=camproxy:replay&maxlen=1000000",
		"rediss://u:p@h:6380/1?stream=s&dial_timeout=3s", "redis://h?stream=s&addr=h2:1&addr=h3:2",
		"redis://h/2?stream=s&master_name=m", "redis://u:1234/pw@h?stream=s", "redis://%zz",
		"redis://:longsecret@h:6379/x?stream=s", "redis://:longsecret@h:6379/0?stream=s&maxlen=x",
		"s3://bucket/prefix?region=us-east-1&endpoint=http://127.0.0.1:9000", "s3://b:1/p", "s3://",
		"s3://b/p?endpoint=%", "unix:///tmp/redis.sock", "::", "redis://[::1]:6379/0?stream=s",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		red := Redact(uri)
		sp, err := parseURI(uri)
		// A password that shows once in the URI must show neither in Redact nor in errors.
		if u, perr := url.Parse(uri); perr == nil {
			if pw, ok := u.User.Password(); ok && len(pw) >= 6 && strings.Count(uri, pw) == 1 {
				if strings.Contains(red, pw) {
					t.Fatalf("Redact(%q) = %q shows the password", uri, red)
				}
				if err != nil && strings.Contains(err.Error(), pw) {
					t.Fatalf("error for %q shows the password: %v", uri, err)
				}
			}
		}
		if err != nil {
			if !errors.Is(err, ErrBadURI) {
				t.Fatalf("error does not wrap ErrBadURI: %v", err)
			}
			return
		}
		switch sp.scheme {
		case "file":
			if sp.dir == "" {
				t.Fatal("file spec without a dir")
			}
		case "redis":
			if sp.stream == "" || (sp.redisOpts == nil) == (sp.redisCluster == nil) == (sp.redisFailover == nil) {
				t.Fatalf("bad redis spec %+v", sp)
			}
			var pass string
			switch {
			case sp.redisOpts != nil:
				pass = sp.redisOpts.Password
			case sp.redisCluster != nil:
				pass = sp.redisCluster.Password
			default:
				pass = sp.redisFailover.SentinelPassword
			}
			if len(pass) >= 4 && strings.Contains(red, pass) {
				t.Fatalf("Redact(%q) = %q shows the password %q", uri, red, pass)
			}
		case "s3":
			if sp.bucket == "" {
				t.Fatal("s3 spec without a bucket")
			}
		default:
			t.Fatalf("scheme %q", sp.scheme)
		}
	})
}
