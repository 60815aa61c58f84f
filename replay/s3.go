package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// s3MaxLine bounds the memory one corrupt object (gigabytes without a newline) can
// make Scan allocate; real events are at most a few MB.
const s3MaxLine = 64 << 20

// s3ContentType is the Content-Type of every object the S3 sink writes.
const s3ContentType = "application/x-ndjson"

// S3Sink writes each batch as one gzip-compressed JSON Lines object, keyed by the
// time partition (UTC) of the hour it is written in, then time and writer, so that
// keys sort in time order, writers never collide and a window lists only its days:
//
//	<prefix>/dt=<yyyy-mm-dd>/hr=<hh>/<20-digit unix nanos>-<writer>-<6-digit seq>.jsonl.gz
//
// (Before partitioning the sink wrote <prefix>/<yyyy>/<mm>/<dd>/<hh>/…; S3Source
// reads both.)
type S3Sink struct {
	client *s3.Client
	bucket string
	prefix string // no leading or trailing "/"
	writer string // safe for a key
	seq    atomic.Uint64
	now    func() time.Time
	gzMu   sync.Mutex
	gz     *gzip.Writer // reused: a new one allocates ~800 KB of compressor state
	// Flat puts objects directly under the prefix, not in the time partition of the
	// hour they are written: for imports of history (see FileOptions.Unpartitioned).
	Flat bool
}

// NewS3Sink returns a sink that puts objects into bucket under prefix. writer names
// this process in the keys (characters other than letters, digits, ".", "_" and "-"
// become "_").
func NewS3Sink(client *s3.Client, bucket, prefix, writer string) *S3Sink {
	return &S3Sink{client: client, bucket: bucket, prefix: cleanS3Prefix(prefix), writer: keySafe(writer), now: time.Now}
}

// Name is the sink's metric label.
func (s *S3Sink) Name() string { return "s3" }

// BatchPolicy: few, large objects — 5000 events, or every 5 seconds.
func (s *S3Sink) BatchPolicy() BatchPolicy {
	return BatchPolicy{MaxEvents: 5000, MaxWait: 5 * time.Second}
}

// Write puts the batch as one object. A retried batch becomes a second object with
// the same events; readers drop duplicates by event id.
func (s *S3Sink) Write(ctx context.Context, lines [][]byte) error {
	if len(lines) == 0 {
		return nil
	}
	body, err := s.gzip(lines)
	if err != nil {
		return fmt.Errorf("s3 sink: gzip: %w", err)
	}
	key := s.key(s.now(), s.seq.Add(1)-1)
	_, err = s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(key),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
		ContentType:   aws.String(s3ContentType),
	})
	if err != nil {
		return fmt.Errorf("s3 put s3://%s/%s: %w", s.bucket, key, err)
	}
	return nil
}

// gzip compresses the batch as JSON Lines with the sink's gzip.Writer (the
// recorder writes a sink's batches one at a time; concurrent Writes would take
// turns here).
func (s *S3Sink) gzip(lines [][]byte) ([]byte, error) {
	var buf bytes.Buffer
	s.gzMu.Lock()
	defer s.gzMu.Unlock()
	if s.gz == nil {
		s.gz = gzip.NewWriter(&buf)
	} else {
		s.gz.Reset(&buf)
	}
	for _, line := range lines {
		_, _ = s.gz.Write(line)
		_, _ = s.gz.Write([]byte{'\n'})
	}
	if err := s.gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// key is the object key of a batch written at t with sequence number seq.
func (s *S3Sink) key(t time.Time, seq uint64) string {
	name := fmt.Sprintf("%020d-%s-%06d.jsonl.gz", t.UnixNano(), s.writer, seq%1000000)
	if !s.Flat {
		name = partitionPath(t) + "/" + name
	}
	if s.prefix == "" {
		return name
	}
	return s.prefix + "/" + name
}

// Close does nothing: the client holds no resource that needs releasing.
func (s *S3Sink) Close() error { return nil }

// S3Source reads back every object under a prefix, as the S3 sink writes them.
type S3Source struct {
	client   *s3.Client
	bucket   string
	prefix   string
	pageSize int32 // keys per ListObjectsV2 page; 0 = the server's default (1000)
	read     atomic.Int64
}

// NewS3Source returns a source over the objects of bucket under prefix.
func NewS3Source(client *s3.Client, bucket, prefix string) *S3Source {
	return &S3Source{client: client, bucket: bucket, prefix: cleanS3Prefix(prefix)}
}

// bytesRead is how many stored (gzip) bytes the current or last Scan (or ScanWindow)
// has read so far: what a window's read is measured by.
func (s *S3Source) bytesRead() int64 { return s.read.Load() }

// Scan lists the objects under the prefix in key order (which is time order for the
// sink's keys, whichever layout), and calls fn with every line of each, gunzipped. An
// object that is not gzip JSON Lines is an error naming its key. Zero-byte "folder"
// keys ending in "/" are skipped.
func (s *S3Source) Scan(ctx context.Context, fn func(line []byte) error) error {
	return s.scan(ctx, window{}, fn)
}

// ScanWindow is Scan restricted to the partitions whose hour overlaps [from, to),
// plus every object outside the time partitions (nothing says when those were
// written). A zero from or to leaves that side open. It lists the prefix's top level
// once (with a delimiter) and then only the days the window needs, each with its own
// ListObjectsV2 prefix. A partition is the hour a batch was written, not when its
// events happened: a step that reached the sink late is in a later hour.
func (s *S3Source) ScanWindow(ctx context.Context, from, to time.Time, fn func(line []byte) error) error {
	return s.scan(ctx, window{from, to}, fn)
}

// Size is the stored (gzip) bytes of every object Scan would read, when listed.
func (s *S3Source) Size(ctx context.Context) (int64, error) {
	return s.size(ctx, window{})
}

// SizeWindow is the stored bytes of the objects ScanWindow would read.
func (s *S3Source) SizeWindow(ctx context.Context, from, to time.Time) (int64, error) {
	return s.size(ctx, window{from, to})
}

func (s *S3Source) size(ctx context.Context, w window) (int64, error) {
	var n int64
	err := s.objects(ctx, w, func(keys []s3Object) error {
		for _, k := range keys {
			n += k.size
		}
		return nil
	})
	return n, err
}

func (s *S3Source) scan(ctx context.Context, w window, fn func(line []byte) error) error {
	s.read.Store(0)
	var gz gunzipper
	return s.objects(ctx, w, func(keys []s3Object) error {
		for _, k := range keys {
			if err := s.scanObject(ctx, k.key, &gz, fn); err != nil {
				return err
			}
		}
		return nil
	})
}

// s3Object is a listed key and its stored size.
type s3Object struct {
	key  string
	size int64
}

// root is the key prefix of the source's objects: "" or "prefix/".
func (s *S3Source) root() string {
	if s.prefix == "" {
		return ""
	}
	return s.prefix + "/"
}

// objects calls fn with the keys the window reads, a listing page at a time (so a
// prefix of millions of keys is never held at once), each page in key order.
func (s *S3Source) objects(ctx context.Context, w window, fn func([]s3Object) error) error {
	if w.all() {
		return s.list(ctx, s.root(), nil, w, fn)
	}
	return s.descend(ctx, s.root(), nil, w, fn)
}

// descend lists one level of partitions below prefix (segs are the partition's path
// segments) with a delimiter: the objects at this level are read, the partitions
// the window keeps are descended into, and anything else is read whole. A partition
// of a day or less is listed whole and its keys filtered, one listing per day.
func (s *S3Source) descend(ctx context.Context, prefix string, segs []string, w window, fn func([]s3Object) error) error {
	if start, end, ok := parsePartition(segs); ok && end.Sub(start) <= 24*time.Hour {
		return s.list(ctx, prefix, segs, w, fn)
	}
	var subs []string
	err := s.pages(ctx, prefix, "/", func(page *s3.ListObjectsV2Output) error {
		for _, p := range page.CommonPrefixes {
			subs = append(subs, aws.ToString(p.Prefix))
		}
		return fn(s3Keys(page.Contents, nil))
	})
	if err != nil {
		return err
	}
	slices.Sort(subs)
	for _, sub := range subs {
		next := append(slices.Clip(segs), strings.TrimSuffix(strings.TrimPrefix(sub, prefix), "/"))
		switch _, _, ok := parsePartition(next); {
		case !ok:
			err = s.list(ctx, sub, nil, window{}, fn) // not a time partition: unpartitioned data
		case w.keep(next):
			err = s.descend(ctx, sub, next, w, fn)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// list lists everything under prefix and keeps the keys whose partition (segs, then
// the key's own directories below prefix) the window keeps.
func (s *S3Source) list(ctx context.Context, prefix string, segs []string, w window, fn func([]s3Object) error) error {
	return s.pages(ctx, prefix, "", func(page *s3.ListObjectsV2Output) error {
		return fn(s3Keys(page.Contents, func(key string) bool {
			if w.all() {
				return true
			}
			dirs := strings.Split(strings.TrimPrefix(key, prefix), "/")
			return w.keep(append(slices.Clip(segs), dirs[:len(dirs)-1]...))
		}))
	})
}

// pages runs ListObjectsV2 under prefix, page by page.
func (s *S3Source) pages(ctx context.Context, prefix, delimiter string, fn func(*s3.ListObjectsV2Output) error) error {
	in := &s3.ListObjectsV2Input{Bucket: aws.String(s.bucket)}
	if s.pageSize > 0 {
		in.MaxKeys = aws.Int32(s.pageSize)
	}
	if prefix != "" {
		in.Prefix = aws.String(prefix)
	}
	if delimiter != "" {
		in.Delimiter = aws.String(delimiter)
	}
	pages := s3.NewListObjectsV2Paginator(s.client, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("s3 list s3://%s/%s: %w", s.bucket, prefix, err)
		}
		if err := fn(page); err != nil {
			return err
		}
	}
	return nil
}

// s3Keys is the objects of a listing page that keep accepts (nil: all), in key
// order, without zero-byte "folder" keys.
func s3Keys(objs []types.Object, keep func(string) bool) []s3Object {
	keys := make([]s3Object, 0, len(objs))
	for _, o := range objs {
		k := aws.ToString(o.Key)
		if strings.HasSuffix(k, "/") && aws.ToInt64(o.Size) == 0 || keep != nil && !keep(k) {
			continue
		}
		keys = append(keys, s3Object{key: k, size: aws.ToInt64(o.Size)})
	}
	// S3 lists in key order already; stores that do not still work
	slices.SortFunc(keys, func(a, b s3Object) int { return strings.Compare(a.key, b.key) })
	return keys
}

// errFn marks an error returned by Scan's callback, so that it is passed on as is.
type errFn struct{ err error }

func (e errFn) Error() string { return e.err.Error() }

// scanObject reads one object with gz and calls fn with each of its lines.
func (s *S3Source) scanObject(ctx context.Context, key string, gz *gunzipper, fn func([]byte) error) error {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)},
		func(o *s3.Options) { o.DisableLogOutputChecksumValidationSkipped = true })
	if err != nil {
		return fmt.Errorf("s3 get s3://%s/%s: %w", s.bucket, key, err)
	}
	defer out.Body.Close()
	err = gz.lines(countingReader{out.Body, &s.read}, func(line []byte) error {
		if err := fn(line); err != nil {
			return errFn{err}
		}
		return nil
	})
	if fe, ok := errors.AsType[errFn](err); ok {
		return fe.err
	}
	if err != nil {
		return fmt.Errorf("s3 object s3://%s/%s is not gzip JSON Lines: %w", s.bucket, key, err)
	}
	return nil
}

// gunzipper reads gzip JSON Lines streams one after another, reusing its readers
// (~170 KB of buffers and inflate state) and its long-line buffer across them.
type gunzipper struct {
	in  *bufio.Reader
	zr  *gzip.Reader
	out *bufio.Reader
	buf []byte
}

// lines calls fn with each non-empty line of the gzip stream r (a last line may
// lack its "\n"; a "\r" before the "\n" is dropped).
func (g *gunzipper) lines(r io.Reader, fn func([]byte) error) error {
	if g.in == nil {
		g.in = bufio.NewReaderSize(r, 64<<10)
	} else {
		g.in.Reset(r)
	}
	if g.zr == nil {
		zr, err := gzip.NewReader(g.in)
		if err != nil {
			return err
		}
		g.zr = zr
	} else if err := g.zr.Reset(g.in); err != nil {
		return err
	}
	if g.out == nil {
		g.out = bufio.NewReaderSize(g.zr, 64<<10)
	} else {
		g.out.Reset(g.zr)
	}
	for {
		chunk, err := g.out.ReadSlice('\n')
		line := chunk
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: gather it in buf.
			g.buf = append(g.buf[:0], chunk...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if len(g.buf) > s3MaxLine {
					g.buf = g.buf[:0]
					return fmt.Errorf("a line is longer than %d MiB", s3MaxLine>>20)
				}
				chunk, err = g.out.ReadSlice('\n')
				g.buf = append(g.buf, chunk...)
			}
			line = g.buf
		}
		if err != nil && err != io.EOF {
			return err
		}
		line = bytes.TrimSuffix(line, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) > 0 {
			if ferr := fn(line); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}

// cleanS3Prefix drops leading and trailing slashes.
func cleanS3Prefix(p string) string { return strings.Trim(p, "/") }

// keySafe keeps letters, digits, ".", "_" and "-", and replaces anything else by "_".
func keySafe(s string) string {
	if s == "" {
		return "writer"
	}
	b := []byte(s)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}
