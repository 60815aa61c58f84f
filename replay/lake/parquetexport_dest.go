package lake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/camproxy/camproxy/internal/fsx"
	"github.com/camproxy/camproxy/internal/s3x"
	"github.com/camproxy/camproxy/replay/location"
)

// ExportDest is where a partitioned export writes: a local directory or an S3 prefix.
type ExportDest interface {
	// Empty reports whether the destination holds nothing yet.
	Empty(ctx context.Context) (bool, error)
	// Create starts the file at rel (slash-separated, below the destination). It
	// shows at rel only once Close succeeds; Abort drops it.
	Create(ctx context.Context, rel string) (ExportFile, error)
	String() string
}

// ExportFile is a file being written to an ExportDest.
type ExportFile interface {
	io.Writer
	Close() error
	Abort()
}

// OpenExportDest opens where an export goes: a directory path (location.IsDir),
// file:///abs/dir, or s3://bucket/prefix[?region=…&endpoint=…] (credentials from the
// AWS default chain, as for replay URIs). Nothing is created until the first file.
func OpenExportDest(ctx context.Context, target string) (ExportDest, error) {
	scheme, _, _ := strings.Cut(target, ":")
	switch {
	case target == "":
		return nil, errors.New("export destination: empty path")
	case location.IsDir(target):
		return NewDirDest(target), nil
	case !strings.EqualFold(scheme, location.S3) && !strings.EqualFold(scheme, location.File):
		return nil, fmt.Errorf("export destination %s: use a directory, file:///dir or s3://bucket/prefix", location.Redact(target))
	}
	sp, err := location.Parse(target)
	if err != nil {
		return nil, err
	}
	if sp.Scheme == location.File {
		return NewDirDest(sp.Dir), nil
	}
	client, err := s3x.Client(ctx, sp)
	if err != nil {
		return nil, err
	}
	return NewS3Dest(client, sp.Bucket, sp.Prefix), nil
}

// DirDest writes below a local directory. A file is written as a hidden temporary
// next to its place, fsynced, and renamed, so a reader never sees half a file.
type DirDest struct{ dir string }

// NewDirDest writes below dir, created when the first file is.
func NewDirDest(dir string) *DirDest { return &DirDest{dir: filepath.Clean(dir)} }

func (d *DirDest) String() string { return d.dir }

// Empty is true for a missing or empty directory.
func (d *DirDest) Empty(context.Context) (bool, error) {
	f, err := os.Open(d.dir)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return len(names) == 0, err
}

// Create makes rel's directories and a temporary file beside rel.
func (d *DirDest) Create(_ context.Context, rel string) (ExportFile, error) {
	final := filepath.Join(d.dir, filepath.FromSlash(path.Clean("/"+rel)))
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(filepath.Dir(final), "."+filepath.Base(final)+".*.tmp")
	if err != nil {
		return nil, err
	}
	return &dirFile{f: f, final: final}, nil
}

type dirFile struct {
	f     *os.File
	final string
}

func (f *dirFile) Write(p []byte) (int, error) { return f.f.Write(p) }

func (f *dirFile) Close() error {
	err := f.f.Sync()
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.f.Name(), f.final)
	}
	if err != nil {
		_ = os.Remove(f.f.Name())
		return fmt.Errorf("write %s: %w", f.final, err)
	}
	fsx.SyncDir(filepath.Dir(f.final))
	return nil
}

func (f *dirFile) Abort() {
	_ = f.f.Close()
	_ = os.Remove(f.f.Name())
}

// S3Dest writes objects below a prefix. A file is spooled to a local temporary file
// and put in one PutObject at Close, so memory stays bounded and a reader never sees
// a partial object (a single PUT takes up to 5 GB: keep FileBytes below it).
type S3Dest struct {
	client *s3.Client
	bucket string
	prefix string
	tmpDir string // "" = os.TempDir()
}

// NewS3Dest writes below prefix in bucket.
func NewS3Dest(client *s3.Client, bucket, prefix string) *S3Dest {
	return &S3Dest{client: client, bucket: bucket, prefix: strings.Trim(prefix, "/")}
}

func (d *S3Dest) String() string { return "s3://" + d.bucket + "/" + d.prefix }

func (d *S3Dest) key(rel string) string {
	rel = strings.TrimPrefix(path.Clean("/"+rel), "/")
	if d.prefix == "" {
		return rel
	}
	return d.prefix + "/" + rel
}

// Empty is true when no key starts with the prefix and "/".
func (d *S3Dest) Empty(ctx context.Context) (bool, error) {
	in := &s3.ListObjectsV2Input{Bucket: aws.String(d.bucket), MaxKeys: aws.Int32(1)}
	if d.prefix != "" {
		in.Prefix = aws.String(d.prefix + "/")
	}
	out, err := d.client.ListObjectsV2(ctx, in)
	if err != nil {
		return false, fmt.Errorf("s3 list %s: %w", d, err)
	}
	return len(out.Contents) == 0, nil
}

// Create spools the object to a temporary file.
func (d *S3Dest) Create(ctx context.Context, rel string) (ExportFile, error) {
	f, err := os.CreateTemp(d.tmpDir, "camproxy-export-*.tmp")
	if err != nil {
		return nil, err
	}
	return &s3File{ctx: ctx, d: d, key: d.key(rel), f: f}, nil
}

type s3File struct {
	ctx context.Context
	d   *S3Dest
	key string
	f   *os.File
}

func (f *s3File) Write(p []byte) (int, error) { return f.f.Write(p) }

func (f *s3File) Close() error {
	defer f.Abort()
	size, err := f.f.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = f.f.Seek(0, io.SeekStart)
	}
	if err != nil {
		return fmt.Errorf("spool of s3://%s/%s: %w", f.d.bucket, f.key, err)
	}
	ct := "application/vnd.apache.parquet"
	if strings.HasSuffix(f.key, ".json") {
		ct = "application/json"
	}
	_, err = f.d.client.PutObject(f.ctx, &s3.PutObjectInput{
		Bucket: aws.String(f.d.bucket), Key: aws.String(f.key), Body: f.f,
		ContentLength: aws.Int64(size), ContentType: aws.String(ct),
	})
	if err != nil {
		return fmt.Errorf("s3 put s3://%s/%s: %w", f.d.bucket, f.key, err)
	}
	return nil
}

func (f *s3File) Abort() {
	_ = f.f.Close()
	_ = os.Remove(f.f.Name())
}
