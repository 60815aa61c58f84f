// Package proxy owns the data plane: fasthttp routes, the augmentation pipeline
// (parse → episode → arm → context → splice → forward → record), the upstream
// client (fasthttp pools, dialling directly or through the environment's HTTP proxy)
// and the unbuffered stream tee.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/augment"
	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/metrics"
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/registry"
	"github.com/camproxy/camproxy/tracing"
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
	Logger  *slog.Logger
	Metrics *metrics.Metrics
	// Upstreams by name: "openai" (required: it takes every call no other protocol
	// owns), "anthropic", "bedrock". A protocol without its upstream is not augmented;
	// its calls go to the OpenAI-compatible upstream untouched.
	Upstreams    map[string]*Upstream
	Runtime      *Runtime
	Cache        ContextCache
	Episodes     episode.Store
	Recorders    []Recorder // each sees every finished turn; none = record nothing
	MaxBodyBytes int
	// MaxAnswerBytes bounds the recorded copy of each answer (replay.max_answer_bytes;
	// <= 0: protocol.DefaultMaxAnswer); the agent always gets the answer whole.
	MaxAnswerBytes int
	ReadTimeout    time.Duration
	IdleTimeout    time.Duration
	Tracing        *tracing.Tracing // nil = tracing off
	// MaxInFlight and QueueTimeout are the admission limit (admit.go):
	// server.max_in_flight (<= 0: DefaultMaxInFlight) and server.queue_timeout.
	MaxInFlight  int
	QueueTimeout time.Duration
	// CPUWait is how long goroutines ready to run waited for a core lately, the
	// signal the admission limit adapts to (admit.go); nil: the Go scheduler's own
	// measure (runtime/metrics). Tests inject theirs.
	CPUWait func() time.Duration
}

// Runtime is what a config reload replaces while calls are in flight: the
// experiments (each with its match, task rules, placements, arms and augmenters) and
// the side-call rules. A call reads it once, at its start.
//
// Experiments are in match order (Choose); the default, if any, is last, with an
// empty match. A Runtime that lists none is one experiment made of the fields
// TaskRules … Augmenters, taking every call (the one-experiment form).
type Runtime struct {
	Experiments []*Experiment
	SideCalls   []protocol.SideCallRule // recognise an agent's auxiliary calls (side_calls)

	// The one-experiment form, read when Experiments is empty.
	TaskRules    []protocol.TaskRule
	Placement    Placement // default placement
	ArmPlacement map[string]Placement
	Policy       *policies.Policy
	Augmenters   map[string]ContextSource
}

// SetRuntime swaps in a new runtime; calls already started finish on the old one.
func (s *Server) SetRuntime(rt *Runtime) { s.rt.Store(rt.normalise()) }

// Runtime returns the runtime new calls use (its experiments listed).
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
	routes    []route              // registry protocols bound to their upstreams, in lookup order
	protocols []*registry.Protocol // the routes' protocols, for registry.Match

	rt       atomic.Pointer[Runtime]
	sniff    atomic.Pointer[sniffListener]
	cache    ContextCache
	episodes episode.Store
	rec      Recorder
	stats    stats        // episodes and context decisions by arm, for the dashboard
	sessions sessionIndex // task id → latest episode, for side calls (sidecall.go)
	maxBody  int
	// maxAnswer bounds each answer's decoded copy, the one recorded (Options.MaxAnswerBytes).
	maxAnswer int
	srv       *fasthttp.Server

	// base outlives shutdown's listener close so that in-flight upstream calls finish;
	// it is cancelled only when the grace period is over.
	base       context.Context
	cancelBase context.CancelFunc
	bufs       sync.Pool
	spliced    sync.Pool // *[]byte: spliced request bodies of at most maxPooledBody
	tr         *tracing.Tracing
	// sockets are the open WebSocket sessions (websocket.go), drained by Shutdown.
	sockets wsSockets
	// idle is server.idle_timeout: a keep-alive connection's, and an idle socket's.
	idle time.Duration
	// peerGone says whether a client left (peerClosed; tests of connections that are
	// not sockets set their own).
	peerGone func(net.Conn) bool
	// watching is the calls whose clients are watched while they wait on an upstream
	// (watch).
	watching watchList
	// limit is the admission limit every data-plane call passes (admit.go).
	limit *admission
}

// maxPooledBody is the largest body buffer kept for reuse. A larger one (bodies near
// server.max_body_bytes are rare) is allocated for its call and then let go: pooled,
// it would hold its memory long after the call.
const maxPooledBody = 4 << 20

// spliceBuf returns a buffer of capacity n or more for a spliced body.
func (s *Server) spliceBuf(n int) *[]byte {
	if n <= maxPooledBody {
		if b, ok := s.spliced.Get().(*[]byte); ok && cap(*b) >= n {
			return b
		}
	}
	b := make([]byte, 0, n)
	return &b
}

// putSpliceBuf keeps b for the next call once it was sent upstream: the client writes a
// request whole before it reads the answer's head, so b is no longer read.
func (s *Server) putSpliceBuf(b *[]byte) {
	if b != nil && cap(*b) <= maxPooledBody {
		s.spliced.Put(b)
	}
}

// New builds the data plane.
func New(o Options) *Server {
	base, cancel := context.WithCancel(context.Background())
	var rec recorders
	for _, r := range o.Recorders {
		if r != nil {
			rec = append(rec, r)
		}
	}
	s := &Server{
		log: o.Logger, m: o.Metrics,
		cache: o.Cache, episodes: o.Episodes, rec: rec, maxBody: o.MaxBodyBytes, maxAnswer: o.MaxAnswerBytes,
		base: base, cancelBase: cancel,
		bufs: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }},
		tr:   o.Tracing, idle: o.IdleTimeout,
		limit: newAdmission(o.MaxInFlight, o.QueueTimeout, cpuWaitOr(o.CPUWait)),
	}
	if s.m != nil {
		s.m.Admission.Set(s.limit.gauges)
	}
	s.routes, s.protocols = buildRoutes(o.Upstreams)
	if s.tr == nil {
		s.tr = tracing.Disabled()
	}
	for _, u := range o.Upstreams {
		if u != nil {
			u.init()
		}
	}
	s.SetRuntime(o.Runtime)
	s.srv = &fasthttp.Server{
		Handler:      s.handle,
		ErrorHandler: s.serverError,
		// fasthttp's errors then quote no request buffer (serverError names only a class).
		SecureErrorLogMessage: true,
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
		ReadBufferSize:               readBufferSize,
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
	sl := newSniffListener(ln, s.log, s.srv.ReadTimeout)
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
	sockets := s.sockets.drain() // each socket closes (1001) once its turn in flight ended
	err := s.srv.ShutdownWithContext(ctx)
	select {
	case <-sockets:
	case <-ctx.Done():
	}
	s.cancelBase()
	return errors.Join(err, h2err)
}

// Handler exposes the request handler (for in-memory tests and benchmarks).
func (s *Server) Handler() fasthttp.RequestHandler { return s.handle }

func (s *Server) handle(fc *fasthttp.RequestCtx) {
	// fasthttp has read the request as chunked (or by its Content-Length, for
	// identity); whatever follows on the connection is never read.
	if p := framingProblem(fc.Request.Header.RawHeaders()); p != "" {
		writeError(fc, styleFor(fc), framingError(p))
		fc.SetConnectionClose()
		return
	}
	// Past the limit the call is refused here, before any work; a WebSocket upgrade
	// holds a slot while its handshake is handled (its turns take their own).
	if !s.admit(fc) {
		return
	}
	defer s.released(fc)
	if len(fc.Request.Header.Peek("Upgrade")) > 0 && s.upgrade(fc) {
		return
	}
	rt, augmented := s.lookup(fc)
	if augmented {
		s.serveAugmented(fc, rt)
		return
	}
	s.passthrough(fc, rt)
}

// passthrough forwards a route camproxy does not augment, untouched.
func (s *Server) passthrough(fc *fasthttp.RequestCtx, rt *route) {
	start := time.Now()
	res := s.forward(fc, rt.up, fc.PostBody(), false, rt.Protocol, nil)
	s.m.Requests.WithLabelValues(rt.up.Name, "", "", statusLabel(res.status)).Inc()
	s.m.RequestDuration.WithLabelValues(rt.up.Name, "", "").Observe(time.Since(start).Seconds())
}

func statusLabel(code int) string { return strconv.Itoa(code) }

// framingProblem says why a request head frames its body ambiguously — two parsers
// (a front proxy and camproxy) could disagree on where the request ends — or "" when
// it does not (RFC 9112 §6.1, §6.3, §5.2). raw is the head's header lines as received.
// fasthttp v1.74 itself refuses repeated or non-numeric Content-Length, repeated
// Transfer-Encoding, codings other than chunked and identity, and Transfer-Encoding
// in HTTP/1.0; it keeps a request with both headers (framing it as chunked), honours
// identity, and unfolds folded lines: those are refused here.
func framingProblem(raw []byte) string {
	var cl, te bool
	for len(raw) > 0 {
		var line []byte
		line, raw, _ = bytes.Cut(raw, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return "a header line folded onto the next (obs-fold)"
		}
		key, value, _ := bytes.Cut(line, []byte(":"))
		switch {
		case bytes.EqualFold(key, []byte("Content-Length")):
			cl = true
		case bytes.EqualFold(key, []byte("Transfer-Encoding")):
			te = true
			if !bytes.EqualFold(bytes.Trim(value, " \t"), []byte("chunked")) {
				return "Transfer-Encoding other than chunked"
			}
		}
	}
	if cl && te {
		return "both Content-Length and Transfer-Encoding"
	}
	return ""
}

// fasthttpLogger logs what fasthttp reports at debug level. An error is logged as its
// class only: fasthttp's parse errors quote the request, Authorization included.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	for i, a := range args {
		var ne net.Error
		if err, ok := a.(error); ok && !errors.As(err, &ne) { // socket errors carry no request bytes
			_, args[i] = requestProblem(err)
		}
	}
	f.l.Debug("fasthttp: " + fmt.Sprintf(format, args...))
}
