// Package app assembles one camproxy process from its config: Redis clients, augmenters,
// cache, episode store, experiment policy, the data plane and the admin plane, and runs
// them until shutdown.
package app

import (
	"context"
	"errors"
	"fmt"
	"github.com/camproxy/camproxy/tracing"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/admin"
	"github.com/camproxy/camproxy/augment"
	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/internal/redislog"
	"github.com/camproxy/camproxy/learn/online"
	"github.com/camproxy/camproxy/metrics"
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/registry"
	"github.com/camproxy/camproxy/proxy"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/replay/location"
)

// App is one running camproxy.
type App struct {
	cfg      *config.Config
	log      *slog.Logger
	Registry *prometheus.Registry
	Metrics  *metrics.Metrics
	Proxy    *proxy.Server
	Episodes episode.Store
	Cache    *augment.Cache
	Recorder *replay.Recorder // nil when Options.Recorder replaced it
	admin    *http.Server
	redis    []redis.UniversalClient
	// redisByURL: one client per distinct Redis URL; redisChecks: /readyz per part.
	redisByURL  map[string]redis.UniversalClient
	redisChecks []admin.Check
	tracing     *tracing.Tracing
	upstreams   map[string]*proxy.Upstream // by provider, for the start-up line

	stats   policies.StatsStore // reward statistics for adaptive allocation
	buildMu sync.Mutex          // one runtime built and activated at a time (reloads, the learners)
	mu      sync.Mutex          // guards cfg, run, learn and serving across reloads
	run     *runtime
	stopRun context.CancelFunc
	// learn is a learner per experiment with learn.enabled (learners.go, learn/online); nil without.
	learn            *learnerSet
	learnOpts        Options // the learners' step and pair
	learnM           *online.Metrics
	learnMetricsOnce sync.Once
	leasePartOnce    sync.Once
	serving          bool // between Start and Shutdown: new learners start at once

	dataLn, adminLn net.Listener
	serveErr        chan error
	closeOnce       sync.Once
}

// recorderFlush bounds the replay flush at shutdown, after the data plane has stopped.
const recorderFlush = 30 * time.Second

// Options tune what a caller (tests, benchmarks) may replace.
type Options struct {
	Logger *slog.Logger
	// Env reads the upstreams' proxy settings (HTTP_PROXY, HTTPS_PROXY, NO_PROXY and
	// their lower-case forms); nil = os.Getenv. Tests give their own.
	Env      func(string) string
	Recorder proxy.Recorder
	// Version is the service.version of exported spans.
	Version string
	// RedisCooldown is how long the parts with a local fallback (the episode store,
	// the context cache) skip a Redis that failed (0 = their defaults, 5 s); tests
	// shorten it.
	RedisCooldown time.Duration
	// CacheRedisTimeout bounds each of the context cache's Redis commands (0 = its
	// default, 500 ms); tests of a fleet on a loaded machine lengthen it.
	CacheRedisTimeout time.Duration
	// LearnStep and LearnPair replace the online learner's optimiser step and batch
	// sampler (tests, the demo); nil = learn.Step with learn:'s models, learn.Pair.
	LearnStep online.StepFunc
	LearnPair online.PairFunc
}

// New builds a camproxy from a validated config.
func New(cfg *config.Config, o Options) (*App, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	// go-redis logs through a process-wide logger, a line per failed dial; every
	// Redis client camproxy serves with is made below, so route it here, once.
	redislog.Route(log)
	// The admin API holds task texts, contexts and episodes: a config that is not
	// validated (a caller's own) gets the same refusal as config.Load's.
	if err := cfg.AdminExposure(); err != nil {
		return nil, err
	}
	if cfg.AdminOpen() {
		log.Warn("ADMIN API OPEN TO EVERY HOST: admin.allow_unauthenticated is set and admin.token is not; anyone who reaches " +
			cfg.Server.AdminListen + " reads task texts, contexts and episodes and posts feedback and rollouts. " +
			"Set admin.token (e.g. ${CAMPROXY_ADMIN_TOKEN}) or bind server.admin_listen to 127.0.0.1")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a := &App{cfg: cfg, log: log, Registry: reg, Metrics: metrics.New(reg), serveErr: make(chan error, 2),
		learnOpts: Options{LearnStep: o.LearnStep, LearnPair: o.LearnPair}}

	env := o.Env
	if env == nil {
		env = os.Getenv
	}
	ups, err := buildUpstreams(cfg, env)
	if err != nil {
		return nil, err
	}
	a.upstreams = ups
	rec := o.Recorder
	if rec == nil {
		if a.Recorder, err = openRecorder(cfg, log, a.Metrics); err != nil {
			return nil, err
		}
		rec = a.Recorder
	}
	recent := admin.NewRecent(0) // the dashboard's recent episodes: it records every turn too

	cacheRedis, err := a.redisClient(cfg.Cache.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("cache.redis_url: %w", err)
	}
	a.Cache = augment.NewCache(augment.CacheOptions{LocalEntries: cfg.Cache.LocalEntries, TTL: cfg.Cache.TTL, Cooldown: o.RedisCooldown, OpTimeout: o.CacheRedisTimeout}, cacheRedis, log)
	if cacheRedis != nil {
		a.addRedisPart(partCache, cacheRedis, a.Cache.RedisState)
	}

	switch cfg.Episodes.Store {
	case "redis":
		rdb, err := a.redisClient(cfg.Episodes.EffectiveRedisURL(cfg.Cache))
		if err != nil {
			return nil, fmt.Errorf("episodes.redis_url: %w", err)
		}
		// Redis down or killed: serve on a local copy, pick Redis up again when it answers.
		var lastErr atomic.Pointer[error]
		fb := episode.NewFallback(episode.NewRedis(rdb, cfg.Episodes.IdleTimeout), episode.NewMemory(cfg.Episodes.IdleTimeout, nil),
			o.RedisCooldown, nil, func(ok bool, err error) {
				if ok {
					log.Info("episode store: Redis is back; episodes are shared again")
					return
				}
				lastErr.Store(&err)
				log.Error("episode store: Redis failed; serving episodes from this instance's memory until it is back", "err", err)
			})
		a.Episodes = fb
		a.addRedisPart(partEpisodes, rdb, func() (bool, error) {
			if fb.Up() {
				return true, nil
			}
			if p := lastErr.Load(); p != nil {
				return false, *p
			}
			return false, errors.New("redis failed")
		})
	default:
		a.Episodes = episode.NewMemory(cfg.Episodes.IdleTimeout, nil)
	}

	// Reward statistics outlive reloads; with Redis the whole fleet shares them.
	a.stats = policies.NewMemoryStats()
	if cacheRedis != nil {
		st := &opState{part: partStats, log: log}
		a.stats = trackedStats{policies.NewRedisStats(cacheRedis), st}
		a.addRedisPart(partStats, cacheRedis, st.state)
	}
	// Each experiment's learner, with its learnt versions read before the first
	// runtime is built: they are served from the first call.
	plan, err := a.planLearners(cfg)
	if err != nil {
		return nil, err
	}
	a.learn = plan.next
	run, err := a.buildRuntime(cfg)
	if err != nil {
		a.discardLearners(plan)
		return nil, err
	}

	if a.tracing, err = tracing.New(tracing.Options{Endpoint: cfg.Tracing.Endpoint, Headers: cfg.Tracing.Headers,
		ServiceName: cfg.Tracing.ServiceName, SampleRatio: cfg.Tracing.SampleRatio, Version: o.Version}); err != nil {
		return nil, err
	}
	a.Proxy = proxy.New(proxy.Options{
		Logger: log, Metrics: a.Metrics, Upstreams: ups, Runtime: run.rt,
		Cache: a.Cache, Episodes: a.Episodes, Recorders: []proxy.Recorder{rec, recent}, MaxBodyBytes: cfg.Server.MaxBodyBytes, MaxAnswerBytes: cfg.Replay.MaxAnswerBytes, ReadTimeout: cfg.Server.ReadTimeout,
		IdleTimeout: cfg.Server.IdleTimeout, Tracing: a.tracing,
		MaxInFlight: cfg.Server.MaxInFlight, QueueTimeout: cfg.Server.QueueTimeout,
	})
	a.activate(run)

	checks := []admin.Check{{Name: "config", Fn: func(context.Context) error { return nil }},
		{Name: "replay", Fn: func(context.Context) error { return dirWritable(cfg.Replay.SpoolDir) }}}
	// Each Redis-backed part (addRedisPart): degraded, named, never down.
	a.streamParts(cfg)
	checks = append(checks, a.redisChecks...)
	checks = append(checks, a.leaseCheck())
	var backlog admin.ReplayBacklog // none when Options.Recorder replaced the recorder
	if a.Recorder != nil {
		backlog = a.Recorder
	}
	a.admin = &http.Server{
		Handler: admin.New(admin.Options{Logger: log, Gatherer: reg, Metrics: a.Metrics, Ready: checks,
			Episodes: a.Episodes, Record: a.record, Reward: a.observeReward, Token: cfg.Admin.Token,
			LoopbackOnly: cfg.Admin.LoopbackOnly, AllowUnauthenticated: cfg.Admin.AllowUnauthenticated, Pprof: cfg.Admin.Pprof,
			Experiment: a.experiment, Traffic: a.Proxy, Backlog: backlog, Recent: recent,
			Rollouts: admin.RolloutOptions{Runner: cfg.Rollouts.Runner, MaxInFlight: cfg.Rollouts.MaxInFlight, DefaultTimeout: cfg.Rollouts.DefaultTimeout, QueueTimeout: cfg.Rollouts.QueueTimeout}}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	return a, nil
}

// buildUpstreams makes an upstream per provider in the registry (the keys of
// proxy.Options.Upstreams) from its config block, its proxy settings read with env.
// A provider with no default base and none configured (Azure) has no upstream: its
// calls go to the fallback's untouched.
func buildUpstreams(cfg *config.Config, env func(string) string) (map[string]*proxy.Upstream, error) {
	ups := make(map[string]*proxy.Upstream, len(registry.Providers))
	for _, p := range registry.Providers {
		b := cfg.Upstreams.Get(p.Name)
		key := "upstreams." + p.Name
		raw := b.BaseURL
		if p.BaseFrom != nil {
			raw, key = p.BaseFrom(b.Region, b.Endpoint), key+".endpoint"
		} else {
			key += ".base_url"
		}
		if raw == "" {
			continue
		}
		base, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		ws, err := proxy.ParseWSMode(b.WebSocket)
		if err != nil {
			return nil, fmt.Errorf("upstreams.%s.websocket: %w", p.Name, err)
		}
		var auth proxy.Auth
		switch {
		case p.Auth.Kind == registry.AuthSigV4:
			auth = &proxy.SigV4{Credentials: awsCredentials(), Region: b.Region, Endpoint: b.Endpoint != "", Signer: v4.NewSigner()}
		case b.APIKey != "":
			auth = proxy.KeyAuth(p.Auth, b.APIKey)
		}
		ups[p.Name] = &proxy.Upstream{Name: p.Name, Base: base, Auth: auth, FirstByteTimeout: b.FirstByteTimeout,
			IdleTimeout: b.IdleTimeout, WebSocket: ws, Env: env}
	}
	return ups, nil
}

// awsCredentials is the AWS default credential chain. It is resolved lazily, at the
// first call that needs signing (loading it reads env and files only), and a broken
// AWS profile must not stop a camproxy that serves no Bedrock: its calls then fail
// with the reason.
func awsCredentials() aws.CredentialsProvider {
	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{}, fmt.Errorf("loading the AWS configuration: %w", err)
		})
	}
	return awsCfg.Credentials
}

// record takes a replay event from the control plane (rewards).
func (a *App) record(ev any) {
	if a.Recorder != nil {
		a.Recorder.Add(ev)
	}
}

func openRecorder(cfg *config.Config, log *slog.Logger, m *metrics.Metrics) (*replay.Recorder, error) {
	host, _ := os.Hostname()
	writer := fmt.Sprintf("%s-%d", host, os.Getpid())
	var sinks []replay.Named
	for i, uri := range cfg.Replay.Sinks {
		s, err := replay.OpenSink(context.Background(), uri, replay.OpenOptions{Writer: writer})
		if err != nil {
			return nil, fmt.Errorf("replay.sinks[%d]: %w", i, err)
		}
		sinks = append(sinks, replay.Named{Sink: s, URI: location.Redact(uri)})
	}
	rec, err := replay.NewRecorder(sinks, replay.RecorderOptions{Queue: cfg.Replay.Queue, SpoolDir: cfg.Replay.SpoolDir, Logger: log, Metrics: m,
		KeepMedia: cfg.Replay.KeepMedia})
	if err != nil {
		return nil, fmt.Errorf("replay.spool_dir: %w", err)
	}
	return rec, nil
}

func dirWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".ready-*")
	if err != nil {
		return err
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}

// fileLoadTimeout bounds the first load of a file-backed augmenter (a rag store's
// embeddings included) at start.
const fileLoadTimeout = time.Minute

// versioned is an augmenter whose Version goes into the context cache key.
type versioned interface {
	augment.Augmenter
	Version() string
}

// CAMOptions maps a cam augmenter's config to the CAM client's options. Serving
// and `camproxy train` both build their CAM prompt through it: the CAM is trained
// on exactly the prompt it is served.
func CAMOptions(name string, ac config.Augmenter) augment.CAMOptions {
	return augment.CAMOptions{Name: name, BaseURL: ac.BaseURL, Model: ac.Model, APIKey: ac.APIKey,
		SystemPrompt: ac.SystemPrompt, UserTemplate: ac.UserTemplate, MaxTokens: ac.MaxTokens,
		Temperature: ac.Temperature, ExtraBody: ac.ExtraBody}
}

func buildAugmenters(cfg *config.Config, m *metrics.Metrics, log *slog.Logger) (map[string]proxy.ContextSource, error) {
	hc := &http.Client{Transport: augment.NewTransport()}
	out := map[string]proxy.ContextSource{}
	for name, ac := range cfg.Augmenters {
		var (
			a   versioned
			err error
		)
		switch ac.Type {
		case config.AugmenterRAG:
			// A missing or unparsable guidance file fails the start; it is not a config error.
			ctx, cancel := context.WithTimeout(context.Background(), fileLoadTimeout)
			a, err = augment.NewRAG(ctx, augment.RAGOptions{Name: name, GuidanceFile: ac.GuidanceFile, TopK: ac.TopK,
				MinScore: ac.MinScore, Logger: log, Embeddings: augment.EmbeddingOptions{BaseURL: ac.Embeddings.BaseURL,
					Model: ac.Embeddings.Model, APIKey: ac.Embeddings.APIKey}}, hc)
			cancel()
		case config.AugmenterPlaybook:
			a, err = augment.NewPlaybook(augment.PlaybookOptions{Name: name, File: ac.File, TopN: ac.TopN, Logger: log})
		default:
			a, err = augment.NewCAM(CAMOptions(name, ac), hc)
		}
		if err != nil {
			return nil, fmt.Errorf("augmenters.%s: %w", name, err)
		}
		g := augment.NewGuard(name, a, ac.Timeout, augment.BreakerOptions{Failures: ac.Breaker.Failures, OpenFor: ac.Breaker.OpenFor}, m)
		out[name] = proxy.ContextSource{Name: name, Version: a.Version, Timeout: ac.Timeout, Augmenter: g}
	}
	return out, nil
}

func buildPolicy(cfg *config.Config) (*policies.Policy, map[string]proxy.Placement, error) {
	ex := cfg.Experiment
	arms := make([]policies.Arm, 0, len(ex.Arms))
	place := map[string]proxy.Placement{}
	for _, a := range ex.Arms {
		arms = append(arms, policies.Arm{Name: a.Name, Weight: a.Weight, Augmenter: a.Augmenter})
		if a.Placement != nil {
			place[a.Name] = proxy.Placement{Mode: protocol.Placement(a.Placement.Mode), Template: a.Placement.Template}
		}
	}
	p, err := policies.New(ex.Name, policies.Sticky(ex.Sticky), ex.AllowOverride, arms)
	if err != nil {
		return nil, nil, err
	}
	return p, place, nil
}

// Start binds both listeners and serves in the background.
func (a *App) Start() error {
	var err error
	if a.dataLn, err = net.Listen("tcp", a.cfg.Server.Listen); err != nil {
		return fmt.Errorf("server.listen %s: %w", a.cfg.Server.Listen, err)
	}
	if a.adminLn, err = net.Listen("tcp", a.cfg.Server.AdminListen); err != nil {
		_ = a.dataLn.Close()
		return fmt.Errorf("server.admin_listen %s: %w", a.cfg.Server.AdminListen, err)
	}
	go func() { a.serveErr <- a.Proxy.Serve(a.dataLn) }()
	a.mu.Lock()
	a.serving = true
	for _, l := range a.learn.all() {
		l.Start()
	}
	a.mu.Unlock()
	go func() {
		if err := a.admin.Serve(a.adminLn); !errors.Is(err, http.ErrServerClosed) {
			a.serveErr <- err
		}
	}()
	attrs := []any{"listen", a.dataLn.Addr().String(), "admin", a.adminLn.Addr().String()}
	for _, p := range registry.Providers { // in the registry's order
		if u := a.upstreams[p.Name]; u != nil {
			attrs = append(attrs, p.Name, u.Base.Redacted())
		}
	}
	a.log.Info("camproxy serving", append(attrs, "experiments", a.cfg.ExperimentNames())...)
	return nil
}

// Addr is the data plane's bound address.
func (a *App) Addr() string { return a.dataLn.Addr().String() }

// AdminAddr is the admin plane's bound address.
func (a *App) AdminAddr() string { return a.adminLn.Addr().String() }

// Run serves until ctx is done, then shuts down gracefully.
func (a *App) Run(ctx context.Context) error {
	if err := a.Start(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case err := <-a.serveErr:
		_ = a.Shutdown(context.Background())
		return fmt.Errorf("serve: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), a.cfg.Server.ShutdownGrace)
	defer cancel()
	return a.Shutdown(sctx)
}

// Shutdown stops accepting and waits for in-flight calls and streams until ctx is done.
func (a *App) Shutdown(ctx context.Context) error {
	var err error
	a.closeOnce.Do(func() {
		a.log.Info("camproxy shutting down")
		a.mu.Lock()
		if a.stopRun != nil {
			a.stopRun()
		}
		a.serving = false
		learners := a.learn.all()
		a.mu.Unlock()
		for _, l := range learners {
			l.Close() // first: a step in flight is abandoned, the lease released
		}
		err = errors.Join(a.Proxy.Shutdown(ctx), a.admin.Shutdown(ctx))
		if a.Recorder != nil {
			// After the data plane, with a budget of its own: the grace period may be
			// spent on long streams, and accepted events must still reach a sink or
			// the spool.
			rctx, cancel := context.WithTimeout(context.Background(), recorderFlush)
			err = errors.Join(err, a.Recorder.Close(rctx))
			cancel()
		}
		tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = errors.Join(err, a.tracing.Shutdown(tctx)) // the spans of the last calls
		cancel()
		_ = a.Episodes.Close()
		for _, r := range a.redis {
			_ = r.Close()
		}
	})
	return err
}
