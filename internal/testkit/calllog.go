package testkit

import (
	"sync"
	"sync/atomic"
)

// callLog is what every fake keeps of its calls: the requests it received and the
// answers cut short because the caller went away.
type callLog[T any] struct {
	logMu     sync.Mutex
	calls     []T
	keep      int // 0 = every call; else only the last keep (long runs: the soak)
	cancelled atomic.Int64
	Cancelled chan struct{} // receives when a request's context is cancelled mid-answer
}

func newCallLog[T any]() callLog[T] { return callLog[T]{Cancelled: make(chan struct{}, 16)} }

func (l *callLog[T]) add(c T) {
	l.logMu.Lock()
	defer l.logMu.Unlock()
	l.calls = append(l.calls, c)
	if l.keep > 0 && len(l.calls) > 2*l.keep {
		l.calls = append(l.calls[:0:0], l.calls[len(l.calls)-l.keep:]...)
	}
}

// KeepLast bounds the log to about the last n calls (0 = all), so that a long run's
// memory is camproxy's, not the fake's.
func (l *callLog[T]) KeepLast(n int) {
	l.logMu.Lock()
	defer l.logMu.Unlock()
	l.keep = n
}

// Requests returns what the fake has received so far, refused requests included.
func (l *callLog[T]) Requests() []T {
	l.logMu.Lock()
	defer l.logMu.Unlock()
	return append([]T(nil), l.calls...)
}

// Last returns the last request received (the zero value before any).
func (l *callLog[T]) Last() T {
	l.logMu.Lock()
	defer l.logMu.Unlock()
	var zero T
	if len(l.calls) == 0 {
		return zero
	}
	return l.calls[len(l.calls)-1]
}

// CancelledCount is how many answers were cut short because the caller went away.
func (l *callLog[T]) CancelledCount() int64 { return l.cancelled.Load() }

func (l *callLog[T]) noteCancel() {
	l.cancelled.Add(1)
	select {
	case l.Cancelled <- struct{}{}:
	default:
	}
}
