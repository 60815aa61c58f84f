package testkit

import (
	"bytes"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/internal/redislog"
)

// Logger is a slog logger for a camproxy under test: its lines go to the test's
// own output, so go test shows them under the test that failed (and with -v),
// never interleaved on stderr with every other test's. Lines logged after the test
// ended (a goroutine outliving its server's shutdown) are dropped: testing panics
// on output from a finished test.
func Logger(t testing.TB, level slog.Level) *slog.Logger {
	w := &testWriter{out: t.Output()}
	t.Cleanup(w.close) // registered before the test's servers, so it runs after their shutdown
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type testWriter struct {
	mu   sync.Mutex
	out  io.Writer
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(p), nil
	}
	return w.out.Write(p)
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// QuietRedis drops go-redis's log lines (it logs through one process-wide logger, a
// line per failed dial, to stderr). A test package whose tests stop Redis or dial a
// closed port on purpose calls it from an init: those lines are the expected
// outcome, and each test checks the errors it got itself. (app routes them into
// its own logger; a test of app needs nothing.)
func QuietRedis() { redis.SetLogger(redislog.New(slog.New(slog.DiscardHandler), time.Hour, time.Now)) }

// FaultRow logs one row of the fault matrix: `make faults` (scripts/faults.sh) runs the
// fault tests verbosely and prints these rows as a table. The outcomes are what the
// test measured, never fixed text.
func FaultRow(t testing.TB, component, fault, agent, rec string) {
	t.Helper()
	t.Logf("FAULT\t%s\t%s\t%s\t%s", component, fault, agent, rec)
}

// SyncBuffer is a bytes.Buffer safe for writers on several goroutines (a logger, a
// decoder's goroutine) and a test reading it meanwhile.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
