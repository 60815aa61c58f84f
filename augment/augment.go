// Package augment owns context augmentation: the Augmenter interface, the CAM
// augmenter, the deadline+circuit-breaker guard, and the two-tier context cache
// with singleflight.
//
// The pieces compose on the request path (DESIGN.md step 5) as
//
//	cache.Get(ctx, Key(name, cam.Version(), task), func(ctx) { return guard.Augment(ctx, req) })
//
// Augmentation is an optimisation, so every piece fails open: errors are returned
// for the caller to count and skip, never turned into a failed agent call here.
package augment

import (
	"context"
	"errors"
)

// Request is what an augmenter is asked about.
type Request struct {
	Task   string // the task text the context is for
	TaskID string // stable id of the task (X-CAM-Task-Id or a hash of the text)
	Model  string // the agent's model; informational, augmenters may ignore it
}

// Augmenter produces task-specific context.
type Augmenter interface {
	Augment(ctx context.Context, req Request) (string, error)
}

// ErrEmpty means the augmenter answered, but with nothing usable (no choices,
// blank content, or only reasoning). It counts as a breaker failure: a CAM that
// keeps answering nothing is as useless as one that is down.
var ErrEmpty = errors.New("augment: empty context")

// ErrOpen means the circuit breaker rejected the call without running the
// augmenter. Errors carrying it also wrap gobreaker.ErrOpenState or
// gobreaker.ErrTooManyRequests.
var ErrOpen = errors.New("augment: circuit breaker open")
