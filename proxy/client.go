package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// camproxy's upstream client: fasthttp's connection pools and its request and header
// codecs, with the exchange run here so that the call owns its connection for the
// whole call: a cancel only moves the connection's deadlines into the past, which
// any goroutine may do, and everything pooled — reader, connection — is released by
// the one goroutine that reads the answer, after its last read returned. No pooled
// object is touched after release and no read races a release (the data race Bifrost
// hit with fasthttp's streams). The pools are the Upstream's (upstream.go), dialling
// directly or through the environment's proxy (dialer.go); the answer is an exchange
// (exchange.go), the call's deadline and cancel an upCall (upcall.go).

// request fills req with the upstream call and returns the pool of the host it goes
// to. The request line is the origin-form target built from the config's base; the
// Host header is the base's host: nothing in the client's request-target can name
// another host. Only the Auth may move the call, to another https host of its
// provider (SigV4's regional endpoint).
func (u *Upstream) request(ctx context.Context, fc *fasthttp.RequestCtx, req *fasthttp.Request, body []byte, identity bool) (*fasthttp.HostClient, error) {
	h := &req.Header
	h.SetMethodBytes(fc.Method())
	var uri [256]byte
	h.SetRequestURIBytes(u.requestURI(uri[:0], fc.URI().PathOriginal(), fc.URI().QueryString()))
	h.SetHost(u.Base.Host)
	conn := fc.Request.Header.Peek("Connection")
	for k, v := range fc.Request.Header.All() {
		if forwardHeader(k, conn, identity) {
			h.AddBytesKV(k, v)
		}
	}
	req.SetBodyRaw(body)
	if u.Auth == nil {
		return u.hostClient(u.Base.Scheme, u.Base.Host), nil
	}
	if err := u.Auth.Apply(ctx, req, body); err != nil {
		return nil, err
	}
	if host := h.Host(); string(host) != u.Base.Host {
		return u.hostClient("https", string(host)), nil
	}
	return u.hostClient(u.Base.Scheme, u.Base.Host), nil
}

// roundTrip sends the call upstream and returns its answer once the head has
// arrived: a WebSocket session's turn on its socket (wsupstream.go), any other call
// on a pooled connection. The call's deadline — first_byte_timeout from now — covers
// everything: dialling (the pool dials with the time left, through the proxy when
// there is one), the TLS handshake (done by the first write), writing the request
// and reading the head. A pooled connection that the server closed while idle is
// retried on another, as net/http does; a fresh connection is not. A failure is an
// *Error.
func (u *Upstream) roundTrip(ctx context.Context, call *upCall, fc *fasthttp.RequestCtx, body []byte, identity bool) (exchange, error) {
	if ws := upstreamSocket(fc); ws != nil {
		return ws.turn(ctx, call, body)
	}
	if u.FirstByteTimeout > 0 {
		call.setDeadline(time.Now().Add(u.FirstByteTimeout))
	}
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	hc, err := u.request(ctx, fc, req, body, identity)
	if err != nil {
		return nil, requestError(err)
	}
	for try := 0; ; try++ {
		x, fresh, err := attempt(hc, req, call)
		if err == nil {
			return x, nil
		}
		if fresh || try >= 2 || call.cancelled() != nil || call.expired() || !idleClosed(err) {
			return nil, upstreamError(hc.Addr, call.failure(err, "no first byte within "+u.FirstByteTimeout.String()+" (first_byte_timeout)"))
		}
	}
}

// attempt is one try of roundTrip; fresh says whether its connection was new.
func attempt(hc *fasthttp.HostClient, req *fasthttp.Request, call *upCall) (x *connExchange, fresh bool, err error) {
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
		x = connExchanges.Get().(*connExchange)
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

// requestError is a call that could not be built (signing).
func requestError(err error) *Error {
	return &Error{Status: http.StatusBadGateway, Type: "upstream_request", Msg: "cannot build the upstream request", Err: err}
}
