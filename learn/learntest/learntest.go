// Package learntest owns the fake optimiser step the learner's tests share (those of
// learn/online and the App's end-to-end ones): it edits the playbook the way a test
// asks and records what it was given.
package learntest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/camproxy/camproxy/learn"
	"github.com/camproxy/camproxy/playbook"
)

// Mode is what Step does to the playbook.
type Mode int

const (
	// AddRule adds an entry naming the version (learnt-N, "Rule learnt for version
	// N."): a new context.
	AddRule Mode = iota
	// CountsOnly tags the first entry helpful: the same context.
	CountsOnly
	// NoChange applies nothing.
	NoChange
)

// Call is what one step was given.
type Call struct {
	Base    *playbook.Playbook // a copy
	Version int
	Batch   learn.Batch
}

// Step is a fake optimiser step; its zero value adds a rule. Change its fields with
// Set while a learner may call it.
type Step struct {
	mu    sync.Mutex
	Mode  Mode
	Err   error                           // returned by every step while set
	Wait  func(ctx context.Context) error // runs first when set (a step in flight)
	calls []Call
}

// Step has online.StepFunc's signature.
func (s *Step) Step(ctx context.Context, base *playbook.Playbook, version int, b learn.Batch) (*learn.StepResult, error) {
	s.mu.Lock()
	s.calls = append(s.calls, Call{Base: base.Clone(), Version: version, Batch: b})
	mode, err, wait := s.Mode, s.Err, s.Wait
	s.mu.Unlock()
	if wait != nil {
		if err := wait(ctx); err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	pb := base.Clone()
	switch mode {
	case CountsOnly:
		pb.Entries[0].Helpful++
		return &learn.StepResult{Playbook: pb, Applied: 1, Summary: "tagged"}, nil
	case NoChange:
		return &learn.StepResult{Playbook: pb, Summary: "nothing to change"}, nil
	}
	pb.Entries = append(pb.Entries, playbook.Entry{ID: fmt.Sprintf("learnt-%d", version), Section: "learnt",
		Content: fmt.Sprintf("Rule learnt for version %d.", version), Version: version})
	return &learn.StepResult{Playbook: pb, Applied: 1, Summary: fmt.Sprintf("summary of step %d", b.Iteration)}, nil
}

// Calls are the steps so far, oldest first.
func (s *Step) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Set changes the step's fields under its lock.
func (s *Step) Set(fn func(s *Step)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s)
}
