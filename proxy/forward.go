package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/protocol/registry"
)

// tee receives a copy of each response chunk before the client does, so the answer can
// be decoded (and the episode advanced) without holding the stream back.
type tee interface {
	// begin gives the upstream's status and Content-Encoding, before any chunk.
	begin(status int, contentEncoding string)
	chunk(p []byte) // the bytes as relayed, still encoded
	// done is called once, after the last byte was relayed or the stream failed.
	done(status int, err error, ttfb time.Duration)
}

type forwardResult struct {
	status int
	ttfb   time.Duration
	err    error
}

// forward sends body upstream and relays the answer to the client: buffered for plain
// JSON answers, chunk by chunk for streams. t (optional) sees every byte. For streams
// forward returns before the body is relayed; t.done reports the end. Which
// connection or socket makes the call (Upstream.roundTrip) is no concern of
// forward's: every rule about time, a departed client and a broken answer is here,
// once.
func (s *Server) forward(fc *fasthttp.RequestCtx, up *Upstream, body []byte, identity bool, p *registry.Protocol, t tee) forwardResult {
	f := &forwarding{s: s, fc: fc, up: up, p: p, t: t}
	f.call = &f.upc
	s.watch(&f.w, fc.Conn(), f.call)
	start := time.Now()
	ex, err := up.roundTrip(s.base, f.call, fc, body, identity)
	f.ttfb = time.Since(start)
	if err != nil {
		f.stop()
		return f.fail(err, "no first byte within "+up.FirstByteTimeout.String()+" (first_byte_timeout)")
	}
	f.ex = ex
	s.stats.upstreamTTFB(s.m, up.Name).Observe(f.ttfb.Seconds())
	h := ex.head()
	if h.StatusCode() == http.StatusSwitchingProtocols {
		// camproxy never asks for an upgrade (Upgrade is hop-by-hop): whatever the
		// upstream now speaks on this connection is no answer to relay, and the
		// connection can carry no other call.
		f.stop()
		ex.release(false)
		return f.fail(&Error{Status: http.StatusBadGateway, Type: "upstream_error",
			Msg: "upstream " + up.Base.Host + " answered 101 Switching Protocols to a call that asked for no protocol switch"}, "")
	}
	if bodiless(fc.Request.Header.IsHead(), h.StatusCode()) || !p.Streamed(fcCall{fc}, h.ContentType()) {
		return f.deliver()
	}
	return f.stream()
}

// forwarding is one forward: the client's call, its upstream and protocol, the tee,
// the upstream call and, once its head arrived, its exchange.
type forwarding struct {
	s    *Server
	fc   *fasthttp.RequestCtx
	up   *Upstream
	p    *registry.Protocol
	t    tee // nil: nobody sees the answer
	call *upCall
	ex   exchange      // nil until the head arrived
	ttfb time.Duration // until the head arrived
	// upc and w are call's upCall and the watcher of its client, held here so
	// that a call allocates them with the forwarding, not one by one.
	upc upCall
	w   watcher
}

// stop stops watching the client (Server.watch).
func (f *forwarding) stop() { f.w.stop() }

// watch makes w cancel call when its client goes away or shutdown's grace period is
// over, even while nothing is being written; w.stop stops watching. The calls being
// watched are checked together, every peerPoll, by one timer of the server's that
// runs only while a call is watched (watchList): a call costs a place in a list,
// not a timer of its own to start and stop, and a client that leaves is still
// noticed at the next check, at most peerPoll later.
func (s *Server) watch(w *watcher, conn net.Conn, call *upCall) {
	gone := s.peerGone
	if gone == nil {
		gone = peerClosed
	}
	w.conn, w.gone, w.base, w.call = conn, gone, s.base, call
	s.watching.add(w)
}

type watcher struct {
	conn  net.Conn // nil: no peer to watch (in-memory tests)
	gone  func(net.Conn) bool
	base  context.Context
	call  *upCall
	list  *watchList
	index int // in list.calls while watched; guarded by list.mu
	// mu orders a check with stop: once stop returned, the call is not cancelled.
	mu        sync.Mutex
	stopped   bool
	cancelled bool // by a check: later checks have nothing to do
}

// check cancels the call when its client left or the shutdown's grace period is over.
func (w *watcher) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.stopped || w.cancelled:
	case w.base.Err() != nil:
		w.call.cancel(errShutdown)
		w.cancelled = true
	case w.conn != nil && w.gone(w.conn):
		w.call.cancel(errClientGone)
		w.cancelled = true
	}
}

func (w *watcher) stop() {
	w.mu.Lock()
	stopped := w.stopped
	w.stopped = true
	w.mu.Unlock()
	if !stopped && w.list != nil {
		w.list.remove(w)
	}
}

// watchList is the calls a server watches (Server.watch) and the one timer that
// checks them every peerPoll while there are any. A call that ends before the next
// check (most do) is only added and removed: a lock, an append and a swap.
type watchList struct {
	mu      sync.Mutex
	calls   []*watcher // unordered: each knows its index
	t       *time.Timer
	armed   bool       // t is set to fire: stays so while calls are watched
	checked []*watcher // the calls of the check under way, a reused slice
}

func (l *watchList) add(w *watcher) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w.list, w.index = l, len(l.calls)
	l.calls = append(l.calls, w)
	if l.armed {
		return
	}
	l.armed = true
	if l.t == nil {
		l.t = time.AfterFunc(peerPoll, l.check)
	} else {
		l.t.Reset(peerPoll)
	}
}

func (l *watchList) remove(w *watcher) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := len(l.calls) - 1
	moved := l.calls[last]
	l.calls[w.index], moved.index = moved, w.index
	l.calls[last] = nil
	l.calls = l.calls[:last]
	if cap(l.calls) > 1024 && len(l.calls) < cap(l.calls)/8 {
		l.calls = append([]*watcher(nil), l.calls...) // a burst's array is not kept
	}
}

// check checks every watched call, outside the list's lock (a check may peek at a
// socket), and sets the timer again while calls are watched.
func (l *watchList) check() {
	l.mu.Lock()
	batch := append(l.checked[:0], l.calls...)
	l.checked = nil
	l.mu.Unlock()
	for _, w := range batch {
		w.check()
	}
	clear(batch)
	l.mu.Lock()
	defer l.mu.Unlock()
	if cap(batch) <= 1024 {
		l.checked = batch
	}
	if len(l.calls) > 0 {
		l.t.Reset(peerPoll)
	} else {
		l.armed = false
	}
}

// idleMsg says which rule cut an answer that stopped coming.
func idleMsg(up *Upstream) string {
	return "upstream sent nothing for " + up.IdleTimeout.String() + " (idle_timeout)"
}

// callError is what the agent is told of a call that failed before anything was
// relayed; nil when the client left (there is nobody to tell). what names the
// deadline that was running. An *Error (from the round trip, or built by the caller)
// already says its cause: it is told as it is, the cause named once.
func callError(up *Upstream, call *upCall, err error, what string) *Error {
	var e *Error
	if !errors.As(err, &e) {
		err = call.failure(err, what)
	}
	switch cause := call.cancelled(); {
	case errors.Is(err, errClientGone) || errors.Is(cause, errClientGone):
		return nil
	case errors.Is(err, errShutdown) || errors.Is(cause, errShutdown):
		return &Error{Status: http.StatusServiceUnavailable, Type: "upstream_cancelled", Msg: "upstream " + up.Base.Host + " call cut", Err: errShutdown}
	case e != nil:
		return e
	}
	return upstreamError(up.Base.Host, err)
}

// fail answers a call that failed before anything was relayed: the error in the
// route's style, or nothing (recorded as 499) when the client left.
func (f *forwarding) fail(err error, what string) forwardResult {
	e := callError(f.up, f.call, err, what)
	if e == nil {
		return f.finishEarly(&Error{Status: 499, Msg: "client went away", Err: errClientGone})
	}
	f.s.log.Warn("upstream call failed", "upstream", f.up.Name, "status", e.Status, "err", e)
	writeError(f.fc, f.p.Errors, e)
	return f.finishEarly(e)
}

func (f *forwarding) finishEarly(e *Error) forwardResult {
	if f.t != nil {
		f.t.done(e.Status, e, 0)
	}
	return forwardResult{status: e.Status, err: e}
}

// maxResponseBytes bounds a buffered (non-streamed) upstream answer.
const maxResponseBytes = 256 << 20

// deliver relays a buffered answer: its body read whole, each read under the idle
// timeout, straight into the client's response buffer; then status, headers and
// body go to the client at once. A body that fails (cut short, too slow, too large)
// is an error answer, not a truncated success.
func (f *forwarding) deliver() forwardResult {
	fc, ex, t := f.fc, f.ex, f.t
	h := ex.head()
	status := h.StatusCode()
	b, err := readBody(fc.Response.SwapBody(nil)[:0], ex, f.call, f.up.IdleTimeout, h.ContentLength())
	fc.Response.SwapBody(b)
	f.stop()
	if err != nil {
		ex.release(false)
		return f.fail(err, idleMsg(f.up))
	}
	fc.SetStatusCode(status)
	copyHeaders(&fc.Response.Header, h)
	if t != nil {
		t.begin(status, string(h.ContentEncoding()))
	}
	ex.release(true)
	if t != nil {
		t.chunk(fc.Response.Body())
		t.done(status, nil, f.ttfb)
	}
	return forwardResult{status: status, ttfb: f.ttfb}
}

// readBody appends r's body to dst, reading straight into its spare capacity (sized
// for a known length), each read under the idle timeout; at most maxResponseBytes.
func readBody(dst []byte, r io.Reader, call *upCall, idle time.Duration, size int) ([]byte, error) {
	if size > 0 && size <= maxResponseBytes {
		dst = slices.Grow(dst, size)
	}
	for {
		if len(dst) == cap(dst) {
			dst = slices.Grow(dst, 4<<10)
		}
		call.beforeRead(idle)
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		switch {
		case len(dst) > maxResponseBytes:
			return dst, fmt.Errorf("upstream answer larger than %d bytes", maxResponseBytes)
		case errors.Is(err, io.EOF):
			return dst, nil
		case err != nil:
			return dst, err
		}
	}
}

// stream relays a streamed answer. Its first read is made here, before anything is
// committed (fasthttp sends the head with the first chunk anyway): an upstream that
// sends a stream's head and closes before its first byte gets the agent a 502 that
// says so — not a 200 and a closed connection, which SDKs retry blindly or take for
// an empty answer.
func (f *forwarding) stream() forwardResult {
	fc, ex, call, up := f.fc, f.ex, f.call, f.up
	h := ex.head()
	status := h.StatusCode()
	bp := f.s.bufs.Get().(*[]byte)
	var n int
	var err error
	for n == 0 && err == nil {
		call.beforeRead(up.IdleTimeout)
		n, err = ex.Read(*bp)
	}
	if n == 0 {
		f.stop()
		ex.release(false)
		f.s.bufs.Put(bp)
		if call.cancelled() != nil || call.expired() {
			return f.fail(err, idleMsg(up))
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return f.fail(&Error{Status: http.StatusBadGateway, Type: "upstream_error",
			Msg: fmt.Sprintf("upstream %s answered %d with an event stream and closed it before sending anything", up.Base.Host, status),
			Err: err}, idleMsg(up))
	}
	fc.SetStatusCode(status)
	copyHeaders(&fc.Response.Header, h)
	r := &relay{forwarding: f, conn: fc.Conn(), status: status, buf: bp, pending: (*bp)[:n], event: errorEventStyle(f.p.Errors, h),
		slot: takeSlot(fc)}
	if f.t != nil {
		f.t.begin(status, string(h.ContentEncoding()))
		f.t.chunk(r.pending)
	}
	r.track(r.pending)
	r.setErr(err)
	fc.Response.SetBodyStream(r, -1)
	return forwardResult{status: status, ttfb: f.ttfb}
}

// relay is a streamed answer as fasthttp's server reads it: each Read is one read of
// the upstream's body, handed to the tee and then written and flushed to the client
// by the server before the next Read — no coalescing, no extra goroutine or pipe.
// The server calls CloseWithError once, after the last chunk or on a failed read or
// write: that ends the call. The streaming rules, once for every client:
//   - the idle timeout bounds each upstream read (upCall.beforeRead);
//   - a client that stops reading is cut after the idle timeout (a write deadline);
//   - a client that leaves (watch, or a failed write) cancels the call: 499,
//     errClientGone, never an upstream error;
//   - shutdown's end cancels the call;
//   - a stream that breaks (cut short, stalled, cancelled) closes the client's
//     connection without the last chunk, so the SDK reports an error, never a
//     truncated success; before closing, an error event is written where that is
//     safe (errorEventStyle).
type relay struct {
	*forwarding          // its ex is nil once the relay closed
	conn        net.Conn // the client's
	status      int
	buf         *[]byte          // holds pending until it was sent
	pending     []byte           // bytes to send before the next read: the first read, or the error event
	err         error            // how the upstream's body ended: io.EOF, or why it broke; nil while it goes on
	event       *registry.Errors // the error event's shape; nil: none may be written
	tail        [3]byte          // the last bytes relayed: an event may follow only a blank line
	evented     bool
	slot        *admission // the call's admission slot, given back when the stream ends; nil: none
}

func (r *relay) Read(p []byte) (int, error) {
	if len(r.pending) > 0 {
		n := copy(p, r.pending)
		r.pending = r.pending[n:]
		r.sent()
		return n, nil
	}
	if r.err != nil {
		if r.err != io.EOF && !r.evented {
			r.evented = true
			if ev := r.errorEvent(); ev != nil {
				r.pending = ev
				return r.Read(p)
			}
		}
		return 0, r.err
	}
	r.call.beforeRead(r.up.IdleTimeout)
	n, err := r.ex.Read(p)
	r.setErr(err)
	if n > 0 {
		if r.t != nil {
			r.t.chunk(p[:n])
		}
		r.track(p[:n])
		r.sent()
		return n, nil
	}
	if r.err == nil {
		return 0, nil // fasthttp reads again
	}
	return r.Read(p)
}

// setErr keeps how the upstream's body ended, err named by its cause: a departed
// client, shutdown, the idle timeout, or the upstream's own error.
func (r *relay) setErr(err error) {
	switch {
	case err == nil || r.err != nil:
	case errors.Is(err, io.EOF):
		r.err = io.EOF
	default:
		r.err = r.call.failure(err, idleMsg(r.up))
	}
}

// sent notes that bytes are about to be written to the client: a client that stops
// reading (but keeps its socket open) is cut after the idle timeout.
func (r *relay) sent() {
	if len(r.pending) == 0 && r.buf != nil {
		r.s.bufs.Put(r.buf)
		r.buf = nil
	}
	if r.conn != nil && r.up.IdleTimeout > 0 {
		_ = r.conn.SetWriteDeadline(time.Now().Add(r.up.IdleTimeout))
	}
}

// track keeps the last bytes relayed.
func (r *relay) track(b []byte) {
	if len(b) >= len(r.tail) {
		copy(r.tail[:], b[len(b)-len(r.tail):])
		return
	}
	n := copy(r.tail[:], r.tail[len(b):])
	copy(r.tail[n:], b)
}

// CloseWithError ends the call: werr is the server's error writing the answer (nil
// when every chunk reached the client), which is either a read error of ours or a
// client that went away.
func (r *relay) CloseWithError(werr error) error {
	if r.slot != nil {
		r.slot.leave()
		r.slot = nil
	}
	if r.ex == nil {
		return nil // closed already: a WebSocket turn closes it, then resets the response
	}
	r.stop()
	if r.conn != nil && r.up.IdleTimeout > 0 {
		_ = r.conn.SetWriteDeadline(time.Time{})
	}
	err := r.err
	switch {
	case errors.Is(r.call.cancelled(), errClientGone):
		err = errClientGone
	case err == io.EOF && werr == nil:
		err = nil
	case err == nil || err == io.EOF:
		err = errClientGone // the write to the client failed, or it stopped reading
	}
	if err != nil && !errors.Is(err, errClientGone) {
		r.s.log.Warn("upstream stream broke", "upstream", r.up.Name, "err", err)
		if r.conn != nil {
			_ = r.conn.Close()
		}
	}
	if r.buf != nil {
		r.s.bufs.Put(r.buf)
		r.buf, r.pending = nil, nil
	}
	r.ex.release(err == nil)
	r.ex = nil
	if r.t != nil {
		r.t.done(r.status, err, r.ttfb)
	}
	return nil
}

// errorEventStyle says whether a broken stream may end with an error event, and its
// shape. It may where the protocol defines one and the SDKs raise it with its
// message: SSE from OpenAI's APIs (an event whose data has "error": openai-go,
// openai-python and openai-node all raise it, named "error" or not) and Anthropic's
// (event: error, data {"type":"error",…}: the SDKs raise it as an API error). Only
// in plain text: an SSE answer with a content coding cannot take a plain event
// appended, and AWS event streams are binary frames with checksums. The event is
// written only at an event boundary (after a blank line), never inside an event
// cut mid-way, whose half line it would corrupt; the connection is closed after it
// all the same, so a client that ignores the event still sees a broken stream.
func errorEventStyle(st *registry.Errors, h *fasthttp.ResponseHeader) *registry.Errors {
	ce := h.ContentEncoding()
	if !st.Event || !bytes.HasPrefix(h.ContentType(), []byte("text/event-stream")) ||
		(len(ce) > 0 && string(ce) != "identity") {
		return nil
	}
	return st
}

// errorEvent is the SSE error event for the break, or nil when none may be written:
// not for a departed client, not outside an event boundary.
func (r *relay) errorEvent() []byte {
	if r.event == nil || errors.Is(r.err, errClientGone) ||
		!(r.tail[2] == '\n' && (r.tail[1] == '\n' || r.tail[0] == '\n' && r.tail[1] == '\r')) {
		return nil
	}
	status := http.StatusBadGateway
	if isTimeout(r.err) {
		status = http.StatusGatewayTimeout
	}
	e := &Error{Status: status, Type: "upstream_error", Msg: "upstream " + r.up.Base.Host + " broke the stream", Err: r.err}
	ev := []byte("event: error\ndata: ")
	if r.event.BareEvent {
		ev = []byte("data: ")
	}
	ev = append(ev, errorBody(r.event, e)...)
	return append(ev, "\n\n"...)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// peerPoll is how often a call checks whether its client left (while the upstream is
// silent) or shutdown's grace period ended.
const peerPoll = 250 * time.Millisecond
