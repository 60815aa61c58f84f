package augment

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/camproxy/camproxy/metrics"
)

// DefaultTimeout is the Guard's deadline when none is configured: augmentation
// must never delay an agent's call without bound.
const DefaultTimeout = 3 * time.Second

// BreakerOptions configures the Guard's circuit breaker.
type BreakerOptions struct {
	Failures uint32        // consecutive failures that open the breaker; 0 acts as 1
	OpenFor  time.Duration // how long it stays open before a trial call; 0 = 60s
}

// Guard runs an Augmenter under a deadline and a circuit breaker, so that a slow
// or broken augmenter costs the agent at most one deadline, and, once it keeps
// failing, nothing at all.
type Guard struct {
	name    string
	a       Augmenter
	timeout time.Duration
	cb      *gobreaker.CircuitBreaker[string]
	m       *metrics.Metrics
	latency Latency // the calls that ran, for the dashboard
}

// NewGuard wraps a. name labels the metrics; m may be nil. timeout <= 0 means
// DefaultTimeout.
func NewGuard(name string, a Augmenter, timeout time.Duration, b BreakerOptions, m *metrics.Metrics) *Guard {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	g := &Guard{name: name, a: a, timeout: timeout, m: m}
	g.cb = gobreaker.NewCircuitBreaker[string](gobreaker.Settings{
		Name:        name,
		MaxRequests: 1, // one trial call in half-open
		Timeout:     b.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= b.Failures },
		IsExcluded: func(err error) bool {
			var gone callerGone
			// A store with nothing for this task is no sign of a broken augmenter.
			return errors.As(err, &gone) || errors.Is(err, ErrNoMatch)
		},
		OnStateChange: func(_ string, _, to gobreaker.State) { g.setStateGauge(to) },
	})
	g.setStateGauge(gobreaker.StateClosed)
	return g
}

// State reports the breaker state (and moves an expired open breaker to half-open).
func (g *Guard) State() gobreaker.State { return g.cb.State() }

// Latency is how long the augmenter's calls took, those the breaker let through.
func (g *Guard) Latency() LatencySnapshot { return g.latency.Snapshot() }

// Augment calls the augmenter unless the breaker is open, and returns by the
// deadline even if the augmenter ignores its context.
func (g *Guard) Augment(ctx context.Context, req Request) (string, error) {
	ran := false
	start := time.Now()
	s, err := g.cb.Execute(func() (string, error) {
		ran = true
		return g.call(ctx, req)
	})
	if ran {
		d := time.Since(start)
		g.latency.Observe(d)
		if g.m != nil {
			g.m.AugmentDuration.WithLabelValues(g.name).Observe(d.Seconds())
		}
	}
	var gone callerGone
	switch {
	case errors.As(err, &gone):
		return "", gone.err
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		return "", fmt.Errorf("%w: %s: %w", ErrOpen, g.name, err)
	}
	return s, err
}

// callerGone marks a failure caused by the caller's own context (the client went
// away, or its deadline was shorter than ours): not the augmenter's fault, so the
// breaker excludes it.
type callerGone struct{ err error }

func (e callerGone) Error() string { return e.err.Error() }
func (e callerGone) Unwrap() error { return e.err }

// result is one augmenter answer, passed back from its goroutine.
type result struct {
	s   string
	err error
}

// call runs the augmenter in its own goroutine so that the deadline holds even
// for an augmenter that ignores ctx; such a goroutine finishes in the background.
func (g *Guard) call(parent context.Context, req Request) (string, error) {
	ctx, cancel := context.WithTimeout(parent, g.timeout)
	defer cancel()
	done := make(chan result, 1) // buffered: a late answer must not block forever
	go func() { done <- g.run(ctx, req) }()

	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		select {
		case r = <-done: // an answer that raced the deadline still counts
		default:
			r.err = fmt.Errorf("augment: %s: %w", g.name, ctx.Err())
		}
	}
	if r.err != nil && parent.Err() != nil {
		return "", callerGone{err: r.err}
	}
	return r.s, r.err
}

// run calls the augmenter and turns a panic into an error: a buggy augmenter
// must fail open, not take the process down from a goroutine nobody recovers.
func (g *Guard) run(ctx context.Context, req Request) (r result) {
	defer func() {
		if p := recover(); p != nil {
			r = result{err: fmt.Errorf("augment: %s: panic: %v", g.name, p)}
		}
	}()
	s, err := g.a.Augment(ctx, req)
	return result{s: s, err: err}
}

// setStateGauge publishes the breaker state; the gobreaker State values (closed
// 0, half-open 1, open 2) are the metric's contract values.
func (g *Guard) setStateGauge(s gobreaker.State) {
	if g.m != nil {
		g.m.BreakerState.WithLabelValues(g.name).Set(float64(s))
	}
}
