package proxy

import (
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// watchedCall is a call watched by s whose client leaves when left is set.
type watchedCall struct {
	f    forwarding
	conn net.Conn
}

func watchCalls(t *testing.T, s *Server, n int) ([]*watchedCall, *sync.Map) {
	t.Helper()
	var left sync.Map // net.Conn → true
	s.peerGone = func(c net.Conn) bool { _, ok := left.Load(c); return ok }
	calls := make([]*watchedCall, n)
	for i := range calls {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		c := &watchedCall{conn: a}
		c.f.call = &c.f.upc
		calls[i] = c
	}
	return calls, &left
}

// TestWatchChecksEveryCall: the server's one timer checks every watched call each
// peerPoll: a client that leaves is noticed at the next check, whichever call started
// when, and its call is cancelled as gone; a shutdown cancels every call still
// watched; a call whose watch stopped is not cancelled, even once its client left.
func TestWatchChecksEveryCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newForwardServer()
		defer s.cancelBase()
		calls, left := watchCalls(t, s, 4)
		start := time.Now()
		s.watch(&calls[0].f.w, calls[0].conn, calls[0].f.call)
		time.Sleep(peerPoll / 3)
		for _, c := range calls[1:] {
			s.watch(&c.f.w, c.conn, c.f.call)
		}
		calls[2].f.stop()
		left.Store(calls[1].conn, true) // left before the first check
		left.Store(calls[2].conn, true) // left, but its call no longer watched
		synctest.Wait()
		time.Sleep(peerPoll - time.Since(start) - time.Nanosecond)
		if err := calls[1].f.call.cancelled(); err != nil {
			t.Fatalf("cancelled before the first check: %v", err)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if err := calls[1].f.call.cancelled(); !errors.Is(err, errClientGone) {
			t.Fatalf("the call whose client left: %v at the first check, want errClientGone", err)
		}
		for _, i := range []int{0, 2, 3} {
			if err := calls[i].f.call.cancelled(); err != nil {
				t.Fatalf("call %d cancelled: %v", i, err)
			}
		}
		s.cancelBase()
		time.Sleep(peerPoll)
		synctest.Wait()
		for i, c := range calls {
			want := errShutdown
			switch i {
			case 1:
				want = errClientGone // its cause stays the first
			case 2:
				want = nil
			}
			if err := c.f.call.cancelled(); !errors.Is(err, want) || (want == nil) != (err == nil) {
				t.Fatalf("call %d after shutdown: %v, want %v", i, err, want)
			}
		}
		for _, c := range calls {
			c.f.stop()
		}
	})
}

// TestWatchIdleStopsTimer: once no call is watched, the check that finds none does
// not set the timer again: an idle server is not woken every peerPoll. The next
// call sets it again.
func TestWatchIdleStopsTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newForwardServer()
		defer s.cancelBase()
		calls, left := watchCalls(t, s, 2)
		var checks sync.Map
		gone := s.peerGone
		s.peerGone = func(c net.Conn) bool { n, _ := checks.LoadOrStore(c, new(int)); *n.(*int)++; return gone(c) }
		s.watch(&calls[0].f.w, calls[0].conn, calls[0].f.call)
		time.Sleep(peerPoll + peerPoll/2)
		calls[0].f.stop()
		time.Sleep(peerPoll)
		synctest.Wait()
		s.watching.mu.Lock()
		armed, n := s.watching.armed, len(s.watching.calls)
		s.watching.mu.Unlock()
		if armed || n != 0 {
			t.Fatalf("idle: timer armed %v with %d calls watched", armed, n)
		}
		s.watch(&calls[1].f.w, calls[1].conn, calls[1].f.call)
		left.Store(calls[1].conn, true)
		time.Sleep(peerPoll)
		synctest.Wait()
		if err := calls[1].f.call.cancelled(); !errors.Is(err, errClientGone) {
			t.Fatalf("a call watched after an idle spell: %v, want errClientGone at its first check", err)
		}
		if n, _ := checks.Load(calls[0].conn); *n.(*int) != 1 {
			t.Fatalf("the first call was checked %d times, want 1 (one check while watched)", *n.(*int))
		}
		calls[1].f.stop()
	})
}

// TestWatchListIndexes: calls added and removed in any order leave the list holding
// exactly the calls still watched, each at its index.
func TestWatchListIndexes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newForwardServer()
		defer s.cancelBase()
		calls, _ := watchCalls(t, s, 300)
		rng := rand.New(rand.NewPCG(3, 4))
		watched := map[*watcher]bool{}
		for range 5000 {
			c := calls[rng.IntN(len(calls))]
			w := &c.f.w
			if watched[w] {
				c.f.stop()
				delete(watched, w)
			} else {
				*w = watcher{}
				s.watch(w, c.conn, c.f.call)
				watched[w] = true
			}
		}
		s.watching.mu.Lock()
		defer s.watching.mu.Unlock()
		if len(s.watching.calls) != len(watched) {
			t.Fatalf("%d calls in the list, %d watched", len(s.watching.calls), len(watched))
		}
		for i, w := range s.watching.calls {
			if !watched[w] || w.index != i {
				t.Fatalf("list[%d]: watched %v, index %d", i, watched[w], w.index)
			}
		}
	})
}
