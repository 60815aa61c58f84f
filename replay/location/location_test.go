package location

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/internal/redisx"
)

// got is the part of a Spec a row checks; redis is "KIND ADDRS DB" (user and
// password checked by rows of their own).
type got struct {
	scheme, dir, redis, stream, keyPrefix, bucket, prefix, region, endpoint string
	maxLen                                                                  int64
}

func summary(sp *Spec) got {
	g := got{scheme: sp.Scheme, dir: sp.Dir, stream: sp.Stream, keyPrefix: sp.KeyPrefix, maxLen: sp.MaxLen,
		bucket: sp.Bucket, prefix: sp.Prefix, region: sp.Region, endpoint: sp.Endpoint}
	if r := sp.Redis; r != nil {
		switch r.Kind {
		case redisx.Single:
			g.redis = "single " + r.Single.Addr + " " + strconv.Itoa(r.Single.DB)
		case redisx.Cluster:
			g.redis = "cluster " + strings.Join(r.Cluster.Addrs, ",")
		case redisx.Sentinel:
			g.redis = "sentinel " + r.Failover.MasterName + "@" + strings.Join(r.Failover.SentinelAddrs, ",") + " " + strconv.Itoa(r.Failover.DB)
		}
	}
	return g
}

// TestParse: what Parse (a replay URI) and ParseStore (a store location) make of
// the URIs they accept.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		store bool // ParseStore, else Parse
		in    string
		want  got
	}{
		{false, "file:///var/lib/camproxy/replay", got{scheme: File, dir: "/var/lib/camproxy/replay"}},
		{false, "file://./camproxy-data/replay", got{scheme: File, dir: "camproxy-data/replay"}},
		{false, "file://../up/dir/", got{scheme: File, dir: "../up/dir"}},
		{false, "file://.", got{scheme: File, dir: "."}},
		{false, "file://localhost/abs%20dir", got{scheme: File, dir: "/abs dir"}},
		{false, "file:rel/dir", got{scheme: File, dir: "rel/dir"}},
		{false, "file:///", got{scheme: File, dir: "/"}},
		{false, "FILE:///upper", got{scheme: File, dir: "/upper"}}, // a scheme is case-insensitive
		{false, "file:///home/me@corp/replay", got{scheme: File, dir: "/home/me@corp/replay"}},
		{false, "redis://localhost:6379/0?stream=camproxy:replay", got{scheme: Redis, redis: "single localhost:6379 0", stream: "camproxy:replay"}},
		{false, "redis://:s3cret@10.0.0.1/3?stream=s&maxlen=1000000&dial_timeout=2s", got{scheme: Redis, redis: "single 10.0.0.1:6379 3", stream: "s", maxLen: 1000000}},
		{false, "rediss://user:p%40ss@cache.example.com:6380?stream=a%2Fb&db=2", got{scheme: Redis, redis: "single cache.example.com:6380 2", stream: "a/b"}},
		{false, "redis://h?stream=first&stream=last&maxlen=0", got{scheme: Redis, redis: "single h:6379 0", stream: "last"}}, // the last value, as go-redis reads its own
		{false, "redis://n1:7000?stream=s&addr=n2:7000&addr=n3:7000", got{scheme: Redis, redis: "cluster n1:7000,n2:7000,n3:7000", stream: "s"}},
		{false, "redis://:pw@sentinel1:26379/1?stream=s&master_name=mymaster&addr=sentinel2:26379", got{scheme: Redis, redis: "sentinel mymaster@sentinel1:26379,sentinel2:26379 1", stream: "s"}},
		{false, "s3://my-bucket/replay/prod?region=eu-west-1", got{scheme: S3, bucket: "my-bucket", prefix: "replay/prod", region: "eu-west-1"}},
		{false, "s3://b?endpoint=http://127.0.0.1:9000", got{scheme: S3, bucket: "b", endpoint: "http://127.0.0.1:9000"}},
		{false, "s3://b/p/?region=us-east-1&endpoint=https://minio.internal", got{scheme: S3, bucket: "b", prefix: "p", region: "us-east-1", endpoint: "https://minio.internal"}},
		{true, "./camproxy-data/playbook", got{scheme: File, dir: "camproxy-data/playbook"}},
		{true, "/var/lib/playbook/", got{scheme: File, dir: "/var/lib/playbook"}},
		{true, "plain", got{scheme: File, dir: "plain"}},
		{true, "dir:with:colons", got{scheme: File, dir: "dir:with:colons"}}, // not a scheme of ours
		{true, "/home/me@corp/pb", got{scheme: File, dir: "/home/me@corp/pb"}},
		{true, "file:///abs/pb", got{scheme: File, dir: "/abs/pb"}},
		{true, "file:rel/pb", got{scheme: File, dir: "rel/pb"}},
		{true, "s3://bucket/some/prefix?region=eu-west-1", got{scheme: S3, bucket: "bucket", prefix: "some/prefix", region: "eu-west-1"}},
		{true, "redis://127.0.0.1:6379/0?prefix=camproxy:pb", got{scheme: Redis, redis: "single 127.0.0.1:6379 0", keyPrefix: "camproxy:pb"}},
		{true, "redis://:pw@127.0.0.1:6379/1?key=old:name", got{scheme: Redis, redis: "single 127.0.0.1:6379 1", keyPrefix: "old:name"}},
		{true, "redis://h?key=old&prefix=new", got{scheme: Redis, redis: "single h:6379 0", keyPrefix: "new"}}, // prefix wins
		{true, "redis://h/0", got{scheme: Redis, redis: "single h:6379 0"}},                                    // the store's default prefix
		{true, "rediss://h:1?prefix=p&addr=h2:1", got{scheme: Redis, redis: "cluster h:1,h2:1", keyPrefix: "p"}},
		{true, "redis://s1:26379?prefix=p&master_name=m", got{scheme: Redis, redis: "sentinel m@s1:26379 0", keyPrefix: "p"}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			parse := Parse
			if tc.store {
				parse = ParseStore
			}
			sp, err := parse(tc.in)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if g := summary(sp); g != tc.want {
				t.Errorf("got  %+v\nwant %+v", g, tc.want)
			}
			if !IsDir(tc.in) && sp.String() != redisx.Redact(tc.in) {
				t.Errorf("String() = %q, want the redacted URI", sp.String())
			}
			// A file or s3 URI names the same place as a replay URI and as a store.
			if sp.Scheme != Redis && !IsDir(tc.in) {
				other := ParseStore
				if tc.store {
					other = Parse
				}
				if o, err := other(tc.in); err != nil || summary(o) != tc.want {
					t.Errorf("the other parser: %+v, %v", o, err)
				}
			}
		})
	}
}

// TestParseRedisOptions: the options go-redis gets, as the URI gave them: no tuning
// (that is the client maker's, Spec.RedisClient).
func TestParseRedisOptions(t *testing.T) {
	sp, err := Parse("rediss://user:p%40ss@cache.example.com:6380?stream=s&dial_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	o := sp.Redis.Single
	if o.Username != "user" || o.Password != "p@ss" || o.TLSConfig == nil || o.TLSConfig.ServerName != "cache.example.com" ||
		o.DialTimeout != 2*time.Second || o.ReadTimeout != 0 || o.ContextTimeoutEnabled {
		t.Errorf("options %+v", o)
	}
}

// pw is a password in the refused rows: no message may show it.
const pw = "Hunter2pw"

// TestParseRefused: what Parse and ParseStore say of the URIs they refuse.
func TestParseRefused(t *testing.T) {
	for _, tc := range []struct {
		store    bool // ParseStore, else Parse
		in, want string
	}{
		{false, "", "no scheme"},
		{false, "/var/lib/replay", "no scheme"},
		{false, "ftp://host/dir", `unknown scheme "ftp"; use file, redis, rediss or s3`},
		{false, "http://host/dir", `unknown scheme "http"`},
		{false, "file://", "needs a directory"},
		{false, "file:", "needs a directory"},
		{false, "file://localhost", "needs a directory"},
		{false, "file://host/dir", `file URI host "host"`},
		{false, "file://myhost/data/replay", `file URI host "myhost"`},
		{false, "file:///dir?segment=1", "no query parameters"},
		{false, "file://u:" + pw + "@localhost/dir", "no user"},
		{false, "file:///a%00b", "NUL byte"},
		{false, "file:///a\x00b", "not a valid URL"},
		{false, "file:///a#b", `unexpected "#"`},
		{false, "redis://localhost:6379/0", "no stream name"},
		{false, "redis://:" + pw + "@localhost:6379/0?stream=", "no stream name"},
		{false, "redis://:" + pw + "@localhost:6379/x?stream=s", "database number"},
		{false, "redis://:" + pw + "@localhost:6379/-1?stream=s", "database number"},
		{false, "redis://localhost:6379/0/1?stream=s", "database number"},
		{false, "redis://localhost/0?stream=s&db=x", "database number"},
		{false, "redis://:" + pw + "@localhost?stream=s&maxlen=lots", `maxlen "lots"`},
		{false, "redis://localhost?stream=s&maxlen=-5", `maxlen "-5"`},
		{false, "redis://:" + pw + "@localhost?stream=s&dial_timeout=soon", "dial_timeout"},
		{false, "redis://:" + pw + "@localhost?stream=s&bogus=1", "unexpected option: bogus"},
		{false, "redis://localhost?stream=s&prefix=p", "unexpected option: prefix"}, // a store's parameter
		{false, "redis:///0?stream=s", "needs a host"},
		{false, "redis://h:99999?stream=s", "port"},
		{false, "redis://n1:7000/2?stream=s&addr=n2:7000", "only database 0"},
		{false, "redis://n1:7000?stream=s&addr=n2", "addr"},
		{false, "redis://s1:26379?stream=s&master_name=", "master_name is empty"},
		{false, "redis://h?stream=s&pool_size=3000000000", "out of range"},
		{false, "rediss://:" + pw + "@host:port/0?stream=s", "not a valid URL"},
		{false, "redis://:" + pw + "#frag@host?stream=s", "not a valid URL"},
		{false, "redis://u:1234#" + pw + "@host?stream=s", `unexpected "#"`},
		{false, "redis://h?stream=s#frag", `unexpected "#"`},
		{false, "redis://u:1234/" + pw + "@host?stream=s", "database number"},
		{false, "redis://host?stream=s&%zz=1", "bad query"},
		{false, "s3://", "needs a bucket"},
		{false, "s3:///prefix", "needs a bucket"},
		{false, "s3:bucket", "needs a bucket"},
		{false, "s3://key:" + pw + "@bucket/p", "credentials do not go in an s3 URI"},
		{false, "s3://bucket:9000/p", "host of an s3 URI is the bucket"},
		{false, "s3://[::1]/p", "host of an s3 URI is the bucket"},
		{false, "s3://b/p?region=US%20East", "region"},
		{false, "s3://b/p?regoin=us-east-1", `unknown query parameter "regoin"`},
		{false, "s3://b/p?foo=bar", `unknown query parameter "foo"`},
		{false, "s3://b/p?endpoint=127.0.0.1:9000", "endpoint must be an http"},
		{false, "s3://b/p?endpoint=ftp://h", "endpoint must be an http"},
		{false, "s3://b/p?endpoint=http://u:" + pw + "@h", "endpoint must not hold credentials"},
		{false, "s3://b/p?endpoint=%zz", "bad query"},
		{true, "", "required: a directory"},
		{true, "/a\x00b", "NUL byte"},
		{true, "ftp://x/y", `unknown scheme "ftp"; use a directory, file, redis, rediss or s3`},
		{true, "redis:", "needs a host"},
		{true, "s3:bucket", "needs a bucket"},
		{true, "file://myhost/pb", `file URI host "myhost"`},
		{true, "redis://:" + pw + "@h?prefix=p&stream=s", "unexpected option: stream"}, // a replay URI's parameter
		{true, "redis://h?prefix=p&maxlen=1", "unexpected option: maxlen"},
		{true, "s3://b/p?foo=bar", `unknown query parameter "foo"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			parse, what := Parse, "bad replay URI"
			if tc.store {
				parse, what = ParseStore, "bad playbook store"
			}
			sp, err := parse(tc.in)
			if err == nil {
				t.Fatalf("parse accepted it: %+v", sp)
			}
			checkRefusal(t, err, what, tc.want)
		})
	}
}

// checkRefusal: err is an *Error wrapping ErrBadURI that says what and want, whose
// Reason is its message without the URI, and none of it shows pw.
func checkRefusal(t *testing.T, err error, what, want string) {
	t.Helper()
	e, ok := errors.AsType[*Error](err)
	if !ok || !errors.Is(err, ErrBadURI) {
		t.Fatalf("%T %v: want an *Error wrapping ErrBadURI", err, err)
	}
	if !strings.HasPrefix(err.Error(), what) || !strings.HasSuffix(err.Error(), ": "+e.Reason) || Reason(err) != e.Reason {
		t.Errorf("error %q: want %q … : Reason %q", err, what, e.Reason)
	}
	if !strings.Contains(e.Reason, want) {
		t.Errorf("reason %q does not say %q", e.Reason, want)
	}
	if strings.Contains(err.Error(), pw) {
		t.Errorf("error shows the password: %v", err)
	}
}

func TestIsDir(t *testing.T) {
	for s, want := range map[string]bool{
		"dir": true, "./a/b": true, "/abs": true, `C:\data`: true, "dir:x": true, "": true,
		"file:rel": false, "FILE:rel": false, "s3:b": false, "redis:": false, "rediss:h": false,
		"ftp://x": false, "a/b://c": false,
	} {
		if IsDir(s) != want {
			t.Errorf("IsDir(%q) = %v", s, !want)
		}
	}
}

func TestBad(t *testing.T) {
	sp, err := Parse("redis://:" + pw + "@h?stream=s")
	if err != nil {
		t.Fatal(err)
	}
	err = sp.Bad(fmt.Errorf("%w: go-redis rejects the options: x", redisx.ErrBadURL))
	checkRefusal(t, err, "bad replay URI redis://:****@h?stream=s", "go-redis rejects")
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"file:///var/lib/camproxy/replay", "file://./camproxy-data/replay", "file:rel", "file://", "file://h/x", "file:///a%00b",
		"redis://:pw@localhost:6379/0?stream=camproxy:replay&maxlen=1000000",
		"rediss://u:p@h:6380/1?stream=s&dial_timeout=3s", "redis://h?stream=s&addr=h2:1&addr=h3:2",
		"redis://h/2?stream=s&master_name=m", "redis://u:1234/pw@h?stream=s", "redis://%zz",
		"redis://:longsecret@h:6379/x?stream=s", "redis://:longsecret@h:6379/0?stream=s&maxlen=x",
		"redis://h?prefix=p&key=k", "s3://bucket/prefix?region=us-east-1&endpoint=http://127.0.0.1:9000",
		"s3://b:1/p", "s3://", "s3://b/p?endpoint=%", "s3://b?foo=bar", "unix:///tmp/redis.sock", "::",
		"redis://[::1]:6379/0?stream=s", "./dir", "dir:x", "s3:b", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		sp, err := Parse(uri)
		st, serr := ParseStore(uri)
		// A password that shows once in the URI shows in no message.
		if u, perr := url.Parse(uri); perr == nil {
			if p, ok := u.User.Password(); ok && len(p) >= 6 && strings.Count(uri, p) == 1 {
				for _, e := range []error{err, serr} {
					if e != nil && strings.Contains(e.Error(), p) {
						t.Fatalf("error for %q shows the password: %v", uri, e)
					}
				}
				for _, s := range []*Spec{sp, st} {
					// (A bare directory is shown as it is: a path holds no password.)
					if s != nil && !IsDir(uri) && strings.Contains(s.String(), p) {
						t.Fatalf("String() of %q = %q shows the password", uri, s)
					}
				}
			}
		}
		for _, e := range []error{err, serr} {
			if _, ok := errors.AsType[*Error](e); e != nil && (!ok || !errors.Is(e, ErrBadURI)) {
				t.Fatalf("%q: %T %v is not an *Error wrapping ErrBadURI", uri, e, e)
			}
		}
		for _, s := range []*Spec{sp, st} {
			if s != nil {
				checkSpec(t, uri, s)
			}
		}
		if sp != nil && sp.Scheme == Redis && sp.Stream == "" {
			t.Fatalf("%q: a replay URI without a stream: %+v", uri, sp)
		}
		// The two entry points agree on everything but Redis's parameters and bare directories.
		if sp != nil && sp.Scheme != Redis && (st == nil || summary(st) != summary(sp)) {
			t.Fatalf("%q: Parse %+v, ParseStore %+v, %v", uri, sp, st, serr)
		}
		if IsDir(uri) && st != nil && st.Dir != filepath.Clean(uri) {
			t.Fatalf("%q: directory %q", uri, st.Dir)
		}
	})
}

// checkSpec: an accepted Spec names a place of its scheme.
func checkSpec(t *testing.T, uri string, s *Spec) {
	switch s.Scheme {
	case File:
		if s.Dir == "" || strings.ContainsRune(s.Dir, 0) || s.Redis != nil || s.Bucket != "" {
			t.Fatalf("%q: bad file spec %+v", uri, s)
		}
	case Redis:
		r := s.Redis
		if r == nil || (r.Single == nil) == (r.Cluster == nil) == (r.Failover == nil) || s.Dir != "" {
			t.Fatalf("%q: bad redis spec %+v", uri, s)
		}
	case S3:
		if s.Bucket == "" || strings.ContainsAny(s.Bucket, ":[]") || s.Dir != "" || s.Redis != nil {
			t.Fatalf("%q: bad s3 spec %+v", uri, s)
		}
	default:
		t.Fatalf("%q: scheme %q", uri, s.Scheme)
	}
}
