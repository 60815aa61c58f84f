package proxy

import (
	"errors"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
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

// The limit adapts to the CPU: server.max_in_flight is its ceiling. Calls in flight
// are a poor measure of load for agents' streams, which mostly wait on the model, so
// the ceiling is high; what says the box cannot keep up is the CPU itself: goroutines
// that are ready to run wait for a core (the Go scheduler's latency). While they wait
// long (cpuBusy at the 90th percentile over adaptEvery), the limit comes down to 3/4
// of the calls in flight, never below minPerCore per GOMAXPROCS; while they do not
// (cpuIdle), it climbs back by an eighth at a time (an eighth over the calls in flight
// when it is under them). Additive increase, multiplicative decrease, as TCP finds a
// link's rate: admitted calls keep their latency instead of every call slowing down.
const (
	adaptEvery = 100 * time.Millisecond
	cpuBusy    = 10 * time.Millisecond
	cpuIdle    = 2 * time.Millisecond
	minPerCore = 64
)

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

// admission is the limit: calls in flight, at most limit; the calls past it wait in
// arrival order (a FIFO of waiters, each woken by its own channel).
type admission struct {
	mu       sync.Mutex
	limit    int       // calls admitted at once now: max, or less while the CPU is saturated
	max      int       // server.max_in_flight
	min      int       // the limit never comes down below it
	waiters  []*waiter // first come, first served
	wait     time.Duration
	queued   atomic.Int32 // len(waiters), read without the lock (pressed)
	inFlight atomic.Int32 // calls holding a slot: written under mu, read without it (pressed, counts)
	shedAt   atomic.Int32 // calls in flight from which pressed is true (shedShare of limit)

	// cpuWait is how long ready goroutines waited for a core lately (the 90th
	// percentile since its last call); nil: the limit never adapts.
	cpuWait func() time.Duration
	adapted atomic.Int64 // when the limit was last adapted (UnixNano)
	ticking bool         // under mu: tick runs (calls wait)
}

// waiter is a call waiting for a slot; ready is closed when it got one.
type waiter struct {
	ready   chan struct{}
	granted bool // under admission.mu
}

func newAdmission(n int, wait time.Duration, cpuWait func() time.Duration) *admission {
	if n <= 0 {
		n = DefaultMaxInFlight()
	}
	a := &admission{max: n, limit: n, min: min(n, minPerCore*runtime.GOMAXPROCS(0)), wait: wait, cpuWait: cpuWait}
	a.setShed()
	return a
}

func (a *admission) setShed() { a.shedAt.Store(int32(max(1, int(float64(a.limit)*shedShare)))) }

// queuedGone is enter's answer when the client left while its call waited for a
// slot: the call is dropped, neither refused nor an upstream error.
const queuedGone = "client_gone"

// enter takes a slot, waiting for one at most queue_timeout. It returns "" once the
// call has its slot (leave gives it back), else why the call is refused, or
// queuedGone (gone(conn), checked every peerPoll while the call waits).
func (a *admission) enter(conn net.Conn, gone func(net.Conn) bool) string {
	a.adapt()
	a.mu.Lock()
	if int(a.inFlight.Load()) < a.limit && len(a.waiters) == 0 {
		a.take()
		a.mu.Unlock()
		return ""
	}
	if a.wait <= 0 || len(a.waiters) >= a.limit {
		a.mu.Unlock()
		return rejectQueueFull
	}
	w := &waiter{ready: make(chan struct{})}
	a.waiters = append(a.waiters, w)
	a.queued.Store(int32(len(a.waiters)))
	if a.cpuWait != nil && !a.ticking {
		a.ticking = true
		go a.tick()
	}
	a.mu.Unlock()

	timeout := time.NewTimer(a.wait)
	defer timeout.Stop()
	// The client is watched by a goroutine of its own, so that the wait is one select.
	left, stop := make(chan struct{}), make(chan struct{})
	defer close(stop)
	if conn != nil {
		go watchQueued(conn, gone, left, stop)
	}
	reason := ""
	select {
	case <-w.ready:
		return ""
	case <-timeout.C:
		reason = rejectQueueTimeout
	case <-left:
		reason = queuedGone
	}
	a.mu.Lock()
	if w.granted { // a slot came as the wait ended
		a.mu.Unlock()
		if reason == queuedGone {
			a.leave()
			return reason
		}
		return ""
	}
	if i := slices.Index(a.waiters, w); i >= 0 {
		a.waiters = slices.Delete(a.waiters, i, i+1)
	}
	a.queued.Store(int32(len(a.waiters)))
	a.mu.Unlock()
	return reason
}

// take gives a call a slot (under mu).
func (a *admission) take() {
	a.inFlight.Add(1)
}

// grant hands the free slots to the waiters, first come first served (under mu).
func (a *admission) grant() {
	for int(a.inFlight.Load()) < a.limit && len(a.waiters) > 0 {
		w := a.waiters[0]
		a.waiters[0] = nil
		a.waiters = a.waiters[1:]
		w.granted = true
		a.take()
		close(w.ready)
	}
	a.queued.Store(int32(len(a.waiters)))
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
	if a == nil {
		return
	}
	a.mu.Lock()
	a.inFlight.Add(-1)
	a.grant()
	a.mu.Unlock()
}

// adapt moves the limit by the CPU (see adaptEvery), at most once per adaptEvery,
// on the calls' own path and, while calls wait, from tick: an idle server does nothing. After a
// longer pause the waits measured are not this server's doing: they are only taken
// as the start of the next interval.
func (a *admission) adapt() {
	if a.cpuWait == nil {
		return
	}
	now := time.Now().UnixNano()
	last := a.adapted.Load()
	if now-last < int64(adaptEvery) || !a.adapted.CompareAndSwap(last, now) {
		return
	}
	w := a.cpuWait()
	if now-last > 2*int64(adaptEvery) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case w >= cpuBusy:
		a.limit = max(a.min, min(a.limit, int(a.inFlight.Load()))*3/4)
	case w <= cpuIdle && a.limit < a.max:
		// An eighth over the calls that ran idle, when a cut left the limit under them:
		// streams that hold their slots (agents' idle streams) do not drain down to it,
		// and climbing from it an eighth at a time would take as many idle intervals
		// as the cuts took, losing to every busy one in between, while all new calls
		// are refused.
		base := max(a.limit, int(a.inFlight.Load()))
		a.limit = min(a.max, base+max(1, base/8))
		a.grant()
	default:
		return
	}
	a.setShed()
}

// tick adapts the limit every adaptEvery while calls wait, then returns. Arrivals alone
// do not: when the slots are held by long streams and every client waits in the queue
// (or backs off after a refusal), no call arrives for longer than two intervals, so
// the limit a saturated moment lowered under the calls in flight would never climb
// back, and every call would be refused while the CPU sits idle.
func (a *admission) tick() {
	t := time.NewTicker(adaptEvery)
	defer t.Stop()
	for range t.C {
		a.adapt()
		a.mu.Lock()
		if len(a.waiters) == 0 {
			a.ticking = false
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
	}
}

// pressed says whether the limit is near: calls wait, or most slots are in use.
func (a *admission) pressed() bool {
	return a != nil && (a.queued.Load() > 0 || a.inFlight.Load() >= a.shedAt.Load())
}

// counts are the calls holding a slot and those waiting (camproxy_in_flight, _queued).
func (a *admission) counts() (inFlight, queued int) {
	return int(a.inFlight.Load()), int(a.queued.Load())
}

// gauges are camproxy_in_flight, _queued and _in_flight_limit.
func (a *admission) gauges() (inFlight, queued, limit int) {
	inFlight, queued = a.counts()
	return inFlight, queued, a.current()
}

// current is the limit now.
func (a *admission) current() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.limit
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
	n := a.current()
	msg := "camproxy is overloaded: all " + strconv.Itoa(n) + " slots (server.max_in_flight " + strconv.Itoa(a.max) + ") are in use"
	if n < a.max {
		msg = "camproxy is overloaded: its CPU is saturated and all " + strconv.Itoa(n) + " slots it allows now (server.max_in_flight " + strconv.Itoa(a.max) + ") are in use"
	}
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
