package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cobracli "github.com/camproxy/camproxy/internal/cli"
	"github.com/camproxy/camproxy/playbook/storage"
)

// uriPass is the password in rows that hold one: no message may show it.
const uriPass = "Hunter2pw"

// TestReplayURIsCheckAndServeAgree: `config check` and `serve` give every replay URI
// the same verdict (issue 27: a deploy that passed config check in CI failed at
// start). An accepted URI gets serve past opening its sink (Redis and S3 sinks make no
// network call then) and running; a refused one exits 2 from both, naming the key
// and the problem, never the password.
func TestReplayURIsCheckAndServeAgree(t *testing.T) {
	dir := t.TempDir()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	// Relative file URIs resolve from the working directory (the source tree): they
	// reach the temp dir from there.
	rel, err := filepath.Rel(wd, dir)
	if err != nil {
		t.Fatal(err)
	}
	rel = filepath.ToSlash(rel)
	for i, tc := range []struct {
		uri  string
		want string // "" = accepted; else what the refusal says
	}{
		{"file://" + dir + "/abs", ""},
		{"file://./" + rel + "/dot", ""},
		{"file:" + rel + "/opaque", ""},
		{"file://localhost" + dir + "/localhost", ""},
		{"FILE://" + dir + "/upper", ""},
		{"file://myhost/data/replay", `file URI host "myhost"`},
		{"file://" + dir + "/q?segment=1", "a file URI takes no query parameters"},
		{"file://u:" + uriPass + "@localhost" + dir + "/u", "a file URI takes no user"},
		{"file://", "a file URI needs a directory"},
		{"file:", "a file URI needs a directory"},
		{"file://" + dir + "/a%00b", "the directory holds a NUL byte"},
		{"file://" + dir + "/frag#x", `unexpected "#"`},
		{"redis://127.0.0.1:1/0?stream=camproxy:replay", ""},
		{"redis://:" + uriPass + "@127.0.0.1:1/3?stream=s&maxlen=1000&dial_timeout=1s", ""},
		{"rediss://u:" + uriPass + "@127.0.0.1:1/0?stream=s", ""},
		{"redis://127.0.0.1:1?stream=s&addr=127.0.0.1:2&addr=127.0.0.1:3", ""},
		{"redis://127.0.0.1:1/1?stream=s&master_name=mymaster&addr=127.0.0.1:2", ""},
		{"redis://127.0.0.1:1/0", "no stream name; add ?stream=camproxy:replay"},
		{"redis://:" + uriPass + "@127.0.0.1:1/0?stream=", "no stream name"},
		{"redis://127.0.0.1:1?stream=s&maxlen=lots", `maxlen "lots" is not a whole number >= 0`},
		{"redis://127.0.0.1:1?stream=s&maxlen=-1", `maxlen "-1"`},
		{"redis://127.0.0.1:1/2?stream=s&addr=127.0.0.1:2", "a Redis Cluster has only database 0"},
		{"redis://127.0.0.1:1?stream=s&master_name=", "master_name is empty"},
		{"redis://127.0.0.1:1?stream=s&bogus=1", "redis: unexpected option: bogus"},
		{"redis://127.0.0.1:1?stream=s&pool_size=3000000000", "pool_size is out of range"},
		{"redis:///0?stream=s", "a Redis URL needs a host"},
		{"redis://127.0.0.1:1?stream=s#x", `unexpected "#"`},
		{"s3://bucket/replay?region=eu-west-1&endpoint=http://127.0.0.1:1", ""},
		{"s3://bucket", ""},
		{"s3://bucket/p?foo=bar", `unknown query parameter "foo"; an s3 URI takes region and endpoint`},
		{"s3://bucket/p?region=US%20East", `region "US East" is not a region name`},
		{"s3://bucket/p?endpoint=127.0.0.1:9000", "endpoint must be an http:// or https:// URL with a host"},
		{"s3://bucket/p?endpoint=http://u:" + uriPass + "@127.0.0.1:1", "endpoint must not hold credentials"},
		{"s3://bucket:9000/p", "the host of an s3 URI is the bucket name"},
		{"s3://key:" + uriPass + "@bucket/p", "credentials do not go in an s3 URI"},
		{"s3:///p", "an s3 URI needs a bucket"},
		{"kafka://broker/topic", `unknown scheme "kafka"; use file, redis, rediss or s3`},
		{"./camproxy-data/replay", "no scheme; use file://, redis://, rediss:// or s3://"},
	} {
		cfg := filepath.Join(dir, fmt.Sprintf("camproxy-%d.yaml", i))
		text := fmt.Sprintf("server: {listen: \"127.0.0.1:0\", admin_listen: \"127.0.0.1:0\"}\nreplay: {sinks: [%q], spool_dir: %q}\n",
			tc.uri, filepath.Join(dir, fmt.Sprintf("spool-%d", i)))
		if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Run(tc.uri, func(t *testing.T) {
			t.Parallel()
			// serve runs until its context is done: done before it starts, serve
			// starts (the sink open, both planes listening) and shuts down at once.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			for _, args := range [][]string{{"config", "check", "--quiet", cfg}, {"serve", "--config", cfg}} {
				var stdout, stderr bytes.Buffer
				code := cobracli.ExitCode(run(ctx, args, &stdout, &stderr, noEnv), &stderr)
				if strings.Contains(stdout.String()+stderr.String(), uriPass) {
					t.Errorf("%s shows the password:\n%s%s", args[0], stdout.String(), stderr.String())
				}
				switch {
				case tc.want == "" && code != 0:
					t.Errorf("%s refused it: exit %d\n%s", args[0], code, stderr.String())
				case tc.want == "" && args[0] == "serve" && !strings.Contains(stderr.String(), "camproxy serving"):
					t.Errorf("serve did not start:\n%s", stderr.String())
				case tc.want != "" && (code != 2 || !strings.Contains(stderr.String(), "replay.sinks[0]: "+tc.want)):
					t.Errorf("%s: exit %d, want 2 naming replay.sinks[0]: %s\n%s", args[0], code, tc.want, stderr.String())
				}
			}
		})
	}
}

// TestStoreLocationsCheckAndOpenStoreAgree: `config check` and storage.OpenStore
// (what serve's learner opens learn.store with) give every store location the same
// verdict.
func TestStoreLocationsCheckAndOpenStoreAgree(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range []struct{ store, want string }{
		{filepath.Join(dir, "plain"), ""},
		{"file://" + dir + "/uri", ""},
		{"s3://bucket/playbook?region=eu-west-1&endpoint=http://127.0.0.1:1", ""},
		{"redis://:" + uriPass + "@127.0.0.1:1/0?prefix=camproxy:pb", ""},
		{"redis://127.0.0.1:1/0?key=camproxy:pb", ""}, // prefix's older name
		{"redis://127.0.0.1:1?prefix=p&addr=127.0.0.1:2", ""},
		{"", "required: a directory, s3://bucket/prefix or redis://host:6379/0?prefix=PREFIX"},
		{filepath.Join(dir, "a\x00b"), "the directory holds a NUL byte"},
		{"file://myhost/pb", `file URI host "myhost"`},
		{"s3://bucket/p?foo=bar", `unknown query parameter "foo"`},
		{"s3:bucket", "an s3 URI needs a bucket"},
		{"redis://:" + uriPass + "@127.0.0.1:1/0?stream=s", "redis: unexpected option: stream"}, // a replay URI's, not a store's
		{"redis://127.0.0.1:1/0?prefix=p&maxlen=5", "redis: unexpected option: maxlen"},
		{"redis://127.0.0.1:1/x?prefix=p", "the path must be a database number"},
		{"ftp://x/y", `unknown scheme "ftp"; use a directory, file, redis, rediss or s3`},
	} {
		cfg := filepath.Join(dir, fmt.Sprintf("camproxy-%d.yaml", i))
		text := fmt.Sprintf("learn: {enabled: true, model: openai/x, store: %q}\nreplay: {sinks: [%q], spool_dir: %q}\n",
			tc.store, "file://"+dir+"/replay", filepath.Join(dir, "spool"))
		if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Run(tc.store, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := cobracli.ExitCode(run(context.Background(), []string{"config", "check", "--quiet", cfg}, &stdout, &stderr, noEnv), &stderr)
			s, err := storage.OpenStore(t.Context(), tc.store)
			if err == nil {
				_ = s.Close()
			}
			if strings.Contains(stderr.String(), uriPass) || err != nil && strings.Contains(err.Error(), uriPass) {
				t.Errorf("a message shows the password: %s / %v", stderr.String(), err)
			}
			if tc.want == "" {
				if code != 0 || err != nil {
					t.Errorf("config check exit %d (%s), OpenStore %v: want both to accept", code, stderr.String(), err)
				}
				return
			}
			if code != 2 || !strings.Contains(stderr.String(), "learn.store: "+tc.want) {
				t.Errorf("config check: exit %d, want 2 naming learn.store: %s\n%s", code, tc.want, stderr.String())
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("OpenStore: %v, want %q", err, tc.want)
			}
		})
	}
}
