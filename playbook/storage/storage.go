// Package storage keeps playbook versions: immutable version files and their
// manifest in a store (a directory, an S3 prefix or Redis keys, named as
// location.ParseStore reads them), which is also where the learner keeps its state.
// It is apart from package playbook (the playbook as data) so that what renders a
// playbook (augment, and through it the data plane) does not link the stores' clients.
package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/internal/fsx"
	"github.com/camproxy/camproxy/internal/s3x"
	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/replay/location"
)

// ErrNotFound is returned by Store.Get for a name the store does not hold.
var ErrNotFound = errors.New("not found")

// ErrExists is returned by Store.Create for a name the store holds already.
var ErrExists = errors.New("already exists")

// Store holds named blobs: the version files, the manifest, the learner's state.
type Store interface {
	Get(ctx context.Context, name string) ([]byte, error)
	// Create writes name only if it does not exist: versions are immutable.
	Create(ctx context.Context, name string, data []byte) error
	// Put writes or replaces name atomically.
	Put(ctx context.Context, name string, data []byte) error
	// Location names the store in messages (credentials redacted).
	Location() string
	Close() error
}

// DefaultRedisKey prefixes a Redis store's keys when its URI names none.
const DefaultRedisKey = "camproxy:playbook"

// OpenStore opens the store a learn.store value names (location.ParseStore):
//
//	DIR or file:///abs/dir or file://./rel/dir       a directory (created when missing)
//	s3://bucket/prefix[?region=…][&endpoint=…]          an S3 prefix
//	redis://host:6379/0[?prefix=camproxy:playbook]     Redis keys PREFIX:NAME (rediss://, cluster and Sentinel forms as for replay)
//
// It makes no network call.
func OpenStore(ctx context.Context, uri string) (Store, error) {
	sp, err := location.ParseStore(uri)
	if err != nil {
		return nil, err
	}
	switch sp.Scheme {
	case location.File:
		return NewDirStore(sp.Dir)
	case location.Redis:
		rdb, err := sp.RedisClient()
		if err != nil {
			return nil, err
		}
		s := NewRedisStore(rdb, sp.KeyPrefix)
		s.owned, s.where = true, sp.String()
		return s, nil
	default:
		client, err := s3x.Client(ctx, sp)
		if err != nil {
			return nil, fmt.Errorf("playbook store: %w", err)
		}
		return NewS3Store(client, sp.Bucket, sp.Prefix), nil
	}
}

// DirStore keeps each name as a file of a directory.
type DirStore struct{ dir string }

// NewDirStore uses dir, creating it when missing.
func NewDirStore(dir string) (*DirStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("playbook store: %w", err)
	}
	return &DirStore{dir: dir}, nil
}

func (d *DirStore) Location() string { return d.dir }
func (d *DirStore) Close() error     { return nil }

func (d *DirStore) path(name string) (string, error) {
	if !filepath.IsLocal(name) || strings.ContainsAny(name, `/\`) {
		return "", fmt.Errorf("playbook store: bad name %q", name)
	}
	return filepath.Join(d.dir, name), nil
}

func (d *DirStore) Get(_ context.Context, name string) ([]byte, error) {
	p, err := d.path(name)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", p, ErrNotFound)
	}
	return b, err
}

// Create writes a temporary file and links it into place: the name appears whole,
// or not at all, and never over an existing one.
func (d *DirStore) Create(_ context.Context, name string, data []byte) error {
	p, tmp, err := d.stage(name, data)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, p); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s: %w", p, ErrExists)
		}
		return fmt.Errorf("playbook store: %w", err)
	}
	fsx.SyncDir(d.dir)
	return nil
}

// Put replaces name by renaming a synced temporary file over it.
func (d *DirStore) Put(_ context.Context, name string, data []byte) error {
	p, tmp, err := d.stage(name, data)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("playbook store: %w", err)
	}
	fsx.SyncDir(d.dir)
	return nil
}

// stage checks name and writes data to a synced temporary file beside it.
func (d *DirStore) stage(name string, data []byte) (path, tmp string, err error) {
	if path, err = d.path(name); err != nil {
		return "", "", err
	}
	tmp, err = d.temp(data)
	return path, tmp, err
}

func (d *DirStore) temp(data []byte) (string, error) {
	f, err := os.CreateTemp(d.dir, ".tmp-*")
	if err != nil {
		return "", fmt.Errorf("playbook store: %w", err)
	}
	// CreateTemp makes the file 0600; versions and playbook.json are read by other
	// users (a serving camproxy, an operator), like the replay segments beside them.
	err = f.Chmod(0o644)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("playbook store: %w", err)
	}
	return f.Name(), nil
}

// RedisStore keeps each name under the key PREFIX:NAME.
type RedisStore struct {
	rdb   redis.UniversalClient
	key   string
	owned bool
	where string
}

// NewRedisStore uses rdb (not closed by Close) with keys prefix:NAME.
func NewRedisStore(rdb redis.UniversalClient, prefix string) *RedisStore {
	if prefix == "" {
		prefix = DefaultRedisKey
	}
	return &RedisStore{rdb: rdb, key: prefix, where: "redis key " + prefix}
}

func (r *RedisStore) Location() string { return r.where }

func (r *RedisStore) Close() error {
	if r.owned {
		return r.rdb.Close()
	}
	return nil
}

func (r *RedisStore) Get(ctx context.Context, name string) ([]byte, error) {
	b, err := r.rdb.Get(ctx, r.key+":"+name).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%s:%s: %w", r.key, name, ErrNotFound)
	}
	return b, err
}

func (r *RedisStore) Create(ctx context.Context, name string, data []byte) error {
	ok, err := r.rdb.SetNX(ctx, r.key+":"+name, data, 0).Result()
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s:%s: %w", r.key, name, ErrExists)
	}
	return nil
}

func (r *RedisStore) Put(ctx context.Context, name string, data []byte) error {
	return r.rdb.Set(ctx, r.key+":"+name, data, 0).Err()
}

// Client is the store's Redis client (the learner's lease uses it).
func (r *RedisStore) Client() redis.UniversalClient { return r.rdb }

// Key is the store's key prefix.
func (r *RedisStore) Key() string { return r.key }

// S3Store keeps each name as the object PREFIX/NAME.
type S3Store struct {
	client         *s3.Client
	bucket, prefix string
}

// NewS3Store uses client with objects under bucket/prefix.
func NewS3Store(client *s3.Client, bucket, prefix string) *S3Store {
	return &S3Store{client: client, bucket: bucket, prefix: strings.Trim(prefix, "/")}
}

func (s *S3Store) Location() string { return "s3://" + path.Join(s.bucket, s.prefix) }
func (s *S3Store) Close() error     { return nil }

func (s *S3Store) objectKey(name string) string {
	if s.prefix == "" {
		return name
	}
	return s.prefix + "/" + name
}

func (s *S3Store) Get(ctx context.Context, name string) ([]byte, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.objectKey(name))})
	if err != nil {
		if _, ok := errors.AsType[*s3types.NoSuchKey](err); ok {
			return nil, fmt.Errorf("%s/%s: %w", s.Location(), name, ErrNotFound)
		}
		return nil, err
	}
	defer out.Body.Close()
	return io.ReadAll(out.Body)
}

// Create checks that the object is absent, then writes it. S3 offers conditional
// writes (If-None-Match) on AWS but not on every S3-compatible store; one learner
// holds the lease, so the check-then-write race has no second writer.
func (s *S3Store) Create(ctx context.Context, name string, data []byte) error {
	if _, err := s.Get(ctx, name); err == nil {
		return fmt.Errorf("%s/%s: %w", s.Location(), name, ErrExists)
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	return s.Put(ctx, name, data)
}

func (s *S3Store) Put(ctx context.Context, name string, data []byte) error {
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.objectKey(name)),
		Body: bytes.NewReader(data), ContentType: aws.String("application/json")})
	return err
}

// ManifestName is the manifest's name in a store.
const ManifestName = "manifest.json"

// FileName is version n's name: playbook.vN.json.
func FileName(n int) string { return fmt.Sprintf("playbook.v%d.json", n) }

// Version is one manifest row.
type Version struct {
	Version   int       `json:"version"`
	File      string    `json:"file"`
	Parent    int       `json:"parent"`    // 0 for v1
	Iteration int       `json:"iteration"` // the step that made it (0 = the seed)
	Scored    bool      `json:"scored"`    // Score holds a measured mean reward
	Score     *float64  `json:"score"`     // null until scored
	Runs      int       `json:"runs,omitempty"`
	Entries   int       `json:"entries"`
	Summary   string    `json:"summary,omitempty"` // the mutator's finish summary
	Sources   []string  `json:"sources,omitempty"` // episodes the step reflected on
	CreatedAt time.Time `json:"created_at"`
}

// Manifest lists every version.
type Manifest struct {
	Versions []Version `json:"versions"`
}

// Get returns version n's row.
func (m *Manifest) Get(n int) (*Version, bool) {
	for i := range m.Versions {
		if m.Versions[i].Version == n {
			return &m.Versions[i], true
		}
	}
	return nil, false
}

// Latest is the highest version, 0 when there is none.
func (m *Manifest) Latest() int {
	n := 0
	for _, v := range m.Versions {
		n = max(n, v.Version)
	}
	return n
}

// Versions reads and writes immutable playbook versions and their manifest.
type Versions struct {
	Store Store
	Now   func() time.Time // nil = time.Now
}

// Manifest reads the manifest; a store without one has an empty manifest.
func (v *Versions) Manifest(ctx context.Context) (*Manifest, error) {
	b, err := v.Store.Get(ctx, ManifestName)
	if errors.Is(err, ErrNotFound) {
		return &Manifest{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("playbook manifest in %s: %w", v.Store.Location(), err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("playbook manifest in %s: %w", v.Store.Location(), err)
	}
	return &m, nil
}

// Load reads version n.
func (v *Versions) Load(ctx context.Context, n int) (*playbook.Playbook, error) {
	b, err := v.Store.Get(ctx, FileName(n))
	if err != nil {
		return nil, fmt.Errorf("playbook v%d in %s: %w", n, v.Store.Location(), err)
	}
	pb, err := playbook.ParseJSON(b)
	if err != nil {
		return nil, fmt.Errorf("playbook v%d in %s: %w", n, v.Store.Location(), err)
	}
	return pb, nil
}

// Write stores pb as the next version with row's metadata (Version, File, Entries and
// CreatedAt are filled in) and adds it to the manifest. A version file left by a
// crash between the two writes is taken over when its bytes are pb's.
func (v *Versions) Write(ctx context.Context, pb *playbook.Playbook, row Version) (Version, error) {
	m, err := v.Manifest(ctx)
	if err != nil {
		return Version{}, err
	}
	row.Version = m.Latest() + 1
	row.File = FileName(row.Version)
	row.Entries = len(pb.Entries)
	if row.CreatedAt.IsZero() {
		now := time.Now
		if v.Now != nil {
			now = v.Now
		}
		row.CreatedAt = now().UTC()
	}
	data := pb.JSON()
	if err := v.Store.Create(ctx, row.File, data); err != nil {
		if !errors.Is(err, ErrExists) {
			return Version{}, fmt.Errorf("playbook v%d: %w", row.Version, err)
		}
		old, gerr := v.Store.Get(ctx, row.File)
		if gerr != nil || !bytes.Equal(old, data) {
			return Version{}, fmt.Errorf("playbook v%d: %s holds another playbook than the manifest knows: %w", row.Version, row.File, err)
		}
	}
	m.Versions = append(m.Versions, row)
	if err := v.PutManifest(ctx, m); err != nil {
		return Version{}, err
	}
	return row, nil
}

// PutManifest replaces the manifest (scores are filled in after a version is written).
func (v *Versions) PutManifest(ctx context.Context, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := v.Store.Put(ctx, ManifestName, append(b, '\n')); err != nil {
		return fmt.Errorf("playbook manifest in %s: %w", v.Store.Location(), err)
	}
	return nil
}
