// Package redislog routes go-redis's own log lines into camproxy's slog logger.
//
// go-redis logs through one process-wide logger, to stderr and unstructured, a
// line per failed dial: during a Redis outage under load that is thousands of
// lines a second, none of them in the JSON the rest of the log is in. camproxy
// already says what an outage costs where it matters (the cache's rate-limited
// warning, the replay recorder's spool); go-redis's lines add only the detail.
package redislog

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Every is how often a line of one kind is logged at most; the ones left out in
// between are counted in the next.
const Every = 10 * time.Second

// Route sends go-redis's log lines to log at WARN, at most one per kind (its
// format string) per Every. go-redis's logger is the process's, so the owner of
// the process's logger calls this once; a later call replaces the route.
func Route(log *slog.Logger) {
	redis.SetLogger(New(log, Every, time.Now))
}

// Logger is go-redis's Logging interface, rate-limited per format string. go-redis
// logs from a fixed set of format strings, so the set of kinds is bounded.
type Logger struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time
	kinds sync.Map // format string → *kind
}

type kind struct {
	last    atomic.Int64 // unix nanoseconds of the last line logged
	dropped atomic.Int64 // lines left out since
}

// New is a Logger that logs to log at most one line per kind per every, reading
// the time from now.
func New(log *slog.Logger, every time.Duration, now func() time.Time) *Logger {
	return &Logger{log: log, every: every, now: now}
}

// Printf logs the line unless one of its kind was logged less than every ago.
func (l *Logger) Printf(ctx context.Context, format string, v ...any) {
	if !l.log.Enabled(ctx, slog.LevelWarn) {
		return
	}
	k, ok := l.kinds.Load(format)
	if !ok {
		k, _ = l.kinds.LoadOrStore(format, &kind{})
	}
	kd := k.(*kind)
	now := l.now().UnixNano()
	last := kd.last.Load()
	if last != 0 && now-last < int64(l.every) || !kd.last.CompareAndSwap(last, now) {
		kd.dropped.Add(1)
		return
	}
	attrs := []any{"component", "go-redis"}
	if n := kd.dropped.Swap(0); n > 0 {
		attrs = append(attrs, "suppressed", n, "suppressed_over", l.every)
	}
	l.log.WarnContext(ctx, strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "), attrs...)
}
