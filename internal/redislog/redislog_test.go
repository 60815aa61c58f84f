package redislog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLoggerRateLimitsPerKind: a flood of one kind of line becomes one line per
// interval, which counts the ones left out; another kind is not held back by it.
func TestLoggerRateLimitsPerKind(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(1000, 0)
	l := New(slog.New(slog.NewTextHandler(&out, nil)), 10*time.Second, func() time.Time { return now })
	ctx := context.Background()
	const dial = "redis: connection pool: failed to dial after %d attempts: %v"
	for range 100 {
		l.Printf(ctx, dial, 5, "connection refused")
	}
	l.Printf(ctx, "redis: connection pool: failed to get a usable connection after %d attempts", 3)
	now = now.Add(10 * time.Second)
	l.Printf(ctx, dial, 5, "connection refused")

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), out.String())
	}
	for i, want := range []string{
		`level=WARN msg="connection pool: failed to dial after 5 attempts: connection refused" component=go-redis` + "\n",
		`msg="connection pool: failed to get a usable connection after 3 attempts" component=go-redis` + "\n",
		`msg="connection pool: failed to dial after 5 attempts: connection refused" component=go-redis suppressed=99 suppressed_over=10s` + "\n",
	} {
		if !strings.Contains(lines[i]+"\n", want) {
			t.Errorf("line %d = %s\nwant it to contain %s", i, lines[i], want)
		}
	}
}

// TestLoggerConcurrent: go-redis logs from every pool goroutine at once; exactly
// one line gets through per interval.
func TestLoggerConcurrent(t *testing.T) {
	var out syncBuffer
	l := New(slog.New(slog.NewTextHandler(&out, nil)), time.Hour, time.Now)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				l.Printf(context.Background(), "redis: dial %s", "x")
			}
		})
	}
	wg.Wait()
	if n := strings.Count(out.String(), "\n"); n != 1 {
		t.Fatalf("%d lines, want 1:\n%s", n, out.String())
	}
}

// TestLoggerDisabled: a logger above WARN costs no formatting.
func TestLoggerDisabled(t *testing.T) {
	var out bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelError})), time.Hour, time.Now)
	l.Printf(context.Background(), "redis: %v", "x")
	if out.Len() != 0 {
		t.Fatalf("logged %q above its level", out.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
