package storage

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/playbook"
)

func testRedis(t *testing.T) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true, MaxRetries: -1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		if os.Getenv("CAMPROXY_REQUIRE_REDIS") == "1" {
			t.Fatalf("Redis at 127.0.0.1:6379 is required (CAMPROXY_REQUIRE_REDIS=1) but unreachable: %v", err)
		}
		t.Skipf("no Redis at 127.0.0.1:6379 (%v): skipping; set CAMPROXY_REQUIRE_REDIS=1 to make this a failure", err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// stores returns one store of each kind, empty.
func stores(t *testing.T) map[string]Store {
	t.Helper()
	dir, err := NewDirStore(filepath.Join(t.TempDir(), "pb"))
	if err != nil {
		t.Fatal(err)
	}
	s3 := testkit.NewS3("learn")
	t.Cleanup(s3.Close)
	rdb := testRedis(t)
	prefix := fmt.Sprintf("camproxy:test:playbook:%d", time.Now().UnixNano())
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), prefix+":*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	return map[string]Store{"dir": dir, "s3": NewS3Store(s3.Client(), "learn", "fleet/a"), "redis": NewRedisStore(rdb, prefix)}
}

func TestStores(t *testing.T) {
	ctx := context.Background()
	for kind, s := range stores(t) {
		t.Run(kind, func(t *testing.T) {
			if _, err := s.Get(ctx, "playbook.v1.json"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("get of a missing name: %v", err)
			}
			if err := s.Create(ctx, "playbook.v1.json", []byte("one")); err != nil {
				t.Fatal(err)
			}
			if err := s.Create(ctx, "playbook.v1.json", []byte("two")); !errors.Is(err, ErrExists) {
				t.Fatalf("second create: %v, want ErrExists", err)
			}
			if b, err := s.Get(ctx, "playbook.v1.json"); err != nil || string(b) != "one" {
				t.Fatalf("a version changed: %q %v", b, err)
			}
			for _, v := range []string{"a", "b"} {
				if err := s.Put(ctx, ManifestName, []byte(v)); err != nil {
					t.Fatal(err)
				}
			}
			if b, _ := s.Get(ctx, ManifestName); string(b) != "b" {
				t.Fatalf("put did not replace: %q", b)
			}
		})
	}
}

func TestVersionsWriteAndLoad(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for kind, s := range stores(t) {
		t.Run(kind, func(t *testing.T) {
			v := &Versions{Store: s, Now: func() time.Time { return now }}
			if m, err := v.Manifest(ctx); err != nil || len(m.Versions) != 0 {
				t.Fatalf("empty store: %+v %v", m, err)
			}
			v1, err := v.Write(ctx, &playbook.Playbook{}, Version{})
			if err != nil || v1.Version != 1 || v1.File != "playbook.v1.json" || v1.Entries != 0 {
				t.Fatalf("v1: %+v %v", v1, err)
			}
			pb := seed()
			score := 0.75
			v2, err := v.Write(ctx, pb, Version{Parent: 1, Iteration: 1, Scored: true, Score: &score, Summary: "s"})
			if err != nil || v2.Version != 2 || v2.Entries != 3 {
				t.Fatalf("v2: %+v %v", v2, err)
			}
			got, err := v.Load(ctx, 2)
			if err != nil || !sameEntries(got, pb) {
				t.Fatalf("load v2: %v", err)
			}
			m, _ := v.Manifest(ctx)
			if len(m.Versions) != 2 || m.Latest() != 2 || !m.Versions[1].CreatedAt.Equal(now) || *m.Versions[1].Score != 0.75 || m.Versions[1].Parent != 1 {
				t.Fatalf("manifest %+v", m)
			}
			// A crash left v3's file but not its manifest row: the same bytes are taken over…
			pb3 := seed()
			pb3.Entries = pb3.Entries[:1]
			if err := s.Create(ctx, FileName(3), pb3.JSON()); err != nil {
				t.Fatal(err)
			}
			if v3, err := v.Write(ctx, pb3, Version{Parent: 2}); err != nil || v3.Version != 3 {
				t.Fatalf("take over v3: %+v %v", v3, err)
			}
			// …other bytes are an error, and the manifest does not move.
			if err := s.Create(ctx, FileName(4), []byte(`{"entries":[]}`)); err != nil {
				t.Fatal(err)
			}
			if _, err := v.Write(ctx, seed(), Version{Parent: 3}); err == nil || !strings.Contains(err.Error(), "another playbook") {
				t.Fatalf("conflicting v4: %v", err)
			}
			if m, _ := v.Manifest(ctx); m.Latest() != 3 {
				t.Fatalf("manifest moved to %d", m.Latest())
			}
		})
	}
}

func TestOpenStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, tc := range []struct {
		uri, want, err string
	}{
		{filepath.Join(dir, "plain"), filepath.Join(dir, "plain"), ""},
		{"file://" + filepath.Join(dir, "uri"), filepath.Join(dir, "uri"), ""},
		{"redis://127.0.0.1:6379/0?prefix=camproxy:pbtest", "redis://127.0.0.1:6379/0?prefix=camproxy:pbtest", ""},
		{"redis://:secret@127.0.0.1:6379/0", "redis://:****@127.0.0.1:6379/0", ""},
		{"s3://bucket/some/prefix?region=eu-west-1", "s3://bucket/some/prefix", ""},
		{"ftp://x/y", "", "bad playbook store ftp://x/y: unknown scheme"},
		{"", "", "bad playbook store: required: a directory"},
	} {
		s, err := OpenStore(ctx, tc.uri)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.uri, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.uri, err)
			continue
		}
		if got := s.Location(); got != tc.want {
			t.Errorf("%q: location %q, want %q", tc.uri, got, tc.want)
		}
		if strings.Contains(s.Location(), "secret") {
			t.Errorf("%q: the password shows in %q", tc.uri, s.Location())
		}
		_ = s.Close()
	}
	if _, err := os.Stat(filepath.Join(dir, "plain")); err != nil {
		t.Errorf("the directory was not created: %v", err)
	}
	// A redis store's keys are KEY:NAME.
	rdb := testRedis(t)
	key := fmt.Sprintf("camproxy:test:open:%d", time.Now().UnixNano())
	s, err := OpenStore(ctx, "redis://127.0.0.1:6379/0?prefix="+key)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Cleanup(func() { rdb.Del(context.Background(), key+":x") })
	if err := s.Put(ctx, "x", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if b, _ := rdb.Get(ctx, key+":x").Bytes(); !bytes.Equal(b, []byte("v")) {
		t.Errorf("redis key %s:x = %q", key, b)
	}
}

// TestDirStoreFileMode: versions, the manifest and playbook.json are readable by
// others (CreateTemp alone would leave them 0600).
func TestDirStoreFileMode(t *testing.T) {
	d, err := NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Create(ctx, FileName(1), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := d.Put(ctx, ManifestName, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{FileName(1), ManifestName} {
		fi, err := os.Stat(filepath.Join(d.Location(), name))
		if err != nil {
			t.Fatal(err)
		}
		if mode := fi.Mode().Perm(); mode != 0o644 {
			t.Errorf("%s has mode %v, want -rw-r--r--", name, mode)
		}
	}
}

// seed is a playbook of three entries.
func seed() *playbook.Playbook {
	return &playbook.Playbook{Entries: []playbook.Entry{
		{ID: "e1", Section: "rules", Content: "Check the fare class first.", Helpful: 2},
		{ID: "e2", Section: "rules", Content: "Offer a refund to everyone.", Harmful: 2},
		{ID: "e3", Section: "tools", Content: "Call get_reservation before update.", Helpful: 1, Harmful: 1},
	}}
}

// sameEntries: a and b hold the same entries (id, section, content, counters), in order.
func sameEntries(a, b *playbook.Playbook) bool {
	return slices.EqualFunc(a.Entries, b.Entries, func(x, y playbook.Entry) bool {
		return x.ID == y.ID && cmp.Or(x.Section, playbook.DefaultSection) == cmp.Or(y.Section, playbook.DefaultSection) &&
			x.Content == y.Content && x.Helpful == y.Helpful && x.Harmful == y.Harmful
	})
}
