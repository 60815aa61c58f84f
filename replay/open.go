package replay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/redis/go-redis/v9"
)

// ErrBadURI is wrapped by every error about a replay URI that cannot be used.
var ErrBadURI = errors.New("bad replay URI")

// OpenOptions tune the sinks OpenSink makes.
type OpenOptions struct {
	Writer           string // names this process in file segments and S3 keys; default "<hostname>-<pid>"
	FileSegmentBytes int64  // file sink segment size; 0 = the file sink's default
}

// defaultS3Region is used when neither the URI nor the environment names a region.
const defaultS3Region = "us-east-1"

// uriSpec is a parsed replay URI.
type uriSpec struct {
	scheme string // file, redis, s3 ("rediss" is "redis" with TLS in the options)

	// file
	dir string

	// redis: exactly one of redisOpts, redisCluster, redisFailover is set
	redisOpts     *redis.Options
	redisCluster  *redis.ClusterOptions
	redisFailover *redis.FailoverOptions
	stream        string
	maxLen        int64

	// s3
	bucket, prefix, region, endpoint string
}

// OpenSink opens a sink for a replay URI:
//
//	file:///abs/dir   file://./rel/dir
//	redis://[user:pass@]host:6379/0?stream=camproxy:replay[&maxlen=1000000]   (rediss:// for TLS;
//	    ...&addr=host2:6379 for a cluster, ...&master_name=NAME for Sentinel)
//	s3://bucket/prefix[?region=us-east-1][&endpoint=http://127.0.0.1:9000]
//
// Redis and S3 sinks make no network call here: a down store shows at the first Write.
func OpenSink(ctx context.Context, uri string, o OpenOptions) (Sink, error) {
	sp, err := parseURI(uri)
	if err != nil {
		return nil, err
	}
	writer := o.Writer
	if writer == "" {
		writer = defaultWriter()
	}
	switch sp.scheme {
	case "file":
		return NewFileSink(sp.dir, FileOptions{SegmentBytes: o.FileSegmentBytes, Writer: writer})
	case "redis":
		rdb, err := sp.redisClient(uri)
		if err != nil {
			return nil, err
		}
		s := NewRedisSink(rdb, sp.stream, sp.maxLen)
		s.owned = true
		return s, nil
	default: // s3
		client, err := sp.s3Client(ctx)
		if err != nil {
			return nil, err
		}
		return NewS3Sink(client, sp.bucket, sp.prefix, writer), nil
	}
}

// OpenSource opens a source for a replay URI (see OpenSink). A Redis source holds a
// client: it implements io.Closer, and callers should close it when done.
func OpenSource(ctx context.Context, uri string) (Source, error) {
	sp, err := parseURI(uri)
	if err != nil {
		return nil, err
	}
	switch sp.scheme {
	case "file":
		return NewFileSource(sp.dir), nil
	case "redis":
		rdb, err := sp.redisClient(uri)
		if err != nil {
			return nil, err
		}
		s := NewRedisSource(rdb, sp.stream)
		s.owned = true
		return s, nil
	default: // s3
		client, err := sp.s3Client(ctx)
		if err != nil {
			return nil, err
		}
		return NewS3Source(client, sp.bucket, sp.prefix), nil
	}
}

// defaultWriter is "<hostname>-<pid>".
func defaultWriter() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "camproxy"
	}
	return fmt.Sprintf("%s-%d", h, os.Getpid())
}

// redisClient makes the client the parsed URI describes; it does not connect (unless
// the URI asks for idle connections, which go-redis dials in the background).
// go-redis panics on some option values (a pool size beyond int32): that is a bad URI.
func (sp *uriSpec) redisClient(uri string) (rdb redis.UniversalClient, err error) {
	defer func() {
		if r := recover(); r != nil {
			rdb, err = nil, badURI(uri, "go-redis rejects the options: %v", r)
		}
	}()
	switch {
	case sp.redisCluster != nil:
		return redis.NewClusterClient(sp.redisCluster), nil
	case sp.redisFailover != nil && (sp.redisFailover.RouteByLatency || sp.redisFailover.RouteRandomly):
		return redis.NewFailoverClusterClient(sp.redisFailover), nil
	case sp.redisFailover != nil:
		return redis.NewFailoverClient(sp.redisFailover), nil
	default:
		return redis.NewClient(sp.redisOpts), nil
	}
}

// s3Client makes a client with the default credential chain; it does not connect.
func (sp *uriSpec) s3Client(ctx context.Context) (*s3.Client, error) {
	var opts []func(*config.LoadOptions) error
	if sp.region != "" {
		opts = append(opts, config.WithRegion(sp.region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3 replay URI: AWS config: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = defaultS3Region
	}
	endpoint := sp.endpoint
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = &endpoint
			o.UsePathStyle = true
		}
		o.DisableLogOutputChecksumValidationSkipped = true
	}), nil
}

// badURI returns an error wrapping ErrBadURI that names the (redacted) URI and what is
// wrong with it.
func badURI(uri, format string, args ...any) error {
	return fmt.Errorf("%w %s: %s", ErrBadURI, Redact(uri), fmt.Sprintf(format, args...))
}

// parseURI parses and checks a replay URI without touching the network or the disk.
func parseURI(uri string) (*uriSpec, error) {
	u, err := url.Parse(uri)
	if err != nil {
		if strings.Contains(uri, "@") {
			// url.Parse's message may quote part of a password.
			return nil, badURI(uri, "not a valid URL")
		}
		return nil, badURI(uri, "not a valid URL: %v", urlErr(err))
	}
	if strings.Contains(uri, "#") {
		return nil, badURI(uri, "unexpected \"#\" (escape it as %%23)")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, badURI(uri, "bad query: %v", err)
	}
	switch u.Scheme {
	case "file":
		return parseFileURI(uri, u, q)
	case "redis", "rediss":
		return parseRedisURI(uri, u, q)
	case "s3":
		return parseS3URI(uri, u, q)
	case "":
		return nil, badURI(uri, "no scheme; use file://, redis://, rediss:// or s3://")
	default:
		return nil, badURI(uri, "unknown scheme %q; use file, redis, rediss or s3", u.Scheme)
	}
}

func parseFileURI(uri string, u *url.URL, q url.Values) (*uriSpec, error) {
	if len(q) > 0 {
		return nil, badURI(uri, "a file URI takes no query parameters")
	}
	if u.User != nil {
		return nil, badURI(uri, "a file URI takes no user")
	}
	var dir string
	switch {
	case u.Opaque != "": // file:rel/dir
		dir = u.Opaque
	case u.Host == "" || u.Host == "localhost":
		dir = u.Path
	case u.Host == "." || u.Host == "..":
		dir = u.Host + u.Path
	default:
		return nil, badURI(uri, "file URI host %q: use file:///abs/dir, or file://./rel/dir for a relative one", u.Host)
	}
	if dir == "" {
		return nil, badURI(uri, "a file URI needs a directory, e.g. file:///var/lib/camproxy/replay or file://./camproxy-data/replay")
	}
	if strings.ContainsRune(dir, 0) {
		return nil, badURI(uri, "the directory holds a NUL byte")
	}
	return &uriSpec{scheme: "file", dir: filepath.Clean(filepath.FromSlash(dir))}, nil
}

func parseRedisURI(uri string, u *url.URL, q url.Values) (*uriSpec, error) {
	sp := &uriSpec{scheme: "redis"}
	if u.Opaque != "" || u.Host == "" {
		return nil, badURI(uri, "a redis URI needs a host, e.g. redis://localhost:6379/0?stream=camproxy:replay")
	}
	sp.stream = lastValue(q, "stream")
	if sp.stream == "" {
		return nil, badURI(uri, "no stream name; add ?stream=camproxy:replay")
	}
	if v := lastValue(q, "maxlen"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, badURI(uri, "maxlen %q is not a whole number >= 0", v)
		}
		sp.maxLen = n
	}
	q.Del("stream")
	q.Del("maxlen")
	// go-redis keeps pool sizes as int32 and panics (lazily, for a cluster) beyond.
	for k, vs := range q {
		for _, v := range vs {
			if n, err := strconv.ParseInt(v, 10, 64); (err == nil && (n > math.MaxInt32 || n < math.MinInt32)) ||
				errors.Is(err, strconv.ErrRange) {
				return nil, badURI(uri, "%s is out of range", k)
			}
		}
	}
	// Checked here so that the message is ours (go-redis quotes the raw path).
	db := 0
	if f := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' }); len(f) > 1 {
		return nil, badURI(uri, "the path must be a database number, e.g. /0")
	} else if len(f) == 1 {
		n, err := strconv.Atoi(f[0])
		if err != nil || n < 0 || n > math.MaxInt32 {
			return nil, badURI(uri, "the path must be a database number >= 0, e.g. /0")
		}
		db = n
	}
	if v := lastValue(q, "db"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, badURI(uri, "db must be a database number >= 0")
		}
		db = n
	}
	r := *u
	r.RawQuery = q.Encode()
	clean := r.String()
	var err error
	switch {
	case q.Has("master_name"):
		if lastValue(q, "master_name") == "" {
			return nil, badURI(uri, "master_name is empty")
		}
		sp.redisFailover, err = redis.ParseFailoverURL(clean)
		if err == nil {
			sp.redisFailover.ContextTimeoutEnabled = true
			failFast(&sp.redisFailover.DialerRetries, &sp.redisFailover.MaxRetries)
		}
	case q.Has("addr"):
		if db != 0 {
			return nil, badURI(uri, "a Redis Cluster has only database 0")
		}
		sp.redisCluster, err = redis.ParseClusterURL(clean)
		if err == nil {
			sp.redisCluster.ContextTimeoutEnabled = true
			failFast(&sp.redisCluster.DialerRetries, &sp.redisCluster.MaxRetries)
		}
	default:
		sp.redisOpts, err = redis.ParseURL(clean)
		if err == nil {
			sp.redisOpts.ContextTimeoutEnabled = true
			failFast(&sp.redisOpts.DialerRetries, &sp.redisOpts.MaxRetries)
		}
	}
	if err != nil {
		return nil, badURI(uri, "%v", urlErr(err))
	}
	return sp, nil
}

// failFast makes a sink's client give up on a down Redis after one dial instead of
// go-redis's five with backoff, unless the URI chose otherwise: the recorder spools a
// failed batch and retries on its own schedule, so a long wait only holds events back.
func failFast(dialerRetries, maxRetries *int) {
	if *dialerRetries == 0 {
		*dialerRetries = 1
	}
	if *maxRetries == 0 {
		*maxRetries = 1
	}
}

func parseS3URI(uri string, u *url.URL, q url.Values) (*uriSpec, error) {
	sp := &uriSpec{scheme: "s3", prefix: cleanS3Prefix(u.Path)}
	if u.User != nil {
		return nil, badURI(uri, "credentials do not go in an s3 URI: camproxy uses the AWS default credential chain")
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, badURI(uri, "an s3 URI needs a bucket, e.g. s3://bucket/prefix")
	}
	if u.Port() != "" || strings.ContainsAny(u.Host, ":[]") {
		return nil, badURI(uri, "the host of an s3 URI is the bucket name; give a server as ?endpoint=http://host:port")
	}
	sp.bucket = u.Host
	for k := range q {
		if k != "region" && k != "endpoint" {
			return nil, badURI(uri, "unknown query parameter %q; an s3 URI takes region and endpoint", k)
		}
	}
	sp.region = lastValue(q, "region")
	for _, c := range sp.region {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return nil, badURI(uri, "region %q is not a region name such as us-east-1", sp.region)
		}
	}
	if ep := lastValue(q, "endpoint"); ep != "" {
		e, err := url.Parse(ep)
		if err != nil || e.Scheme != "http" && e.Scheme != "https" || e.Host == "" {
			return nil, badURI(uri, "endpoint must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:9000")
		}
		if e.User != nil {
			return nil, badURI(uri, "endpoint must not hold credentials")
		}
		sp.endpoint = ep
	}
	return sp, nil
}

// lastValue is the last value of a query parameter, as go-redis reads its own.
func lastValue(q url.Values, key string) string {
	if vs := q[key]; len(vs) > 0 {
		return vs[len(vs)-1]
	}
	return ""
}

// urlErr drops the URL that a *url.Error repeats, since it may hold a password.
func urlErr(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// redactMask replaces secrets in Redact's output.
const redactMask = "****"

// Redact returns uri with any password replaced by "****", safe for logs and metric
// labels: the password of the user info, and the value of any query parameter whose
// name suggests a secret. A string that does not parse as a URL and holds an "@" is
// masked whole, and so is everything after the scheme when an "@" shows up past the
// host (a password with an unescaped "/", "?" or "#" in it).
func Redact(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		if strings.Contains(uri, "@") {
			return redactMask
		}
		return uri
	}
	if u.Scheme != "file" && strings.Contains(u.Path+u.RawQuery+u.Fragment, "@") {
		return u.Scheme + "://" + redactMask
	}
	out := uri
	if _, ok := u.User.Password(); ok {
		// Assemble by hand: url.URL.String would escape the mask as %2A.
		userinfo := url.User(u.User.Username()).String() + ":" + redactMask + "@"
		r := *u
		r.User = nil
		rest, ok := strings.CutPrefix(r.String(), r.Scheme+"://")
		if !ok {
			return redactMask
		}
		out = u.Scheme + "://" + userinfo + rest
	}
	if u.RawQuery == "" {
		return out
	}
	head, query, ok := strings.Cut(out, "?")
	if !ok {
		return out
	}
	query, frag, hasFrag := strings.Cut(query, "#")
	parts := strings.Split(query, "&")
	for i, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		if secretParam(name) {
			parts[i] = k + "=" + redactMask
		}
	}
	out = head + "?" + strings.Join(parts, "&")
	if hasFrag {
		out += "#" + frag
	}
	return out
}

// secretParam reports whether a query parameter's name suggests a secret value.
func secretParam(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "pass") || strings.Contains(n, "secret") || strings.Contains(n, "token") ||
		strings.Contains(n, "auth") || n == "key" || strings.HasSuffix(n, "_key") || strings.HasSuffix(n, "-key")
}

// Location is a parsed replay URI with a client for it, for other stores that share
// the URI forms (the playbook store): a directory, a Redis key prefix (the stream
// parameter), or an S3 bucket and prefix. It makes no network call.
type Location struct {
	Scheme string // file, redis, s3
	Dir    string
	Redis  redis.UniversalClient // the caller closes it
	Stream string
	S3     *s3.Client
	Bucket string
	Prefix string
}

// OpenLocation parses uri (see OpenSink) and makes its client.
func OpenLocation(ctx context.Context, uri string) (*Location, error) {
	sp, err := parseURI(uri)
	if err != nil {
		return nil, err
	}
	l := &Location{Scheme: sp.scheme, Dir: sp.dir, Stream: sp.stream, Bucket: sp.bucket, Prefix: sp.prefix}
	switch sp.scheme {
	case "redis":
		l.Redis, err = sp.redisClient(uri)
	case "s3":
		l.S3, err = sp.s3Client(ctx)
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}
