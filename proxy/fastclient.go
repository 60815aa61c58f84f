package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// The fasthttp upstream path. camproxy uses fasthttp's connection pool and its request
// and response codecs, but runs the exchange itself so that it owns the connection
// for the whole call: a cancel (client gone, idle timeout, shutdown) only moves the
// connection's deadlines into the past, which any goroutine may do, and everything
// pooled — reader, response, connection — is released by the one goroutine that reads
// the answer, after its last read returned. No pooled object is touched after release
// and no read races a release (the data race Bifrost hit with fasthttp's streams).

// upCall is one upstream call's connection, as a cancel sees it.
type upCall struct {
	mu        sync.Mutex
	conn      net.Conn
	cancelled bool
}

// past is a deadline that has passed: it makes any blocked read or write return.
var past = time.Unix(1, 0)

// cancel stops the call: the read or write in progress returns a timeout error, and
// so does every later one. Safe from any goroutine, any number of times.
func (c *upCall) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancelled = true
	if c.conn != nil {
		_ = c.conn.SetDeadline(past)
	}
}

func (c *upCall) attach(conn net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancelled {
		return false
	}
	c.conn = conn
	return true
}

func (c *upCall) detach() {
	c.mu.Lock()
	c.conn = nil
	c.mu.Unlock()
}

func (c *upCall) wasCancelled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cancelled
}

// setReadDeadline moves the read deadline unless the call was cancelled (whose
// deadline must stay in the past).
func (c *upCall) setReadDeadline(t time.Time) {
	c.mu.Lock()
	if !c.cancelled && c.conn != nil {
		_ = c.conn.SetReadDeadline(t)
	}
	c.mu.Unlock()
}

func (c *upCall) setDeadline(t time.Time) {
	c.mu.Lock()
	if !c.cancelled && c.conn != nil {
		_ = c.conn.SetDeadline(t)
	}
	c.mu.Unlock()
}

// isStreamType says whether an answer is relayed chunk by chunk: SSE or AWS event streams.
func isStreamType(ct []byte) bool {
	s := string(ct)
	return strings.HasPrefix(s, "text/event-stream") || strings.HasPrefix(s, "application/vnd.amazon.eventstream")
}

// roundTrip sends req on a pooled connection and reads the answer's headers into
// resp; a buffered (non-stream) answer's body is read too, a stream's (resp.StreamBody)
// is left to read from body. release gives the connection back (reuse: the body was read
// to its end) or closes it; it must be called once, by the goroutine that reads.
// A pooled connection that the server closed while idle is retried on another, as
// net/http does; a fresh connection is not.
func roundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response, call *upCall, firstByte, idle time.Duration) (body io.Reader, release func(reuse bool), err error) {
	head := req.Header.IsHead()
	for attempt := 0; ; attempt++ {
		t0 := time.Now()
		cc, err := hc.AcquireConn(0, false)
		if err != nil {
			return nil, nil, err
		}
		fresh := !cc.CreatedTime().Before(t0)
		conn := cc.Conn()
		if !call.attach(conn) {
			hc.CloseConn(cc)
			return nil, nil, errUpstreamCancelled
		}
		var deadline time.Time
		if firstByte > 0 {
			deadline = time.Now().Add(firstByte)
		}
		call.setDeadline(deadline)
		bw := hc.AcquireWriter(conn)
		err = req.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
		hc.ReleaseWriter(bw)
		if err == nil {
			br := hc.AcquireReader(conn)
			if err = readAnswer(resp, br, head, call, idle); err == nil {
				if resp.StreamBody {
					body = newBodyReader(br, resp.Header.ContentLength())
				}
				return body, func(reuse bool) {
					hc.ReleaseReader(br)
					cancelled := call.wasCancelled()
					call.detach()
					if reuse && !cancelled && !resp.ConnectionClose() {
						hc.ReleaseConn(cc)
					} else {
						hc.CloseConn(cc)
					}
				}, nil
			}
			hc.ReleaseReader(br)
		}
		call.detach()
		hc.CloseConn(cc)
		if !deadline.IsZero() && !time.Now().Before(deadline) && !call.wasCancelled() {
			return nil, nil, &timeoutError{fmt.Sprintf("no first byte within %s (first_byte_timeout): %v", firstByte, err)}
		}
		if fresh || attempt >= 2 || call.wasCancelled() || !idleClosed(err) {
			return nil, nil, err
		}
	}
}

// timeoutError is a call that ran out of time (a net.Error whose Timeout is true).
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string   { return e.msg }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return false }

// idleClosed says whether err is what a server that closed a kept-alive connection
// gives: nothing but EOF or a reset before the first byte of the answer.
func idleClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF)
}

// readAnswer reads the status line and headers (skipping interim 1xx answers), then a
// buffered body, or sets up the stream of an SSE or event-stream answer.
func readAnswer(resp *fasthttp.Response, br *bufio.Reader, head bool, call *upCall, idle time.Duration) error {
	resp.Reset()
	if err := resp.Header.Read(br); err != nil {
		return err
	}
	for n := 0; ; n++ {
		code := resp.Header.StatusCode()
		if code < 100 || code > 199 || code == http.StatusSwitchingProtocols {
			break
		}
		if n >= 10 {
			return fmt.Errorf("upstream sent more than %d interim answers", n)
		}
		if err := resp.Header.Read(br); err != nil {
			return err
		}
	}
	code := resp.Header.StatusCode()
	if head || code == http.StatusNoContent || code == http.StatusNotModified {
		resp.SkipBody = true
		return nil
	}
	if isStreamType(resp.Header.ContentType()) {
		resp.StreamBody = true            // read by a bodyReader, not by fasthttp
		call.setReadDeadline(time.Time{}) // the relay's idle timeout takes over
		return nil
	}
	if idle > 0 {
		call.setReadDeadline(time.Now().Add(idle))
	}
	if err := resp.ReadBody(br, maxResponseBytes); err != nil {
		return err
	}
	if resp.Header.ContentLength() == -1 {
		if err := resp.Header.ReadTrailer(br); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
	}
	return nil
}

// forwardFast is forward on the fasthttp client.
func (s *Server) forwardFast(fc *fasthttp.RequestCtx, up *Upstream, body []byte, identity bool, st Style, t tee) forwardResult {
	req := fasthttp.AcquireRequest()
	hc, err := up.fastRequest(s.base, fc, req, body, identity)
	if err != nil {
		fasthttp.ReleaseRequest(req)
		e := &Error{Status: http.StatusBadGateway, Type: "upstream_request", Msg: "cannot build the upstream request", Err: err}
		writeError(fc, st, e)
		return s.finishEarly(t, e)
	}
	call := &upCall{}
	stopBase := context.AfterFunc(s.base, call.cancel) // shutdown's grace period is over
	// Watch for a departed client from the start: a model that thinks for minutes
	// before its first byte must stop when nobody waits for it.
	var gone atomic.Bool
	stopWatch := s.watchPeer(fc.Conn(), func() { gone.Store(true); call.cancel() })
	resp := fasthttp.AcquireResponse()
	start := time.Now()
	stream, release, err := roundTrip(hc, req, resp, call, up.FirstByteTimeout, up.IdleTimeout)
	ttfb := time.Since(start)
	fasthttp.ReleaseRequest(req)
	if err != nil {
		stopWatch()
		stopBase()
		fasthttp.ReleaseResponse(resp)
		if gone.Load() {
			return s.finishEarly(t, &Error{Status: 499, Msg: "client went away", Err: errClientGone})
		}
		e := upstreamError(hc.Addr, err)
		s.log.Warn("upstream call failed", "upstream", up.Name, "status", e.Status, "err", err)
		writeError(fc, st, e)
		return s.finishEarly(t, e)
	}
	status := resp.StatusCode()
	s.m.UpstreamTTFB.WithLabelValues(up.Name).Observe(ttfb.Seconds())
	fc.SetStatusCode(status)
	copyFastHeaders(fc, &resp.Header)
	if t != nil {
		t.begin(status, string(resp.Header.ContentEncoding()))
	}
	if !resp.StreamBody {
		// The whole answer was read: hand its buffer to the client's response.
		fc.Response.SwapBody(resp.SwapBody(nil))
		release(true)
		fasthttp.ReleaseResponse(resp)
		stopWatch()
		stopBase()
		if t != nil {
			t.chunk(fc.Response.Body())
			t.done(status, nil, ttfb)
		}
		return forwardResult{status: status, ttfb: ttfb}
	}
	fc.Response.SetBodyStream(&relay{s: s, resp: resp, body: stream, release: release, call: call, conn: fc.Conn(),
		idle: up.IdleTimeout, t: t, status: status, ttfb: ttfb, stopWatch: stopWatch, stopBase: stopBase, gone: &gone}, -1)
	return forwardResult{status: status, ttfb: ttfb}
}

// relay is a streamed answer as fasthttp's server reads it: each Read is one read of
// the upstream connection, handed to the tee and then written and flushed to the client
// by the server before the next Read (no coalescing, no extra goroutine or pipe).
// The server calls CloseWithError once, after the last chunk or on a failed read or
// write: that ends the call.
type relay struct {
	s         *Server
	resp      *fasthttp.Response
	body      io.Reader
	release   func(reuse bool)
	call      *upCall
	conn      net.Conn // the client's
	idle      time.Duration
	t         tee
	status    int
	ttfb      time.Duration
	stopWatch func()
	stopBase  func() bool
	gone      *atomic.Bool
	readErr   error
	eof       bool
}

func (r *relay) Read(p []byte) (int, error) {
	if r.idle > 0 {
		r.call.setReadDeadline(time.Now().Add(r.idle))
	}
	n, err := r.body.Read(p)
	if n > 0 {
		if r.t != nil {
			r.t.chunk(p[:n])
		}
		// A client that stops reading (but keeps its socket open) is cut after idle.
		if r.conn != nil && r.idle > 0 {
			_ = r.conn.SetWriteDeadline(time.Now().Add(r.idle))
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		r.eof = true
	default:
		r.readErr = err
	}
	return n, err
}

// CloseWithError ends the call: werr is the server's error writing the answer (nil
// when every chunk reached the client), which is either a read error of ours or a
// client that went away.
func (r *relay) CloseWithError(werr error) error {
	r.stopWatch()
	r.stopBase()
	if r.conn != nil && r.idle > 0 {
		_ = r.conn.SetWriteDeadline(time.Time{})
	}
	err := r.readErr
	switch {
	case r.gone.Load():
		err = errClientGone
	case err == nil && werr != nil:
		err = errClientGone // the write to the client failed
	case err != nil && r.call.wasCancelled():
		err = fmt.Errorf("upstream call cancelled (shutdown): %w", err)
	case err != nil && isTimeout(err) && r.idle > 0:
		err = fmt.Errorf("upstream sent nothing for %s (idle_timeout): %w", r.idle, err)
	}
	if err != nil && !errors.Is(err, errClientGone) {
		r.s.log.Warn("upstream stream broke", "err", err)
		if r.conn != nil {
			_ = r.conn.Close()
		}
	}
	br, _ := r.body.(*bodyReader)
	r.release(r.eof && err == nil && br != nil && br.length != -2)
	fasthttp.ReleaseResponse(r.resp)
	r.resp, r.body = nil, nil
	if r.t != nil {
		r.t.done(r.status, err, r.ttfb)
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// bodyReader reads a streamed answer's body off the connection: chunked, of a known
// length, or until the connection closes. Each Read returns what one read of the
// connection brought (never waiting for more), and a body cut short — a chunked body
// without its last chunk, a short fixed-length one — is io.ErrUnexpectedEOF, never
// io.EOF: a truncated answer must not reach the agent as a complete one.
type bodyReader struct {
	br       *bufio.Reader
	length   int // -1 chunked, -2 until the connection closes, else bytes left
	left     int // chunked: bytes left in the current chunk
	needCRLF bool
	done     bool
}

func newBodyReader(br *bufio.Reader, contentLength int) *bodyReader {
	return &bodyReader{br: br, length: contentLength}
}

// maxChunkHeader bounds a chunk-size line (with extensions) and a trailer line.
const maxChunkHeader = 4096

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	switch {
	case b.length == -2:
		n, err := b.br.Read(p)
		if errors.Is(err, io.EOF) {
			b.done = true
		}
		return n, err
	case b.length >= 0:
		if b.length == 0 {
			b.done = true
			return 0, io.EOF
		}
		n, err := b.br.Read(p[:min(len(p), b.length)])
		b.length -= n
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return n, err
	}
	if b.left == 0 {
		if b.needCRLF {
			if err := b.crlf(); err != nil {
				return 0, err
			}
			b.needCRLF = false
		}
		size, err := b.chunkSize()
		if err != nil {
			return 0, err
		}
		if size == 0 {
			if err := b.trailer(); err != nil {
				return 0, err
			}
			b.done = true
			return 0, io.EOF
		}
		b.left = size
	}
	n, err := b.br.Read(p[:min(len(p), b.left)])
	b.left -= n
	if b.left == 0 {
		b.needCRLF = true
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *bodyReader) line() ([]byte, error) {
	l, err := b.br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull) || len(l) > maxChunkHeader:
		return nil, errors.New("upstream chunk header too long")
	case errors.Is(err, io.EOF):
		return nil, io.ErrUnexpectedEOF
	case err != nil:
		return nil, err
	}
	return l, nil
}

func (b *bodyReader) crlf() error {
	l, err := b.line()
	if err != nil {
		return err
	}
	if len(l) > 2 || len(l) == 2 && l[0] != '\r' {
		return errors.New("upstream chunk not followed by CRLF")
	}
	return nil
}

func (b *bodyReader) chunkSize() (int, error) {
	l, err := b.line()
	if err != nil {
		return 0, err
	}
	size, digits := 0, 0
	for _, c := range l {
		var v int
		switch {
		case c >= '0' && c <= '9':
			v = int(c - '0')
		case c >= 'a' && c <= 'f':
			v = int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			v = int(c-'A') + 10
		default:
			if digits == 0 || (c != ';' && c != ' ' && c != '\t' && c != '\r' && c != '\n') {
				return 0, fmt.Errorf("upstream sent a bad chunk size %q", l)
			}
			return size, nil
		}
		if digits++; digits > 12 {
			return 0, errors.New("upstream chunk too large")
		}
		size = size<<4 | v
	}
	return 0, fmt.Errorf("upstream sent a bad chunk size %q", l)
}

// trailer skips the trailer fields after the last chunk, up to the blank line.
func (b *bodyReader) trailer() error {
	for range 100 {
		l, err := b.line()
		if err != nil {
			return err
		}
		if len(l) <= 2 && (len(l) == 1 || l[0] == '\r') {
			return nil
		}
	}
	return errors.New("upstream sent too many trailer fields")
}
