package replay

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/internal/redisx"
)

// ErrBadURI is wrapped by every error about a replay URI that cannot be used.
var ErrBadURI = errors.New("bad replay URI")

// OpenOptions tune the sinks OpenSink makes.
type OpenOptions struct {
	Writer           string // names this process in file segments and S3 keys; default "<hostname>-<pid>"
	FileSegmentBytes int64  // file sink segment size; 0 = the file sink's default
	// Unpartitioned: file and S3 sinks write outside the time partitions (imports of
	// history; see FileOptions.Unpartitioned).
	Unpartitioned bool
}

// defaultS3Region is used when neither the URI nor the environment names a region.
const defaultS3Region = "us-east-1"

// uriSpec is a parsed replay URI.
type uriSpec struct {
	scheme string // file, redis, s3 ("rediss" is "redis" with TLS in the options)

	// file
	dir string

	// redis: the parsed URL; exactly one of redisOpts, redisCluster, redisFailover is set
	redis         *redisx.URL
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
		return NewFileSink(sp.dir, FileOptions{SegmentBytes: o.FileSegmentBytes, Writer: writer, Unpartitioned: o.Unpartitioned})
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
		s := NewS3Sink(client, sp.bucket, sp.prefix, writer)
		s.Flat = o.Unpartitioned
		return s, nil
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

// redisClient makes the client the parsed URI describes; it does not connect.
func (sp *uriSpec) redisClient(uri string) (redis.UniversalClient, error) {
	rdb, err := sp.redis.Client()
	if err != nil {
		return nil, badURI(uri, "%s", redisReason(err))
	}
	return rdb, nil
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
		return nil, badURI(uri, "not a valid URL: %v", redisx.URLError(err))
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
		return parseRedisURI(uri)
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

func parseRedisURI(uri string) (*uriSpec, error) {
	ru, err := redisx.Parse(uri, "stream", "maxlen")
	if err != nil {
		return nil, badURI(uri, "%s", redisReason(err))
	}
	sp := &uriSpec{scheme: "redis", redis: ru, stream: redisx.LastValue(ru.Params, "stream")}
	if sp.stream == "" {
		return nil, badURI(uri, "no stream name; add ?stream=camproxy:replay")
	}
	if v := redisx.LastValue(ru.Params, "maxlen"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return nil, badURI(uri, "maxlen %q is not a whole number >= 0", v)
		}
		sp.maxLen = n
	}
	// A sink's client gives up on a down Redis after one dial instead of go-redis's
	// five with backoff, unless the URI chose otherwise: the recorder spools a failed
	// batch and retries on its own schedule, so a long wait only holds events back.
	ru.Tune(redisx.Tuning{MaxRetries: 1, DialerRetries: 1, ClusterReload: 5 * time.Second})
	sp.redisOpts, sp.redisCluster, sp.redisFailover = ru.Single, ru.Cluster, ru.Failover
	return sp, nil
}

// redisReason is what redisx says is wrong, without its "bad Redis URL" (badURI says
// "bad replay URI").
func redisReason(err error) string {
	return strings.TrimPrefix(err.Error(), redisx.ErrBadURL.Error()+": ")
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
	sp.region = redisx.LastValue(q, "region")
	for _, c := range sp.region {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return nil, badURI(uri, "region %q is not a region name such as us-east-1", sp.region)
		}
	}
	if ep := redisx.LastValue(q, "endpoint"); ep != "" {
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

// Redact returns uri with any password replaced by "****", safe for logs and metric
// labels (see redisx.Redact).
func Redact(uri string) string { return redisx.Redact(uri) }

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
