package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// One upstream exchange, whichever client runs it. forward and the relay see an
// exchange: the answer's head, its body as a reader, and release; and an upCall, the
// call's deadline and cancel. They never know which client ran: camproxy's own
// HTTP/1.1 exchange on fasthttp's connection pool (fastRoundTrip, the default), or
// net/http (httpRoundTrip: an HTTP proxy from the environment or a custom
// RoundTripper).

// exchange is an upstream's answer once its head has arrived.
type exchange interface {
	// head is the status line and headers as the upstream sent them.
	head() *fasthttp.ResponseHeader
	// Read reads the body, its transfer coding removed (its content coding kept). A
	// Read returns what has arrived without waiting for more; io.EOF comes only at
	// the body's real end, and a body cut short (a chunked body without its last
	// chunk, a short Content-Length) is io.ErrUnexpectedEOF, never a clean end.
	Read(p []byte) (int, error)
	// release ends the exchange, once, on the goroutine that read the body, after its
	// last Read: the connection is reused when reuse is true (the body was read to
	// its end) and its framing allows it, else closed.
	release(reuse bool)
}

// upCall is one upstream call's deadline and cancel. The goroutine that runs the call
// moves the deadline; any goroutine may cancel it (client gone, shutdown). Either
// makes a blocked dial, write or read return: on the fasthttp path by moving the
// connection's deadline, on the net/http path by cancelling the request's context
// (at the deadline, from a timer).
type upCall struct {
	mu       sync.Mutex
	conn     net.Conn           // fasthttp: the connection, once dialled
	stop     context.CancelFunc // net/http: cancels the request's context
	timer    *time.Timer        // net/http: calls stop at the deadline
	deadline time.Time
	cause    error         // why the call was cancelled (errClientGone, errShutdown); nil if it was not
	done     chan struct{} // closed by cancel; made only for a call that waits on it (a dial)
}

// errShutdown is the cause of a call cut because shutdown's grace period ended.
var errShutdown = errors.New("camproxy is shutting down: the call outlived the shutdown grace period")

// past is a deadline that has passed: it makes any blocked read or write return.
var past = time.Unix(1, 0)

// cancel stops the call for cause: the dial, write or read in progress fails, and
// so does every later one. Safe from any goroutine, any number of times; the first
// cause is kept.
func (c *upCall) cancel(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cause == nil {
		c.cause = cause
		if c.done != nil {
			close(c.done)
		}
	}
	if c.conn != nil {
		_ = c.conn.SetDeadline(past)
	}
	if c.stop != nil {
		c.stop()
	}
}

// stopped is closed when the call is cancelled.
func (c *upCall) stopped() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.cause != nil {
			close(c.done)
		}
	}
	return c.done
}

// cancelled is the cause of a cancel, nil if there was none.
func (c *upCall) cancelled() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
}

// setDeadline bounds what the call does from now on (zero: nothing), unless it was
// cancelled (its deadline stays in the past).
func (c *upCall) setDeadline(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cause != nil {
		return
	}
	c.deadline = t
	if c.conn != nil {
		_ = c.conn.SetDeadline(t)
	}
	if c.stop == nil {
		return
	}
	switch {
	case t.IsZero():
		if c.timer != nil {
			c.timer.Stop()
		}
	case c.timer == nil:
		c.timer = time.AfterFunc(time.Until(t), c.stop)
	default:
		c.timer.Reset(time.Until(t))
	}
}

// beforeRead gives the next read of the answer idle to bring something (no bound when
// idle is 0): the idle timeout, for buffered answers and streams alike.
func (c *upCall) beforeRead(idle time.Duration) {
	var t time.Time
	if idle > 0 {
		t = time.Now().Add(idle)
	}
	c.setDeadline(t)
}

// timeLeft is the time until the call's deadline, at most limit.
func (c *upCall) timeLeft(limit time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deadline.IsZero() {
		return limit
	}
	return min(time.Until(c.deadline), limit)
}

// expired says whether the call's deadline has passed.
func (c *upCall) expired() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.deadline.IsZero() && !time.Now().Before(c.deadline)
}

// attach gives the call its connection, with the deadline set so far; false if the
// call was cancelled meanwhile (the caller closes conn).
func (c *upCall) attach(conn net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cause != nil {
		return false
	}
	c.conn = conn
	_ = conn.SetDeadline(c.deadline)
	return true
}

// detach takes the connection away before it is pooled or closed, so that a late
// cancel cannot touch a connection another call now uses; it says whether the call
// was cancelled.
func (c *upCall) detach() (cancelled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn = nil
	return c.cause != nil
}

// useContext makes stop (a request context's cancel) the call's cancel and deadline:
// the net/http path.
func (c *upCall) useContext(stop context.CancelFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stop = stop
	if c.cause != nil {
		stop()
	}
}

// end releases the net/http path's timer and context.
func (c *upCall) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.stop != nil {
		c.stop()
	}
}

// failure names why a call failed: cancelled (the cause), out of time (a timeout
// error saying which deadline, what), or the upstream's own error as it was.
func (c *upCall) failure(err error, what string) error {
	if cause := c.cancelled(); cause != nil {
		return fmt.Errorf("%w (%v)", cause, err)
	}
	if c.expired() {
		return &timeoutError{fmt.Sprintf("%s: %v", what, err)}
	}
	return err
}

// timeoutError is a call that ran out of time (a net.Error whose Timeout is true).
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string   { return e.msg }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return false }

// bodiless says whether an answer has no body whatever its headers say (RFC 9112 §6.3).
func bodiless(head bool, status int) bool {
	return head || status < 200 || status == http.StatusNoContent || status == http.StatusNotModified
}

// The fasthttp path. camproxy uses fasthttp's connection pool and its request and
// header codecs, but runs the exchange itself so that it owns the connection for the
// whole call: a cancel only moves the connection's deadlines into the past, which any
// goroutine may do, and everything pooled — reader, connection — is released by the
// one goroutine that reads the answer, after its last read returned. No pooled object
// is touched after release and no read races a release (the data race Bifrost hit
// with fasthttp's streams).

// fastRoundTrip sends the call on a pooled connection and reads the answer's head.
// The call's deadline (first_byte_timeout, set by the caller) covers everything:
// dialling (the pool dials with the time left), the TLS handshake (done by the first
// write), writing the request and reading the head. A pooled connection that the
// server closed while idle is retried on another, as net/http does; a fresh
// connection is not.
func (u *Upstream) fastRoundTrip(ctx context.Context, call *upCall, fc *fasthttp.RequestCtx, body []byte, identity bool) (exchange, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	hc, err := u.fastRequest(ctx, fc, req, body, identity)
	if err != nil {
		return nil, requestError(err)
	}
	for attempt := 0; ; attempt++ {
		x, fresh, err := fastAttempt(hc, req, call)
		if err == nil {
			return x, nil
		}
		if fresh || attempt >= 2 || call.cancelled() != nil || call.expired() || !idleClosed(err) {
			return nil, upstreamError(hc.Addr, call.failure(err, "no first byte within "+u.FirstByteTimeout.String()+" (first_byte_timeout)"))
		}
	}
}

// fastAttempt is one try of fastRoundTrip; fresh says whether its connection was new.
func fastAttempt(hc *fasthttp.HostClient, req *fasthttp.Request, call *upCall) (x *fastExchange, fresh bool, err error) {
	wait := call.timeLeft(connectTimeout)
	if wait <= 0 {
		return nil, false, &timeoutError{"no time left to connect"}
	}
	// The pool gives an idle connection, or dials one within wait: its DialTimeout,
	// or fasthttp's dialer, is given that time.
	cc, fresh, err := acquire(call, wait, hc, hc.AcquireConn, hc.CloseConn)
	if err != nil {
		return nil, true, err
	}
	conn := cc.Conn()
	if !call.attach(conn) {
		hc.CloseConn(cc)
		return nil, fresh, errUpstreamCancelled
	}
	bw := hc.AcquireWriter(conn)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	if err == nil {
		br := hc.AcquireReader(conn)
		x = fastExchanges.Get().(*fastExchange)
		if err = x.readHead(br, req.Header.IsHead()); err == nil {
			x.put = func(reuse bool) {
				// Bytes already read past the answer's end belong to no call: the
				// connection is out of step with its requests, so it is closed.
				reuse = reuse && br.Buffered() == 0
				hc.ReleaseReader(br)
				if cancelled := call.detach(); reuse && !cancelled {
					hc.ReleaseConn(cc)
				} else {
					hc.CloseConn(cc)
				}
			}
			return x, fresh, nil
		}
		x.reset()
		hc.ReleaseReader(br)
	}
	call.detach()
	hc.CloseConn(cc)
	return nil, fresh, err
}

// pooledConn is what camproxy uses of a fasthttp pool connection (whose type the
// library does not export).
type pooledConn interface {
	Conn() net.Conn
	CreatedTime() time.Time
}

// maxStale bounds the idle connections one call looks at and drops before it dials.
const maxStale = 8

// acquire takes a connection for the call from hc's pool (get is hc.AcquireConn,
// drop hc.CloseConn). An idle connection is used only if the upstream has neither
// closed it nor written to it while it rested: bytes there answer no call of ours (a
// late answer, bytes after an answer's end), and the call that read them would take
// them for its own answer. Such a connection is closed and the next one looked at.
//
// With no idle connection left, the pool dials. fasthttp's dial takes no context, so
// it runs on a goroutine of its own and the call waits for it or for its cancel
// (client gone, shutdown), whichever comes first: a departed client frees the call at
// once, and a dial that completes after the call left gives its connection to the
// pool. fresh says whether the connection is new.
func acquire[C pooledConn](call *upCall, wait time.Duration, hc *fasthttp.HostClient, get func(time.Duration, bool) (C, error), drop func(C)) (cc C, fresh bool, err error) {
	for range maxStale {
		if hc.IdleConnsCount() == 0 {
			break
		}
		t0 := time.Now()
		if cc, err = get(wait, false); err != nil {
			return cc, true, err
		}
		if !cc.CreatedTime().Before(t0) { // the idle one was taken meanwhile: this one is new
			return cc, true, nil
		}
		if closed, waiting, _ := peek(cc.Conn()); !closed && !waiting {
			return cc, false, nil
		}
		drop(cc)
	}
	return dial[C](call, wait, hc)
}

// dial has hc dial a new connection, unless the call is cancelled first (see acquire).
func dial[C pooledConn](call *upCall, wait time.Duration, hc *fasthttp.HostClient) (cc C, fresh bool, err error) {
	var handoff atomic.Int32 // 1: the call takes the dial's result; 2: the call left without it
	ready := make(chan struct{})
	go func() {
		c, derr := hc.AcquireConn(wait, false)
		if handoff.CompareAndSwap(0, 1) {
			if derr == nil {
				cc = any(c).(C)
			}
			err = derr
			close(ready)
			return
		}
		if derr == nil {
			hc.ReleaseConn(c)
		}
	}()
	select {
	case <-ready:
	case <-call.stopped():
		if handoff.CompareAndSwap(0, 2) {
			return cc, true, errUpstreamCancelled
		}
		<-ready
	}
	return cc, true, err
}

// idleClosed says whether err is what a server that closed a kept-alive connection
// gives: nothing but EOF or a reset before the first byte of the answer.
func idleClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF)
}

// errUpstreamCancelled is the error of a call cancelled before its answer ended.
var errUpstreamCancelled = errors.New("upstream call cancelled")

// fastExchange is an answer read off a fasthttp pool connection. Pooled: a call
// allocates only its release func and, for a chunked body, httputil's reader.
type fastExchange struct {
	resp    fasthttp.Response // only its header is used: the answer's head
	br      *bufio.Reader
	body    io.Reader // the body's framing: chunked, fixed or br (until the connection closes)
	fixed   fixedBody
	chunked bool
	ended   bool  // the body was read to its end (for a chunked one, its trailer too)
	err     error // the trailer's error, once read
	put     func(reuse bool)
}

var fastExchanges = sync.Pool{New: func() any { return new(fastExchange) }}

func (x *fastExchange) head() *fasthttp.ResponseHeader { return &x.resp.Header }

// readHead reads the status line and headers (skipping interim 1xx answers) and
// sets up the body's framing.
func (x *fastExchange) readHead(br *bufio.Reader, head bool) error {
	h := &x.resp.Header
	for n := 0; ; n++ {
		if err := h.Read(br); err != nil {
			return headError(err)
		}
		if code := h.StatusCode(); code < 100 || code > 199 || code == http.StatusSwitchingProtocols {
			break
		}
		if n >= maxInterim {
			return &badAnswerError{fmt.Sprintf("more than %d interim (1xx) answers before its answer", maxInterim)}
		}
	}
	h.SetNoDefaultContentType(true) // relay the upstream's Content-Type, or none
	x.br = br
	switch cl := h.ContentLength(); {
	case bodiless(head, h.StatusCode()):
		x.fixed = fixedBody{r: br}
		x.body = &x.fixed
	case cl == -1: // chunked
		x.chunked = true
		x.body = httputil.NewChunkedReader(br)
	case cl >= 0:
		x.fixed = fixedBody{r: br, left: int64(cl)}
		x.body = &x.fixed
	default: // -2: identity, until the connection closes
		x.body = br
	}
	return nil
}

// maxInterim bounds the interim (1xx) answers skipped before an answer's head.
const maxInterim = 10

// badAnswerError is an answer that is not HTTP/1.1 as RFC 9112 defines it (a head
// that does not parse, endless interim answers): the connection is out of step and is
// closed; the agent gets a 502 that says what was wrong.
type badAnswerError struct{ problem string }

func (e *badAnswerError) Error() string { return e.problem }

// headError is err of reading an answer's head: the connection's own error (a timeout,
// a close, a reset) as it is, anything else a head that does not parse.
func headError(err error) error {
	var ne net.Error
	if errors.As(err, &ne) || idleClosed(err) {
		return err
	}
	return &badAnswerError{"an answer head that is not HTTP/1.1 (" + err.Error() + ")"}
}

// Read reads the body. httputil's chunked reader returns io.EOF at the last chunk;
// the trailer section after it is read (and dropped) then, so that the connection
// can carry the next call: a body without it is cut short.
//
// httputil's reader never waits for another chunk once it has bytes: it returns
// early when the next chunk's header is not buffered. It does wait for the data of a
// chunk whose header has arrived: bytes the upstream committed to with that header
// (and in practice wrote with it).
func (x *fastExchange) Read(p []byte) (int, error) {
	if x.ended {
		return 0, io.EOF
	}
	if x.err != nil {
		return 0, x.err
	}
	n, err := x.body.Read(p)
	if !errors.Is(err, io.EOF) {
		return n, err
	}
	if x.chunked {
		if terr := x.resp.Header.ReadTrailer(x.br); terr != nil {
			if errors.Is(terr, io.EOF) {
				terr = io.ErrUnexpectedEOF
			}
			x.err = terr
			return n, terr
		}
	}
	// A body delimited by the connection's close ends cleanly, but leaves no
	// connection to reuse.
	x.ended = x.body != io.Reader(x.br)
	return n, io.EOF
}

func (x *fastExchange) release(reuse bool) {
	x.put(reuse && x.ended && !x.resp.ConnectionClose())
	x.reset()
}

func (x *fastExchange) reset() {
	x.resp.Reset()
	x.br, x.body, x.fixed, x.chunked, x.ended, x.err, x.put = nil, nil, fixedBody{}, false, false, nil, nil
	fastExchanges.Put(x)
}

// fixedBody is a body of a known length: the connection closing short of it is
// io.ErrUnexpectedEOF. Its last bytes come with io.EOF, so a reader need not ask again.
type fixedBody struct {
	r    *bufio.Reader
	left int64
}

func (b *fixedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	switch {
	case b.left == 0:
		return n, io.EOF
	case errors.Is(err, io.EOF):
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}
