package redisx

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		raw   string
		own   []string
		check func(t *testing.T, u *URL)
	}{
		{"redis://localhost:6379/0", nil, func(t *testing.T, u *URL) {
			eq(t, u.Kind, Single)
			eq(t, u.Single.Addr, "localhost:6379")
			eq(t, u.Single.DB, 0)
			eq(t, u.Single.TLSConfig == nil, true)
		}},
		{"rediss://app:p%40ss@cache.example.com:6380/2", nil, func(t *testing.T, u *URL) {
			eq(t, u.Kind, Single)
			eq(t, u.Single.Username, "app")
			eq(t, u.Single.Password, "p@ss")
			eq(t, u.Single.DB, 2)
			eq(t, u.Single.TLSConfig != nil && u.Single.TLSConfig.ServerName == "cache.example.com", true)
		}},
		{"redis://:pw@n1:7000?addr=n2:7000&addr=n3:7000", nil, func(t *testing.T, u *URL) {
			eq(t, u.Kind, Cluster)
			eq(t, strings.Join(u.Cluster.Addrs, ","), "n1:7000,n2:7000,n3:7000")
			eq(t, u.Cluster.Password, "pw")
		}},
		{"rediss://u:pw@n1:7000?addr=n2:7000", nil, func(t *testing.T, u *URL) {
			eq(t, u.Kind, Cluster)
			eq(t, u.Cluster.Username, "u")
			eq(t, u.Cluster.TLSConfig != nil, true)
		}},
		{"redis://su:spw@s1:26379/1?master_name=mymaster&addr=s2:26379&username=app&password=mpw", nil, func(t *testing.T, u *URL) {
			eq(t, u.Kind, Sentinel)
			eq(t, u.Failover.MasterName, "mymaster")
			eq(t, u.Failover.DB, 1)
			eq(t, strings.Join(u.Failover.SentinelAddrs, ","), "s1:26379,s2:26379")
			eq(t, u.Failover.SentinelUsername, "su")
			eq(t, u.Failover.SentinelPassword, "spw")
			eq(t, u.Failover.Username, "app")
			eq(t, u.Failover.Password, "mpw")
		}},
		{"redis://h:1/0?stream=s&maxlen=5&dial_timeout=2s", []string{"stream", "maxlen"}, func(t *testing.T, u *URL) {
			eq(t, u.Params.Get("stream"), "s")
			eq(t, u.Params.Get("maxlen"), "5")
			eq(t, u.Single.DialTimeout, 2*time.Second)
			eq(t, strings.Contains(u.Identity(), "stream"), false)
		}},
		{"redis://h:1?prefix=p&addr=h2:1", []string{"prefix"}, func(t *testing.T, u *URL) {
			eq(t, u.Kind, Cluster)
			eq(t, u.Params.Get("prefix"), "p")
		}},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			u, err := Parse(tc.raw, tc.own...)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			tc.check(t, u)
			rdb, err := u.Client()
			if err != nil {
				t.Fatalf("Client: %v", err)
			}
			_ = rdb.Close()
		})
	}
}

func TestParseBad(t *testing.T) {
	const pw = "Hunter2pw"
	for _, tc := range []struct{ raw, want string }{
		{"", "no scheme"},
		{"localhost:6379", "scheme"},
		{"http://h:6379", `scheme "http"`},
		{"redis:///0", "needs a host"},
		{"redis://:" + pw + "@h:99999/0", "port"},
		{"redis://:" + pw + "@h:6379/x", "database number"},
		{"redis://h/0/1", "database number"},
		{"redis://h/0?db=x", "database number"},
		{"redis://:" + pw + "@h?dial_timeout=soon", "dial_timeout"},
		{"redis://:" + pw + "@h?bogus=1", "unexpected option: bogus"},
		{"redis://:" + pw + "@h?stream=s", "unexpected option: stream"}, // not the caller's
		{"redis://n1:7000/2?addr=n2:7000", "only database 0"},
		{"redis://n1:7000?addr=n2", "addr"},
		{"redis://s1:26379?master_name=", "master_name is empty"},
		{"redis://s1:26379?master_name=m&addr=bad", "addr"},
		{"redis://:" + pw + "@h?pool_size=3000000000", "out of range"},
		{"rediss://:" + pw + "@host:port/0", "not a valid URL"},
		{"redis://:" + pw + "#frag@host", "not a valid URL"},
		{"redis://u:1234#" + pw + "@host", `unexpected "#"`},
		{"redis://host?%zz=1", "bad query"},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			u, err := Parse(tc.raw)
			if err == nil {
				t.Fatalf("accepted: %+v", u)
			}
			if !errors.Is(err, ErrBadURL) {
				t.Errorf("error does not wrap ErrBadURL: %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), pw) {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}

func TestTune(t *testing.T) {
	tune := Tuning{DialTimeout: time.Second, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, MaxRetries: 1, DialerRetries: 1}
	for _, raw := range []string{"redis://h/0", "redis://h?addr=h2:1", "redis://h?master_name=m"} {
		u, err := Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		u.Tune(tune)
		var ctxTO bool
		var read time.Duration
		var retries int
		switch u.Kind {
		case Single:
			ctxTO, read, retries = u.Single.ContextTimeoutEnabled, u.Single.ReadTimeout, u.Single.MaxRetries
		case Cluster:
			ctxTO, read, retries = u.Cluster.ContextTimeoutEnabled, u.Cluster.ReadTimeout, u.Cluster.MaxRetries
		case Sentinel:
			ctxTO, read, retries = u.Failover.ContextTimeoutEnabled, u.Failover.ReadTimeout, u.Failover.MaxRetries
		}
		if !ctxTO || read != 500*time.Millisecond || retries != 1 {
			t.Errorf("%s %v: tuned to ctx=%v read=%v retries=%d", raw, u.Kind, ctxTO, read, retries)
		}
	}
	// What the URL says wins.
	u, _ := Parse("redis://h/0?read_timeout=3s&max_retries=4")
	u.Tune(tune)
	if u.Single.ReadTimeout != 3*time.Second || u.Single.MaxRetries != 4 {
		t.Errorf("the URL's own options were overridden: %v %d", u.Single.ReadTimeout, u.Single.MaxRetries)
	}
}

func TestClientKind(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://127.0.0.1:1/0":                                   "*redis.Client",
		"redis://127.0.0.1:1?addr=127.0.0.1:2":                    "*redis.ClusterClient",
		"redis://127.0.0.1:1?master_name=m":                       "*redis.Client",
		"redis://127.0.0.1:1?master_name=m&route_by_latency=true": "*redis.ClusterClient",
	} {
		u, err := Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		rdb, err := u.Client()
		if err != nil {
			t.Fatal(err)
		}
		got := "?"
		switch rdb.(type) {
		case *redis.Client:
			got = "*redis.Client"
		case *redis.ClusterClient:
			got = "*redis.ClusterClient"
		}
		_ = rdb.Close()
		if got != want {
			t.Errorf("%s: %s, want %s", raw, got, want)
		}
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"redis://localhost:6379/0", "redis://localhost:6379/0"},
		{"redis://u:pw@h:1/0?stream=s", "redis://u:****@h:1/0?stream=s"},
		{"redis://s:spw@s1:26379?master_name=m&password=mpw&addr=s2:1", "redis://s:****@s1:26379?master_name=m&password=****&addr=s2:1"},
		{"redis://:p%zz@host", "****"},
		{"redis://:pw@h:1/0?key=camproxy:playbook&token=t", "redis://:****@h:1/0?key=camproxy:playbook&token=****"},
		{"https://h/x?key=abc", "https://h/x?key=****"},
		// What config check's own masker (cmd/camproxy's maskURL, now this) masked too.
		{"http://h/x?X-Amz-Signature=abc&X-Amz-Credential=AKIA", "http://h/x?X-Amz-Signature=****&X-Amz-Credential=****"},
		{"https://h/v1?apikey=abc&region=eu", "https://h/v1?apikey=****&region=eu"},
		{"https://h/v1?apiKey=abc", "https://h/v1?apiKey=****"},
	} {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func eq[T comparable](t *testing.T, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

// FuzzParse: Parse never panics, every error wraps ErrBadURL and shows no password
// (of the user info or a password= parameter), a URL it accepts makes a client, and
// Redact hides the same passwords.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"redis://:pw@localhost:6379/0", "rediss://u:p@h:6380/1?dial_timeout=3s", "redis://h?addr=h2:1&addr=h3:2",
		"redis://s:secret1@h/2?master_name=m&password=secret2", "redis://u:1234/pw@h", "redis://%zz",
		"redis://:longsecret@h:6379/x", "redis://h?pool_size=99999999999", "redis://[::1]:6379/0",
		"redis://h?stream=s&maxlen=1", "unix:///tmp/redis.sock", "::",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := Parse(raw, "stream", "maxlen")
		red := Redact(raw)
		var secrets []string
		if pu, perr := url.Parse(raw); perr == nil {
			if pw, ok := pu.User.Password(); ok {
				secrets = append(secrets, pw)
			}
			if q, qerr := url.ParseQuery(pu.RawQuery); qerr == nil {
				secrets = append(secrets, q["password"]...)
			}
		}
		for _, pw := range secrets {
			if len(pw) < 6 || strings.Count(raw, pw) != 1 {
				continue
			}
			if strings.Contains(red, pw) {
				t.Fatalf("Redact(%q) = %q shows the password", raw, red)
			}
			if err != nil && strings.Contains(err.Error(), pw) {
				t.Fatalf("error for %q shows the password: %v", raw, err)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrBadURL) {
				t.Fatalf("error does not wrap ErrBadURL: %v", err)
			}
			return
		}
		set := map[Kind]bool{Single: u.Single != nil, Cluster: u.Cluster != nil, Sentinel: u.Failover != nil}
		if !set[u.Kind] || set[Single] && set[Cluster] || set[Single] && set[Sentinel] || set[Cluster] && set[Sentinel] {
			t.Fatalf("inconsistent URL %+v", u)
		}
		rdb, err := u.Client()
		if err != nil {
			if !errors.Is(err, ErrBadURL) {
				t.Fatalf("Client error does not wrap ErrBadURL: %v", err)
			}
			return
		}
		_ = rdb.Close()
	})
}
