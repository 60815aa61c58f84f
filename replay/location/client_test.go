package location

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRedisClientTuning: a replay or store client gives up after one dial and
// bounds each command by its caller's deadline, unless the URI chose otherwise.
func TestRedisClientTuning(t *testing.T) {
	for _, tc := range []struct {
		uri     string
		retries int
	}{
		{"redis://127.0.0.1:1/0?stream=s", 1},
		{"redis://127.0.0.1:1/0?stream=s&max_retries=4", 4},
	} {
		sp, err := Parse(tc.uri)
		if err != nil {
			t.Fatal(err)
		}
		rdb, err := sp.RedisClient()
		if err != nil {
			t.Fatal(err)
		}
		o := rdb.(*redis.Client).Options()
		if o.MaxRetries != tc.retries || o.DialerRetries != 1 || !o.ContextTimeoutEnabled {
			t.Errorf("%s: MaxRetries %d DialerRetries %d ContextTimeoutEnabled %v", tc.uri, o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled)
		}
		_ = rdb.Close()
	}
	sp, err := Parse("redis://127.0.0.1:1?stream=s&addr=127.0.0.1:2")
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := sp.RedisClient()
	if err != nil {
		t.Fatal(err)
	}
	if o := rdb.(*redis.ClusterClient).Options(); o.ClusterStateReloadInterval != 5*time.Second || !o.ContextTimeoutEnabled {
		t.Errorf("cluster options %+v", o)
	}
	_ = rdb.Close()
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

// TestURI: a plain path becomes the file:// URI of its absolute directory, escaped
// so that Parse reads back the same directory; a URI stays as it is.
func TestURI(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, dir string }{
		{"camproxy-data/replay", filepath.Join(wd, "camproxy-data", "replay")},
		{"./a b/#1/100%", filepath.Join(wd, "a b", "#1", "100%")},
		{filepath.Join(wd, "abs"), filepath.Join(wd, "abs")},
	} {
		uri := URI(tc.in)
		sp, err := Parse(uri)
		if err != nil || sp.Scheme != File || sp.Dir != tc.dir {
			t.Errorf("URI(%q) = %q: Parse gives %+v, %v; want the directory %s", tc.in, uri, sp, err, tc.dir)
		}
	}
	for _, s := range []string{"", "file://./rel", "file:rel/dir", "redis://h:6379/0?stream=s", "s3://b/p", "s3:bucket"} {
		if got := URI(s); got != s {
			t.Errorf("URI(%q) = %q, want it unchanged", s, got)
		}
	}
}
