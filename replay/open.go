package replay

import (
	"context"
	"fmt"
	"os"

	"github.com/camproxy/camproxy/internal/s3x"
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
		rdb, err := sp.RedisClient()
		if err != nil {
			return nil, err
		}
		s := NewRedisSink(rdb, sp.Stream, sp.MaxLen)
		s.owned = true
		return s, nil
	default:
		client, err := s3x.Client(ctx, sp)
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
		rdb, err := sp.RedisClient()
		if err != nil {
			return nil, err
		}
		s := NewRedisSource(rdb, sp.Stream)
		s.owned = true
		return s, nil
	default:
		client, err := s3x.Client(ctx, sp)
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
