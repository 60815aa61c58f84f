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
	"time"

	"github.com/valyala/fasthttp"
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
// forward returns before the body is relayed; t.done reports the end.
func (s *Server) forward(fc *fasthttp.RequestCtx, up *Upstream, body []byte, identity bool, st Style, t tee) forwardResult {
	if up.client == nil {
		return s.forwardFast(fc, up, body, identity, st, t)
	}
	return s.forwardHTTP(fc, up, body, identity, st, t)
}

// forwardHTTP is forward through net/http (a configured Transport or an HTTP proxy).
func (s *Server) forwardHTTP(fc *fasthttp.RequestCtx, up *Upstream, body []byte, identity bool, st Style, t tee) forwardResult {
	uctx, cancel := context.WithCancel(s.base)
	req, err := up.newRequest(uctx, fc, body, identity)
	if err != nil {
		cancel()
		e := &Error{Status: http.StatusBadGateway, Type: "upstream_request", Msg: "cannot build the upstream request", Err: err}
		writeError(fc, st, e)
		return s.finishEarly(t, e)
	}
	// Watch for a departed client from the start: a model that thinks for minutes
	// before its first byte must stop when nobody waits for it.
	var gone atomic.Bool
	stopWatch := s.watchPeer(fc.Conn(), func() { gone.Store(true); cancel() })
	start := time.Now()
	resp, err := up.client.Do(req)
	ttfb := time.Since(start)
	if err != nil {
		stopWatch()
		cancel()
		if gone.Load() {
			return s.finishEarly(t, &Error{Status: 499, Msg: "client went away", Err: errClientGone})
		}
		e := upstreamError(req.URL.Host, err)
		s.log.Warn("upstream call failed", "upstream", up.Name, "status", e.Status, "err", err)
		writeError(fc, st, e)
		return s.finishEarly(t, e)
	}
	s.m.UpstreamTTFB.WithLabelValues(up.Name).Observe(ttfb.Seconds())
	fc.SetStatusCode(resp.StatusCode)
	copyResponseHeaders(fc, resp.Header)
	if t != nil {
		t.begin(resp.StatusCode, strings.Join(resp.Header.Values("Content-Encoding"), ","))
	}

	if !isStream(resp) {
		defer stopWatch()
		defer cancel()
		defer resp.Body.Close()
		fc.Response.ResetBody()
		bp := s.bufs.Get().(*[]byte)
		_, err := io.CopyBuffer(fc.Response.BodyWriter(), io.LimitReader(resp.Body, maxResponseBytes), *bp)
		s.bufs.Put(bp)
		if err != nil {
			if gone.Load() {
				return s.finishEarly(t, &Error{Status: 499, Msg: "client went away", Err: errClientGone})
			}
			e := upstreamError(req.URL.Host, err)
			writeError(fc, st, e)
			return s.finishEarly(t, e)
		}
		if t != nil {
			t.chunk(fc.Response.Body())
			t.done(resp.StatusCode, nil, ttfb)
		}
		return forwardResult{status: resp.StatusCode, ttfb: ttfb}
	}
	s.relayStream(fc, resp, cancel, up.IdleTimeout, t, ttfb, stopWatch, &gone)
	return forwardResult{status: resp.StatusCode, ttfb: ttfb}
}

func (s *Server) finishEarly(t tee, e *Error) forwardResult {
	if t != nil {
		t.done(e.Status, e, 0)
	}
	return forwardResult{status: e.Status, err: e}
}

// maxResponseBytes bounds a buffered (non-streamed) upstream answer.
const maxResponseBytes = 256 << 20

// isStream says whether an answer is relayed chunk by chunk: SSE or AWS event streams.
func isStream(resp *http.Response) bool {
	ct := resp.Header.Get("Content-Type")
	return strings.HasPrefix(ct, "text/event-stream") || strings.HasPrefix(ct, "application/vnd.amazon.eventstream")
}

// relayStream writes each upstream read to the client and flushes it at once: a chunk
// reaches the agent before the next is read. A client that went away (a failed write, or
// a closed socket seen while the upstream is silent) cancels the upstream request so the
// model stops generating. An upstream silent for longer than idle is cut, and a stream
// that breaks mid-way closes the client's connection without the final chunk, so its
// SDK reports an error rather than a truncated success.
func (s *Server) relayStream(fc *fasthttp.RequestCtx, resp *http.Response, cancel context.CancelFunc, idle time.Duration, t tee,
	ttfb time.Duration, stopWatch func(), gone *atomic.Bool) {
	conn := fc.Conn()
	status := resp.StatusCode
	fc.SetBodyStreamWriter(func(w *bufio.Writer) {
		var idled atomic.Bool
		defer cancel()
		defer resp.Body.Close()
		defer stopWatch()
		var timer *time.Timer
		if idle > 0 {
			timer = time.AfterFunc(idle, func() { idled.Store(true); cancel() })
			defer timer.Stop()
		}
		bp := s.bufs.Get().(*[]byte)
		defer s.bufs.Put(bp)
		err := copyStream(w, conn, resp.Body, *bp, t, timer, idle)
		switch {
		case err == nil:
		case errors.Is(err, errClientGone) || gone.Load():
			err = errClientGone
		case idled.Load():
			err = fmt.Errorf("upstream sent nothing for %s (idle_timeout): %w", idle, err)
		}
		if err != nil && !errors.Is(err, errClientGone) {
			s.log.Warn("upstream stream broke", "err", err)
			_ = conn.Close()
		}
		if t != nil {
			t.done(status, err, ttfb)
		}
	})
}

// copyStream relays r to w one read at a time, flushing each, and feeds t first. A
// client that stops reading (but keeps its socket open) is cut after idle: each write
// to conn gets that deadline.
func copyStream(w *bufio.Writer, conn net.Conn, r io.Reader, buf []byte, t tee, timer *time.Timer, idle time.Duration) error {
	if conn != nil && idle > 0 {
		defer conn.SetWriteDeadline(time.Time{})
	}
	for {
		n, err := r.Read(buf)
		if timer != nil {
			timer.Reset(idle)
		}
		if n > 0 {
			if t != nil {
				t.chunk(buf[:n])
			}
			if conn != nil && idle > 0 {
				_ = conn.SetWriteDeadline(time.Now().Add(idle))
			}
			_, werr := w.Write(buf[:n])
			if werr == nil {
				werr = w.Flush()
			}
			if werr != nil {
				return errClientGone
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// peerPoll is how often a stream checks whether its client left while the upstream is silent.
const peerPoll = 250 * time.Millisecond

// watchPeer calls gone when the client closes its connection, even while nothing is
// being written. The returned func stops watching. A timer chain, not a goroutine: most
// calls end before the first check, and then cost one timer.
func (s *Server) watchPeer(conn net.Conn, gone func()) func() {
	if conn == nil {
		return func() {}
	}
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock() // the callback reads t under mu, so it sees the assignment
	defer mu.Unlock()
	t = time.AfterFunc(peerPoll, func() {
		if peerClosed(conn) {
			gone()
			return
		}
		mu.Lock()
		if !stopped {
			t.Reset(peerPoll)
		}
		mu.Unlock()
	})
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}
