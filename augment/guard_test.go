package augment

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sony/gobreaker/v2"

	"github.com/camproxy/camproxy/metrics"
)

// funcAugmenter adapts a function to Augmenter.
type funcAugmenter func(ctx context.Context, req Request) (string, error)

func (f funcAugmenter) Augment(ctx context.Context, req Request) (string, error) { return f(ctx, req) }

// countingAugmenter counts calls and answers with whatever answer holds.
type countingAugmenter struct {
	calls  atomic.Int32
	answer atomic.Value // of func(context.Context) (string, error)
}

func newCounting(fn func(context.Context) (string, error)) *countingAugmenter {
	a := &countingAugmenter{}
	a.answer.Store(fn)
	return a
}

func (a *countingAugmenter) Augment(ctx context.Context, _ Request) (string, error) {
	a.calls.Add(1)
	return a.answer.Load().(func(context.Context) (string, error))(ctx)
}

var errBoom = errors.New("boom")

func failing(context.Context) (string, error)    { return "", errBoom }
func succeeding(context.Context) (string, error) { return "ctx", nil }

func newMetrics(t *testing.T) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	return metrics.New(reg), reg
}

// family gathers the metric family called name from reg (nil if absent). It
// reads the registry directly: prometheus/testutil would need a module that
// go.sum does not hold.
func family(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

// breakerGauge reads camproxy_breaker_state{augmenter="cam"}.
func breakerGauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mf := family(t, reg, "camproxy_breaker_state")
	if mf == nil {
		t.Fatal("camproxy_breaker_state not exported")
	}
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "augmenter" && l.GetValue() == "cam" {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatal("no breaker_state series for cam")
	return 0
}

// The guard's timing runs on synctest's clock: the deadline is checked to the
// nanosecond, and a loaded machine cannot stretch a sleep past OpenFor's window.

func TestGuardDeadlineWithAugmenterIgnoringCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release) // the bubble waits for the abandoned call to end
		hang := funcAugmenter(func(context.Context, Request) (string, error) {
			<-release // ignores ctx on purpose
			return "too late", nil
		})
		const timeout = 50 * time.Millisecond
		g := NewGuard("cam", hang, timeout, BreakerOptions{Failures: 5, OpenFor: time.Minute}, nil)
		start := time.Now()
		_, err := g.Augment(context.Background(), Request{Task: "t"})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		if d := time.Since(start); d != timeout {
			t.Errorf("returned after %v, want %v", d, timeout)
		}
	})
}

func TestGuardBreakerOpensAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, reg := newMetrics(t)
		a := newCounting(failing)
		const openFor = 150 * time.Millisecond
		g := NewGuard("cam", a, time.Second, BreakerOptions{Failures: 3, OpenFor: openFor}, m)
		if s := breakerGauge(t, reg); s != 0 {
			t.Fatalf("gauge at start = %v, want 0", s)
		}
		for i := 0; i < 3; i++ {
			if _, err := g.Augment(context.Background(), Request{}); !errors.Is(err, errBoom) {
				t.Fatalf("call %d: err = %v, want errBoom", i, err)
			}
		}
		if g.State() != gobreaker.StateOpen {
			t.Fatalf("state = %v after 3 failures, want open", g.State())
		}
		if s := breakerGauge(t, reg); s != 2 {
			t.Fatalf("gauge when open = %v, want 2", s)
		}
		for i := 0; i < 5; i++ {
			_, err := g.Augment(context.Background(), Request{})
			if !errors.Is(err, ErrOpen) || !errors.Is(err, gobreaker.ErrOpenState) {
				t.Fatalf("err = %v, want ErrOpen wrapping gobreaker.ErrOpenState", err)
			}
		}
		if n := a.calls.Load(); n != 3 {
			t.Fatalf("augmenter called %d times, want 3 (no calls while open)", n)
		}

		time.Sleep(openFor - time.Millisecond)
		if g.State() != gobreaker.StateOpen {
			t.Fatalf("state = %v just before OpenFor, want open", g.State())
		}
		time.Sleep(2 * time.Millisecond)
		if g.State() != gobreaker.StateHalfOpen {
			t.Fatalf("state = %v after OpenFor, want half-open", g.State())
		}
		if s := breakerGauge(t, reg); s != 1 {
			t.Fatalf("gauge when half-open = %v, want 1", s)
		}
		a.answer.Store(succeeding)
		if got, err := g.Augment(context.Background(), Request{}); err != nil || got != "ctx" {
			t.Fatalf("trial call = %q, %v", got, err)
		}
		if g.State() != gobreaker.StateClosed {
			t.Fatalf("state = %v after a successful trial, want closed", g.State())
		}
		if s := breakerGauge(t, reg); s != 0 {
			t.Fatalf("gauge when closed again = %v, want 0", s)
		}
		// Four calls reached the augmenter (3 failures, 1 trial); rejected ones are not timed.
		mf := family(t, reg, "camproxy_augment_duration_seconds")
		if mf == nil || len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetHistogram().GetSampleCount() != 4 {
			t.Errorf("augment_duration_seconds = %v, want one series with 4 samples", mf)
		}
	})
}

func TestGuardHalfOpenFailureReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newCounting(failing)
		g := NewGuard("cam", a, time.Second, BreakerOptions{Failures: 1, OpenFor: 50 * time.Millisecond}, nil)
		_, _ = g.Augment(context.Background(), Request{})
		time.Sleep(51 * time.Millisecond)
		if _, err := g.Augment(context.Background(), Request{}); !errors.Is(err, errBoom) {
			t.Fatalf("trial err = %v, want errBoom", err)
		}
		if g.State() != gobreaker.StateOpen {
			t.Fatalf("state = %v after a failed trial, want open", g.State())
		}
	})
}

func TestGuardCallerCancelIsNotAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newCounting(func(ctx context.Context) (string, error) {
			<-ctx.Done()
			return "", ctx.Err()
		})
		// The guard's deadline is far beyond the caller's, so only the caller ends these calls.
		g := NewGuard("cam", a, time.Minute, BreakerOptions{Failures: 1, OpenFor: time.Minute}, nil)

		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		if _, err := g.Augment(ctx, Request{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		// A caller deadline shorter than the guard's is the caller's too.
		short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancelShort()
		if _, err := g.Augment(short, Request{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		if g.State() != gobreaker.StateClosed {
			t.Fatalf("state = %v after caller cancellations, want closed", g.State())
		}

		// The guard's own deadline is a failure: with Failures 1 it opens.
		g2 := NewGuard("cam", a, 20*time.Millisecond, BreakerOptions{Failures: 1, OpenFor: time.Minute}, nil)
		if _, err := g2.Augment(context.Background(), Request{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		if g2.State() != gobreaker.StateOpen {
			t.Fatalf("state = %v after the guard's deadline, want open", g2.State())
		}
	})
}

func TestGuardEmptyIsAFailure(t *testing.T) {
	a := newCounting(func(context.Context) (string, error) { return "", ErrEmpty })
	g := NewGuard("cam", a, time.Second, BreakerOptions{Failures: 2, OpenFor: time.Minute}, nil)
	for i := 0; i < 2; i++ {
		if _, err := g.Augment(context.Background(), Request{}); !errors.Is(err, ErrEmpty) {
			t.Fatalf("err = %v, want ErrEmpty", err)
		}
	}
	if g.State() != gobreaker.StateOpen {
		t.Fatalf("state = %v after 2 empty answers, want open", g.State())
	}
}

func TestGuardPanicFailsOpen(t *testing.T) {
	a := funcAugmenter(func(context.Context, Request) (string, error) { panic("bad augmenter") })
	g := NewGuard("cam", a, time.Second, BreakerOptions{Failures: 5, OpenFor: time.Minute}, nil)
	if _, err := g.Augment(context.Background(), Request{}); err == nil {
		t.Fatal("panic did not become an error")
	}
}
