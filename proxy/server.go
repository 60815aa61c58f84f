// Package proxy owns the data plane: fasthttp routes, the augmentation pipeline
// (parse → episode → arm → context → splice → forward → record), the upstream
// transport and the unbuffered stream tee.
package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/camproxy/camproxy/tracing"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/augment"
	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/metrics"
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/protocol"
)

// ContextSource is an augmenter as the proxy uses it: its name and version (part of
// the cache key: a new prompt, model or guidance file means new contexts) and its
// guarded Augment.
type ContextSource struct {
	Name    string
	Version func() string // read per call: file-backed augmenters change it on reload
	Timeout time.Duration // the augment deadline, covering cache and augmenter
	augment.Augmenter
}

// ContextCache is the two-tier context cache (augment.Cache).
type ContextCache interface {
	Get(ctx context.Context, key string, load func(context.Context) (string, error)) (string, augment.Source, error)
}

// Options are the data plane's dependencies.
type Options struct {
	Logger       *slog.Logger
	Metrics      *metrics.Metrics
	OpenAI       *Upstream
	Anthropic    *Upstream // nil: /v1/messages is passed to OpenAI's upstream untouched
	Bedrock      *Upstream // nil: /model/… is passed through untouched
	Runtime      *Runtime
	Cache        ContextCache
	Episodes     episode.Store
	Recorder     Recorder // nil = record nothing
	MaxBodyBytes int
	ReadTimeout  time.Duration
	IdleTimeout  time.Duration
	Tracing      *tracing.Tracing // nil = tracing off
}

// Runtime is what a config reload replaces while calls are in flight: the task rules,
// placements, the experiment and the augmenters. A call reads it once, at its start.
type Runtime struct {
	TaskRules    []protocol.TaskRule
	Placement    Placement // default placement
	ArmPlacement map[string]Placement
	Policy       *policies.Policy
	Augmenters   map[string]ContextSource
}

// SetRuntime swaps in a new runtime; calls already started finish on the old one.
func (s *Server) SetRuntime(rt *Runtime) { s.rt.Store(rt) }

// Runtime returns the runtime new calls use.
func (s *Server) Runtime() *Runtime { return s.rt.Load() }

// Placement is where and how context is spliced.
type Placement struct {
	Mode     protocol.Placement
	Template string // contains {{context}}
}

// Server is the data plane.
type Server struct {
	log       *slog.Logger
	m         *metrics.Metrics
	openai    *Upstream
	anthropic *Upstream
	bedrock   *Upstream

	openaiRoute, anthropicRoute, bedrockRoute *route

	rt       atomic.Pointer[Runtime]
	sniff    atomic.Pointer[sniffListener]
	cache    ContextCache
	episodes episode.Store
	rec      Recorder
	maxBody  int
	srv      *fasthttp.Server

	// base outlives shutdown's listener close so that in-flight upstream calls finish;
	// it is cancelled only when the grace period is over.
	base       context.Context
	cancelBase context.CancelFunc
	bufs       sync.Pool
	tr         *tracing.Tracing
}

// New builds the data plane.
func New(o Options) *Server {
	base, cancel := context.WithCancel(context.Background())
	rec := o.Recorder
	if rec == nil {
		rec = nopRecorder{}
	}
	s := &Server{
		log: o.Logger, m: o.Metrics, openai: o.OpenAI, anthropic: o.Anthropic, bedrock: o.Bedrock,
		cache: o.Cache, episodes: o.Episodes, rec: rec, maxBody: o.MaxBodyBytes,
		base: base, cancelBase: cancel,
		bufs: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }},
		tr:   o.Tracing,
	}
	if s.tr == nil {
		s.tr = tracing.Disabled()
	}
	for _, u := range []*Upstream{o.OpenAI, o.Anthropic, o.Bedrock} {
		if u != nil {
			u.init()
		}
	}
	s.rt.Store(o.Runtime)
	s.buildRoutes()
	s.srv = &fasthttp.Server{
		Handler:               s.handle,
		ErrorHandler:          s.serverError,
		Name:                  "camproxy",
		MaxRequestBodySize:    o.MaxBodyBytes,
		ReadTimeout:           o.ReadTimeout,
		IdleTimeout:           o.IdleTimeout,
		WriteTimeout:          0, // a total write timeout would cut long streams; streams use an idle timeout
		CloseOnShutdown:       true,
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		// A proxy forwards multipart bodies (file uploads) as bytes; parsing them here
		// would reject or rewrite what the upstream should judge.
		DisablePreParseMultipartForm: true,
		ReadBufferSize:               16 << 10,
		// Many long-lived connections: a connection between requests, or one whose
		// answer is streaming, holds no read buffer (16 KiB each) and no body buffers.
		ReduceMemoryUsage: true,
		Concurrency:       1 << 20,
		Logger:            fasthttpLogger{o.Logger},
	}
	return s
}

// Serve accepts connections on ln until Shutdown. HTTP/2 clients with prior knowledge
// (h2c) are bridged to the same pipeline.
func (s *Server) Serve(ln net.Listener) error {
	sl := newSniffListener(ln, s.log)
	s.sniff.Store(sl)
	return s.srv.Serve(sl)
}

// Shutdown stops accepting, lets in-flight calls and streams finish until ctx is done,
// then cancels what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	var h2err error
	if sl := s.sniff.Load(); sl != nil {
		h2err = sl.shutdown(ctx) // GOAWAY first: h2 streams drain through fasthttp below
	}
	err := s.srv.ShutdownWithContext(ctx)
	s.cancelBase()
	return errors.Join(err, h2err)
}

// Handler exposes the request handler (for in-memory tests and benchmarks).
func (s *Server) Handler() fasthttp.RequestHandler { return s.handle }

func (s *Server) handle(fc *fasthttp.RequestCtx) {
	if rt := s.route(fc); rt != nil {
		s.serveAugmented(fc, rt)
		return
	}
	s.passthrough(fc, s.passUpstream(fc))
}

// passthrough forwards a route camproxy does not augment, untouched.
func (s *Server) passthrough(fc *fasthttp.RequestCtx, up *Upstream) {
	start := time.Now()
	res := s.forward(fc, up, fc.PostBody(), false, styleFor(fc), nil)
	s.m.Requests.WithLabelValues(up.Name, "", statusLabel(res.status)).Inc()
	s.m.RequestDuration.WithLabelValues(up.Name, "").Observe(time.Since(start).Seconds())
}

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

func statusLabel(code int) string { return strconv.Itoa(code) }

type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.l.Debug("fasthttp", "msg", format, "args", args)
}
