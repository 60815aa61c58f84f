// Package redisx is the one way camproxy names a Redis: a URL in the forms go-redis
// documents (single node, Cluster, Sentinel; redis:// or rediss://; ACL user and
// password), parsed once into the options of go-redis's universal client, with the
// caller's own parameters (a stream name, a key prefix) taken out first. Every error
// names the bad part and never quotes a password.
package redisx

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrBadURL is wrapped by every error about a Redis URL that cannot be used.
var ErrBadURL = errors.New("bad Redis URL")

// Kind is the deployment a URL names.
type Kind int

const (
	Single   Kind = iota + 1 // one server (or a proxy in front of many)
	Cluster                  // Redis Cluster: ?addr=host2:port… (seed nodes)
	Sentinel                 // Sentinel: ?master_name=NAME, the host and ?addr= are sentinels
)

func (k Kind) String() string {
	switch k {
	case Single:
		return "single"
	case Cluster:
		return "cluster"
	case Sentinel:
		return "sentinel"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// URL is a parsed Redis URL. Exactly one of the option pointers is set, by Kind.
type URL struct {
	Kind Kind
	// Params holds the caller's own query parameters (those Parse was told about),
	// which go-redis never sees.
	Params   url.Values
	Single   *redis.Options
	Cluster  *redis.ClusterOptions
	Failover *redis.FailoverOptions
	clean    string // the URL without the caller's parameters: the identity of the client
}

// Parse parses raw:
//
//	redis://[user:pass@]host:6379[/db][?opt=v…]                          one server; rediss:// = TLS
//	redis://[user:pass@]host1:6379?addr=host2:6379&addr=host3:6379       a Redis Cluster (seed nodes)
//	redis://[suser:spass@]sentinel1:26379[/db]?master_name=NAME&addr=sentinel2:26379[&username=U&password=P]
//	                                                                      Sentinel: the user info authenticates to the
//	                                                                      sentinels, username/password to the master
//
// plus go-redis's own options (dial_timeout=1s, pool_size=10, …). own names the query
// parameters the caller reads itself (Params); any other unknown parameter is an error.
// Parse makes no network call.
func Parse(raw string, own ...string) (*URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		if strings.Contains(raw, "@") {
			return nil, bad("not a valid URL") // url.Parse's message may quote part of a password
		}
		return nil, bad("not a valid URL: %v", URLError(err))
	}
	if strings.Contains(raw, "#") {
		return nil, bad("unexpected \"#\" (escape it as %%23)")
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		if u.Scheme == "" {
			return nil, bad("no scheme; use redis:// or rediss://")
		}
		return nil, bad("scheme %q: use redis:// or rediss:// (TLS)", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, bad("a Redis URL needs a host, e.g. redis://localhost:6379/0")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, bad("port %q is not a number from 1 to 65535", p)
		}
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, bad("bad query: %v", err)
	}
	out := &URL{Params: url.Values{}}
	for _, k := range own {
		if vs, ok := q[k]; ok {
			out.Params[k] = vs
			q.Del(k)
		}
	}
	// go-redis keeps pool sizes as int32 and panics (lazily, for a cluster) beyond.
	for k, vs := range q {
		for _, v := range vs {
			if n, err := strconv.ParseInt(v, 10, 64); (err == nil && (n > math.MaxInt32 || n < math.MinInt32)) ||
				errors.Is(err, strconv.ErrRange) {
				return nil, bad("%s is out of range", k)
			}
		}
	}
	// Checked here so that the message is ours (go-redis quotes the raw path).
	db := 0
	if f := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' }); len(f) > 1 {
		return nil, bad("the path must be a database number, e.g. /0")
	} else if len(f) == 1 {
		n, err := strconv.Atoi(f[0])
		if err != nil || n < 0 || n > math.MaxInt32 {
			return nil, bad("the path must be a database number >= 0, e.g. /0")
		}
		db = n
	}
	if v := LastValue(q, "db"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, bad("db must be a database number >= 0")
		}
		db = n
	}
	r := *u
	r.RawQuery = q.Encode()
	out.clean = r.String()
	switch {
	case q.Has("master_name"):
		if LastValue(q, "master_name") == "" {
			return nil, bad("master_name is empty")
		}
		out.Kind = Sentinel
		out.Failover, err = redis.ParseFailoverURL(out.clean)
	case q.Has("addr"):
		if db != 0 {
			return nil, bad("a Redis Cluster has only database 0")
		}
		out.Kind = Cluster
		out.Cluster, err = redis.ParseClusterURL(out.clean)
	default:
		out.Kind = Single
		out.Single, err = redis.ParseURL(out.clean)
	}
	if err != nil {
		return nil, bad("%v", URLError(err))
	}
	return out, nil
}

// Tuning sets what a URL left at go-redis's defaults: camproxy's clients sit on a
// request path or a retry loop of their own, where go-redis's defaults (5 s reads,
// retries with backoff) would hold a call far past its budget. Zero fields are left
// as they are.
type Tuning struct {
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	MaxRetries, DialerRetries              int
	// ClusterReload bounds how stale a cluster client's slot map gets (go-redis's
	// ClusterStateReloadInterval, 60 s by default): a master that failed over is
	// found by then even without a failing call (Client also reloads on one).
	ClusterReload time.Duration
}

// Tune applies t to every option the URL did not set, and turns on
// ContextTimeoutEnabled (a caller's deadline bounds each command).
func (u *URL) Tune(t Tuning) {
	var k knobs
	switch u.Kind {
	case Single:
		o := u.Single
		k = knobs{&o.ContextTimeoutEnabled, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, nil, &o.MaxRetries, &o.DialerRetries}
	case Cluster:
		o := u.Cluster
		k = knobs{&o.ContextTimeoutEnabled, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.ClusterStateReloadInterval, &o.MaxRetries, &o.DialerRetries}
	case Sentinel:
		o := u.Failover
		k = knobs{&o.ContextTimeoutEnabled, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, nil, &o.MaxRetries, &o.DialerRetries}
	default:
		return
	}
	*k.ctxTimeout = true
	for _, d := range []struct {
		p *time.Duration
		v time.Duration
	}{{k.dial, t.DialTimeout}, {k.read, t.ReadTimeout}, {k.write, t.WriteTimeout}, {k.reload, t.ClusterReload}} {
		if d.p != nil && *d.p == 0 {
			*d.p = d.v
		}
	}
	for _, n := range []struct {
		p *int
		v int
	}{{k.retries, t.MaxRetries}, {k.dialRetries, t.DialerRetries}} {
		if *n.p == 0 {
			*n.p = n.v
		}
	}
}

// knobs points at the fields Tune sets in one kind's options (reload: Cluster only).
type knobs struct {
	ctxTimeout                *bool
	dial, read, write, reload *time.Duration
	retries, dialRetries      *int
}

// Identity is the URL without the caller's parameters: two URLs with the same
// identity can share one client.
func (u *URL) Identity() string { return u.clean }

// Client makes the client the URL describes: *redis.Client for one server or
// Sentinel, *redis.ClusterClient for a Cluster (or Sentinel with route_by_latency or
// route_randomly). It does not connect, unless the URL asks for idle connections,
// which go-redis dials in the background. go-redis panics on some option values:
// they come back as an error.
func (u *URL) Client() (rdb redis.UniversalClient, err error) {
	defer func() {
		if r := recover(); r != nil {
			rdb, err = nil, bad("go-redis rejects the options: %v", r)
		}
	}()
	switch {
	case u.Kind == Cluster:
		cc := redis.NewClusterClient(u.Cluster)
		cc.AddHook(reloadOnError{cc})
		return cc, nil
	case u.Kind == Sentinel && (u.Failover.RouteByLatency || u.Failover.RouteRandomly):
		return redis.NewFailoverClusterClient(u.Failover), nil
	case u.Kind == Sentinel:
		return redis.NewFailoverClient(u.Failover), nil
	default:
		return redis.NewClient(u.Single), nil
	}
}

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadURL, fmt.Sprintf(format, args...))
}

// LastValue is the last value of a query parameter, as go-redis reads its own.
func LastValue(q url.Values, key string) string {
	if vs := q[key]; len(vs) > 0 {
		return vs[len(vs)-1]
	}
	return ""
}

// URLError drops the URL that a *url.Error repeats, since it may hold a password.
func URLError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// reloadOnError asks a cluster client to reload its slot map (lazily, coalesced by
// go-redis) after any failed command. go-redis reloads by itself on MOVED and ASK,
// but not when a master is unreachable: after a failover it would keep dialling the
// dead master until its reload interval, and every part would serve from its
// fallback meanwhile.
type reloadOnError struct{ cc *redis.ClusterClient }

func (h reloadOnError) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnError) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnError) check(ctx context.Context, err error) {
	if err != nil && !errors.Is(err, redis.Nil) {
		h.cc.ReloadState(ctx)
	}
}
