package proxy

import (
	"errors"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Graceful overload (issue 32): the data plane handles at most server.max_in_flight
// calls at once. A call past the limit waits for a slot, in arrival order, at most
// server.queue_timeout; then, or at once when as many calls wait as run, it is
// refused with 503 and Retry-After in its protocol's error shape, and
// camproxy_rejected_total{reason} counts it. A call that has a slot keeps it until
// its answer's last byte was written: a stream holds it to its end.
//
// Why a bound on calls at once: once the box is out of CPU, every call admitted on
// top only makes every call slower (more goroutines share the same cores, streams
// arrive in lumps); refusing the excess early, cheaply, keeps the admitted calls'
// latency bounded and the refused ones can go elsewhere or come back.

// Refusal reasons, the values of camproxy_rejected_total's reason label.
const (
	rejectQueueFull    = "queue_full"    // as many calls wait as run (or queue_timeout is 0)
	rejectQueueTimeout = "queue_timeout" // no slot freed up within server.queue_timeout
)

// inFlightPerCore is server.max_in_flight's default per GOMAXPROCS (DefaultMaxInFlight).
const inFlightPerCore = 256

// DefaultMaxInFlight is server.max_in_flight when it is 0: inFlightPerCore calls per
// GOMAXPROCS. docs/operations.md says how it was measured and how to size it.
func DefaultMaxInFlight() int { return inFlightPerCore * runtime.GOMAXPROCS(0) }

// retryAfter is the Retry-After of a refusal, in seconds: overload is momentary, and
// the SDKs add their own backoff and jitter on top.
const retryAfter = "1"

// shedShare is the share of the slots in use from which a new episode's context is
// not loaded (the CAM call is skipped; a cached context is still used): camproxy's
// own extras go before agents' calls do.
const shedShare = 0.875

// errShed: a new episode's context was not loaded (no CAM call) because the limit is
// near (admission.pressed); a cached context is still used. The call goes on
// unaugmented, its context source "shed".
var errShed = errors.New("context load shed: camproxy is near server.max_in_flight")

// admission is the limit: a slot is a value in slots. Goroutines blocked sending on
// a channel are woken in the order they blocked, so waiting calls get slots in
// arrival order.
type admission struct {
	slots  chan struct{} // capacity: max_in_flight
	wait   time.Duration // queue_timeout
	queued atomic.Int32
	shedAt int // slots in use from which pressed is true
}

func newAdmission(n int, wait time.Duration) *admission {
	if n <= 0 {
		n = DefaultMaxInFlight()
	}
	return &admission{slots: make(chan struct{}, n), wait: wait, shedAt: max(1, int(float64(n)*shedShare))}
}

// queuedGone is enter's answer when the client left while its call waited for a
// slot: the call is dropped, neither refused nor an upstream error.
const queuedGone = "client_gone"

// enter takes a slot, waiting for one at most queue_timeout. It returns "" once the
// call has its slot (leave gives it back), else why the call is refused, or
// queuedGone (gone(conn), checked every peerPoll while the call waits).
func (a *admission) enter(conn net.Conn, gone func(net.Conn) bool) string {
	select {
	case a.slots <- struct{}{}:
		return ""
	default:
	}
	if a.wait <= 0 {
		return rejectQueueFull
	}
	if int(a.queued.Add(1)) > cap(a.slots) {
		a.queued.Add(-1)
		return rejectQueueFull
	}
	defer a.queued.Add(-1)
	timeout := time.NewTimer(a.wait)
	defer timeout.Stop()
	// The client is watched by a goroutine of its own: a select that woke to poll
	// would leave the channel's queue and join it again at its end.
	left, stop := make(chan struct{}), make(chan struct{})
	defer close(stop)
	if conn != nil {
		go watchQueued(conn, gone, left, stop)
	}
	select {
	case a.slots <- struct{}{}:
		return ""
	case <-timeout.C:
		return rejectQueueTimeout
	case <-left:
		return queuedGone
	}
}

// watchQueued closes left once gone(conn) says the client left, until stop.
func watchQueued(conn net.Conn, gone func(net.Conn) bool, left, stop chan struct{}) {
	t := time.NewTicker(peerPoll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if gone(conn) {
				close(left)
				return
			}
		}
	}
}

// leave gives a slot back.
func (a *admission) leave() {
	if a != nil {
		<-a.slots
	}
}

// pressed says whether the limit is near: calls wait, or most slots are in use.
func (a *admission) pressed() bool {
	return a != nil && (a.queued.Load() > 0 || len(a.slots) >= a.shedAt)
}

// counts are the calls holding a slot and those waiting (camproxy_in_flight, _queued).
func (a *admission) counts() (inFlight, queued int) {
	return len(a.slots), int(a.queued.Load())
}

// slotKey is the user value of a request holding a slot: a streamed answer's relay
// takes it over (releasing it at the stream's end), so the handler does not give it
// back when it returns.
type slotKey struct{}

// admit runs a data-plane call under the limit: false when it was refused (answered
// 503 with Retry-After) or its client left while waiting. The caller then returns.
func (s *Server) admit(fc *fasthttp.RequestCtx) bool {
	if s.limit == nil {
		return true
	}
	reason := s.limit.enter(fc.Conn(), s.gone())
	if reason == "" {
		fc.SetUserValue(slotKey{}, s.limit)
		return true
	}
	rt, _ := s.lookup(fc)
	e := s.refusal(rt.Name, reason)
	if e == nil {
		fc.SetStatusCode(499)
		fc.SetConnectionClose()
		return false
	}
	writeError(fc, styleFor(fc), e) // the caller's SDK's shape, its protocol's upstream configured or not
	fc.Response.Header.Set("Retry-After", retryAfter)
	return false
}

// admitTurn runs a WebSocket turn under the limit, as an HTTP call is: false when it
// was refused (the turn ends with the refusal as its error event) or the client left.
// An open socket holds no slot between its turns: a session lasts as long as its
// agent works, mostly idle, and holding a slot for it would let idle sockets shut
// HTTP calls out.
func (sess *wsSession) admitTurn() bool {
	s := sess.s
	if s.limit == nil {
		return true
	}
	reason := s.limit.enter(&sess.conn, s.gone())
	if reason == "" {
		return true
	}
	if e := s.refusal(sess.rt.Name, reason); e != nil {
		sess.endTurn(wsErrorEvent(e))
	}
	return false
}

// refusal counts a call that got no slot and returns its answer; nil when its client
// left while it waited (counted as 499: no refusal, no upstream error).
func (s *Server) refusal(protocol, reason string) *Error {
	if reason == queuedGone {
		s.m.Requests.WithLabelValues(protocol, "", "", statusLabel(499)).Inc()
		return nil
	}
	s.m.Rejected.WithLabelValues(reason).Inc()
	s.m.Requests.WithLabelValues(protocol, "", "", statusLabel(http.StatusServiceUnavailable)).Inc()
	return overloaded(reason, s.limit)
}

// released gives back the slot of a call whose handler returned, unless its streamed
// answer's relay took it over (takeSlot).
func (s *Server) released(fc *fasthttp.RequestCtx) {
	if a, ok := fc.UserValue(slotKey{}).(*admission); ok {
		fc.RemoveUserValue(slotKey{})
		a.leave()
	}
}

// takeSlot hands the call's slot to its streamed answer, which gives it back when it
// ends; nil when the call holds none (a WebSocket turn, an in-memory test).
func takeSlot(fc *fasthttp.RequestCtx) *admission {
	a, ok := fc.UserValue(slotKey{}).(*admission)
	if ok {
		fc.RemoveUserValue(slotKey{})
	}
	return a
}

// overloaded is the refusal of a call past the limit.
func overloaded(reason string, a *admission) *Error {
	msg := "camproxy is overloaded: all " + strconv.Itoa(cap(a.slots)) + " slots (server.max_in_flight) are in use"
	if reason == rejectQueueTimeout {
		msg += " and none freed up within server.queue_timeout (" + a.wait.String() + ")"
	} else {
		msg += " and as many calls wait for one"
	}
	return &Error{Status: http.StatusServiceUnavailable, Type: "overloaded_error", Msg: msg + "; retry after " + retryAfter + "s"}
}

// gone is how the server tells that a client left (Server.peerGone, or peerClosed).
func (s *Server) gone() func(net.Conn) bool {
	if s.peerGone != nil {
		return s.peerGone
	}
	return peerClosed
}
