package testkit

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// waitMargin is what Eventually leaves of go test's -timeout, so that a condition
// that never holds fails the test with its reason instead of the whole binary
// panicking with every goroutine's stack.
const waitMargin = 10 * time.Second

// Eventually polls cond until it holds. It has no bound of its own: how long a
// condition takes on a loaded machine says nothing about the code, so the only
// bound is go test's -timeout (less a margin), past which the test fails with
// what. Use it for a state that follows an event the test cannot observe
// directly (a metric updated after a response is written, a background flush);
// wait on a channel wherever there is one.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !Poll(t, cond) {
		t.Fatalf("never happened (waited until go test's -timeout was near): %s", what)
	}
}

// Poll is Eventually for callers that report the failure themselves: it returns
// whether cond came to hold before go test's -timeout (less a margin).
func Poll(t testing.TB, cond func() bool) bool {
	t.Helper()
	end, bounded := deadline(t)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		if cond() {
			return true
		}
		if bounded && time.Now().After(end) {
			return false
		}
		time.Sleep(pause)
	}
}

func deadline(t testing.TB) (time.Time, bool) {
	d, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return time.Time{}, false
	}
	end, bounded := d.Deadline()
	if !bounded {
		return time.Time{}, false
	}
	if m := time.Until(end) / 10; m < waitMargin {
		return end.Add(-m), true // a short -timeout: keep most of it for waiting
	}
	return end.Add(-waitMargin), true
}

// Await receives from ch. Like Eventually it has no bound of its own but go
// test's -timeout (less a margin), past which the test fails with what: a value
// that never comes is a hang, and how long one takes on a loaded machine is not.
func Await[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	var expired <-chan time.Time
	if end, bounded := deadline(t); bounded {
		timer := time.NewTimer(time.Until(end))
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case v := <-ch:
		return v
	case <-expired:
		t.Fatalf("never happened (waited until go test's -timeout was near): %s", what)
		panic("unreachable")
	}
}

// Patience is how long a wait in the test may last: until go test's -timeout less
// a margin (an hour when there is none). It is for a goroutine the test started that
// must give up on its own, in time.After(testkit.Patience(t)), and report.
func Patience(t testing.TB) time.Duration {
	if end, bounded := deadline(t); bounded {
		return time.Until(end)
	}
	return time.Hour
}

// MetricLines is the lines of admin's /metrics (admin is its base URL) that start
// with name: a family's samples, for a test to read or print.
func MetricLines(t testing.TB, admin, name string) string {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Concurrently runs f on each case as a subtest named name(case), all at once, and
// returns when every one has ended. It is for cases that wait (on a timeout, a
// breaker's open window, a failover, a child process) rather than compute: t.Parallel
// would run them -parallel (GOMAXPROCS by default) at a time, and the waits add up.
// A case that needs the CPU belongs in t.Parallel.
func Concurrently[C any](t *testing.T, cases []C, name func(C) string, f func(*testing.T, C)) {
	t.Helper()
	var wg sync.WaitGroup
	for _, c := range cases {
		wg.Go(func() { t.Run(name(c), func(t *testing.T) { f(t, c) }) })
	}
	wg.Wait()
}
