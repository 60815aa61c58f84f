// Package proxy owns the data plane: fasthttp routes, the augmentation pipeline
// (parse → episode → arm → context → splice → forward → record), the upstream
// transport and the unbuffered stream tee.
package proxy

import (
	"context"
	"errors"
	"github.com/camproxy/camproxy/tracing"
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
	log    *slog.Logger
	m      *metrics.Metrics
	routes []route // adapters bound to their upstreams, in lookup order

	rt       atomic.Pointer[Runtime]
	sniff    atomic.Pointer[sniffListener]
	cache    ContextCache
	episodes episode.Store
	rec      Recorder
	stats    stats // episodes and context decisions by arm, for the dashboard
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
	var rec recorders
	for _, r := range o.Recorders {
		if r != nil {
			rec = append(rec, r)
		}
	}
	s := &Server{
		log: o.Logger, m: o.Metrics, routes: buildRoutes(o.Upstreams),
		cache: o.Cache, episodes: o.Episodes, rec: rec, maxBody: o.MaxBodyBytes,
		base: base, cancelBase: cancel,
		bufs: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }},
		tr:   o.Tracing,
	}
	if s.tr == nil {
		s.tr = tracing.Disabled()
	}
	for _, u := range o.Upstreams {
		if u != nil {
			u.init()
		}
	}
	s.rt.Store(o.Runtime)
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
	res := s.forward(fc, rt.up, fc.PostBody(), false, rt.style, nil)
	s.m.Requests.WithLabelValues(rt.up.Name, "", statusLabel(res.status)).Inc()
	s.m.RequestDuration.WithLabelValues(rt.up.Name, "").Observe(time.Since(start).Seconds())
}

func statusLabel(code int) string { return strconv.Itoa(code) }

type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.l.Debug("fasthttp", "msg", format, "args", args)
}
