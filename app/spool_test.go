package app

import (
	"context"
	"fmt"
	"testing"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/replay/location"
)

func eventIDs(t *testing.T, uri string) map[string]bool {
	t.Helper()
	ctx := context.Background()
	src, err := replay.OpenSource(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	err = src.Scan(ctx, func(line []byte) error {
		ev, err := replay.Decode(line)
		if err != nil {
			return err
		}
		switch e := ev.(type) {
		case *replay.EpisodeEvent:
			ids[e.ID] = true
		case *replay.StepEvent:
			ids[e.ID] = true
		case *replay.RewardEvent:
			ids[e.ID] = true
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", uri, err)
	}
	return ids
}

// TestSinksDownLoseNothing: a Redis sink stopped mid-run and an S3 sink refusing
// writes lose nothing. Redis's events spool and arrive once it is back, in the same
// process; S3's events are still spooled at shutdown and the next process delivers them.
func TestSinksDownLoseNothing(t *testing.T) {
	pr := testkit.StartRedis(t)
	s3 := newS3(t, "AKIDTEST", "secret")
	// One attempt per S3 write: the SDK's own retries of a 503 (three, with backoff of
	// up to seconds) only delay the shutdown's write and drain; what is under test is
	// the recorder's spool, which retries on its own.
	t.Setenv("AWS_MAX_ATTEMPTS", "1")
	dir := t.TempDir()
	fileURI := "file://" + dir + "/replay"
	redisURI := "redis://" + pr.Addr + "/0?stream=camproxy:replay"
	s3URI := "s3://replay/buf?region=us-east-1&endpoint=" + s3.URL
	mutate := func(c *config.Config) {
		c.Replay.Sinks = []string{fileURI, redisURI, s3URI}
		c.Replay.SpoolDir = dir + "/spool"
	}
	e := newEnv(t, mutate)

	pr.Kill()
	s3.Refuse(true)
	for i := range 10 {
		a := newAgent(fmt.Sprintf("Task %d while sinks are down", i), false)
		for range 3 {
			e.turn(a)
		}
	}
	spooled := func(uri string) int { return e.app.Recorder.Spooled()[location.Redact(uri)] }
	if !waitFor(t, func() bool { return spooled(redisURI) > 0 }) {
		t.Fatalf("redis down but nothing spooled: %v", e.app.Recorder.Spooled())
	}
	pr.Start()
	if !waitFor(t, func() bool { return spooled(redisURI) == 0 }) {
		n := spooled(redisURI)
		t.Fatalf("redis is back but %d events are still spooled", n)
	}
	ctx := context.Background() // shutdown's drain is bounded by go test's -timeout only
	if err := e.app.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// A new process on the same spool delivers S3's backlog once S3 accepts again.
	s3.Refuse(false)
	if len(eventIDs(t, s3URI)) != 0 {
		t.Fatal("S3 refused every write, yet it holds events")
	}
	cfg := testConfig(e.up, e.cam)
	mutate(cfg)
	next := startApp(t, cfg)
	waitFor(t, func() bool { return next.Recorder.Spooled()[location.Redact(s3URI)] == 0 }) // the count below says what is missing
	if err := next.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	want := eventIDs(t, fileURI)
	if len(want) != 10*(1+3) {
		t.Fatalf("file sink holds %d events, want 40", len(want))
	}
	for _, uri := range []string{redisURI, s3URI} {
		got := eventIDs(t, uri)
		for id := range want {
			if !got[id] {
				t.Fatalf("%s lost event %s (%d of %d delivered)", uri, id, len(got), len(want))
			}
		}
	}
	faultRow(t, "replay", "Redis sink killed, S3 refusing writes", "200s, no added error",
		fmt.Sprintf("%d/%d events in Redis after it came back, %d/%d in S3 via the next process's spool", len(eventIDs(t, redisURI)), len(want), len(eventIDs(t, s3URI)), len(want)))
}
