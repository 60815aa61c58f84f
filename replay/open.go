package replay

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/internal/redisx"
	"github.com/camproxy/camproxy/replay/location"
)

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

// OpenSink opens a sink for a replay URI (location.Parse says which). A malformed one
// is an error wrapping location.ErrBadURI. Redis and S3 sinks make no network call
// here: a down store shows at the first Write.
func OpenSink(ctx context.Context, uri string, o OpenOptions) (Sink, error) {
	sp, err := location.Parse(uri)
	if err != nil {
		return nil, err
	}
	writer := o.Writer
	if writer == "" {
		writer = defaultWriter()
	}
	switch sp.Scheme {
	case location.File:
		return NewFileSink(sp.Dir, FileOptions{SegmentBytes: o.FileSegmentBytes, Writer: writer, Unpartitioned: o.Unpartitioned})
	case location.Redis:
		rdb, err := RedisClient(sp)
		if err != nil {
			return nil, err
		}
		s := NewRedisSink(rdb, sp.Stream, sp.MaxLen)
		s.owned = true
		return s, nil
	default:
		client, err := S3Client(ctx, sp)
		if err != nil {
			return nil, err
		}
		s := NewS3Sink(client, sp.Bucket, sp.Prefix, writer)
		s.Flat = o.Unpartitioned
		return s, nil
	}
}

// OpenSource opens a source for a replay URI (see OpenSink). A Redis source holds a
// client: it implements io.Closer, and callers should close it when done.
func OpenSource(ctx context.Context, uri string) (Source, error) {
	sp, err := location.Parse(uri)
	if err != nil {
		return nil, err
	}
	switch sp.Scheme {
	case location.File:
		return NewFileSource(sp.Dir), nil
	case location.Redis:
		rdb, err := RedisClient(sp)
		if err != nil {
			return nil, err
		}
		s := NewRedisSource(rdb, sp.Stream)
		s.owned = true
		return s, nil
	default:
		client, err := S3Client(ctx, sp)
		if err != nil {
			return nil, err
		}
		return NewS3Source(client, sp.Bucket, sp.Prefix), nil
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

// RedisClient makes the client a parsed Redis location names (a replay stream or a
// store's keys); it does not connect. Unless the URI chose otherwise, the client
// gives up on a down Redis after one dial instead of go-redis's five with backoff:
// the recorder spools a failed batch and retries on its own schedule, and the
// learner retries its store at its next check, so a long wait only holds work back.
func RedisClient(sp *location.Spec) (redis.UniversalClient, error) {
	sp.Redis.Tune(redisx.Tuning{MaxRetries: 1, DialerRetries: 1, ClusterReload: 5 * time.Second})
	rdb, err := sp.Redis.Client()
	if err != nil {
		return nil, sp.Bad(err)
	}
	return rdb, nil
}

// S3Client makes a client for a parsed S3 location with the default credential
// chain, its region (else the environment's, else us-east-1) and endpoint
// (path-style); it does not connect.
func S3Client(ctx context.Context, sp *location.Spec) (*s3.Client, error) {
	var opts []func(*config.LoadOptions) error
	if sp.Region != "" {
		opts = append(opts, config.WithRegion(sp.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: AWS config: %w", sp, err)
	}
	if cfg.Region == "" {
		cfg.Region = defaultS3Region
	}
	endpoint := sp.Endpoint
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = &endpoint
			o.UsePathStyle = true
		}
		o.DisableLogOutputChecksumValidationSkipped = true
	}), nil
}

// Redact returns uri with any password replaced by "****", safe for logs and metric
// labels (see redisx.Redact).
func Redact(uri string) string { return redisx.Redact(uri) }
