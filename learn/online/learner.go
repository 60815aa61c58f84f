// Package online owns the online learner (learn: in the config): RCL's reflect →
// mutate step (package learn) run on the live traffic of an experiment's champion arm,
// each new playbook version tried as a candidate arm of the running experiment under
// Thompson sampling, and promoted or stopped on the shared reward statistics. A
// Learner is one experiment's; the process that serves the experiment (app) makes one
// per experiment with learn.enabled and reaches it through Runtime, the four things a
// learner needs of it.
//
// Design:
//   - One learner state, learn-state.json in learn.store, says which arm is the
//     champion, which versions are candidates (arm learn-vN serves version N), which
//     were stopped or retired, and the counters at the last step. Every replica polls
//     it every learn.check_every and rebuilds its runtime when its generation moved,
//     so the fleet serves the same versions; versions are immutable files, loaded
//     once.
//   - Only the holder of the learner lease writes it: it runs the steps and decides
//     promotions. With a Redis store the lease is SET NX PX learn.lease_ttl, renewed
//     by a compare-and-set script every ttl/3 and released at shutdown; a replica
//     that dies loses it after the TTL and another takes over. With a directory or an
//     S3 store the process is the only learner (run one replica, or use Redis).
//   - A step runs when the champion has learn.every new rewarded episodes (the shared
//     reward statistics count them, across the fleet with Redis) and fewer than
//     learn.max_candidates candidates run. Its batch is the champion's episodes
//     rewarded since the previous step's, read from learn.from: only its own
//     experiment's (replay.InExperiment).
//   - With the learner on, the experiment runs under adaptive allocation whether or
//     not experiment.adaptive.enabled is set: candidates get traffic by Thompson
//     sampling, and the guardrail (worse than the control) stops them. The learner
//     also compares each candidate with the champion once both have
//     learn.min_episodes rewarded episodes: P(candidate > champion) ≥ 1 −
//     promote_alpha promotes it, ≤ promote_alpha stops it.
//   - A promoted candidate becomes the champion; the old champion's arm leaves the
//     experiment (its live episodes finish on it: the arm is stored on the episode),
//     unless it is the control arm, which always stays.
//   - Every decision is a replay event of type learn.
//   - With learn.guidance_file, each step also runs CLEAR's contrastive reflection on
//     the buffer's tasks that now have mixed outcomes and no guidance there yet, and
//     appends it: the rag arm reading that file reloads it.
//
// The files: learner.go the Learner, its loop and lease tenure; state.go the shared
// state; decide.go the leader's round (judging candidates, running a step); serve.go
// what a replica serves and shows; lease.go the lease; metrics.go the series.
package online

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/learn"
	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/playbook/storage"
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/trainer"
)

// Runtime is what a learner needs of the process serving its experiment.
type Runtime interface {
	// Rebuild builds the serving runtime again and activates it: the learner's
	// served state (Shape) changed. Calls in flight finish on the old one.
	Rebuild() error
	// Stats are the shared reward statistics of the named arms of experiment exp.
	Stats(ctx context.Context, exp string, arms []string) (map[string]policies.Stats, error)
	// Stopped are the arms of experiment exp the adaptive guardrail stopped (worse
	// than the control); nil when none runs it.
	Stopped(exp string) map[string]bool
	// Record takes a learn event for the replay buffer.
	Record(ev *replay.LearnEvent)
}

// StepFunc runs one optimiser step on base; version is the number the result will
// be written as. The default is learn.Step with the configured models.
type StepFunc func(ctx context.Context, base *playbook.Playbook, version int, batch learn.Batch) (*learn.StepResult, error)

// PairFunc builds a batch from rewarded episodes; the default is learn.Pair.
type PairFunc func(episodes []*replay.Episode, size int, seed uint64) []learn.Item

// Spec is what a learner is made from: a reload keeps the running learner of an
// experiment whose Spec did not change.
type Spec struct {
	Experiment             string
	Learn                  config.Learn
	Control, Initial, From string
	Seed                   config.Augmenter // the initial champion's augmenter
	Sole                   bool             // the one-experiment form: unlabelled episodes are its
}

// SpecOf is the Spec of experiment view's learner (view is one of
// config.PerExperiment); sole says the config has the one-experiment form.
func SpecOf(view *config.Config, sole bool) Spec {
	s := Spec{Experiment: view.Experiment.Name, Learn: view.Learn, Control: view.Experiment.Control(), Initial: view.LearnChampion(),
		From: view.LearnFrom(), Sole: sole}
	for _, arm := range view.Experiment.Arms {
		if arm.Name == s.Initial && arm.Augmenter != config.AugmenterNone {
			s.Seed = view.Augmenters[arm.Augmenter]
		}
	}
	return s
}

// Options are what a caller may replace.
type Options struct {
	Step    StepFunc         // nil = learn.Step with learn:'s models
	Pair    PairFunc         // nil = learn.Pair
	Now     func() time.Time // nil = time.Now
	Logger  *slog.Logger     // nil = slog.Default
	Metrics *Metrics         // nil = series registered nowhere
	// ObserveLease is told the outcome of every call on a Redis lease (not called
	// without one): the process's readiness reports it.
	ObserveLease func(error)
}

// Learner runs the loop of one experiment on one replica.
type Learner struct {
	rt       Runtime
	spec     Spec // what it was made from
	cfg      config.Learn
	exp      string // experiment name
	control  string
	initial  string // learn.champion, else the control
	seedFrom config.Augmenter
	from     string
	own      replay.Selection // its experiment's episodes
	store    storage.Store
	versions *storage.Versions
	lease    lease
	replica  string // the id this replica holds the lease under
	observe  func(error)
	step     StepFunc
	pair     PairFunc
	guide    guideFunc // nil unless learn.guidance_file
	now      func() time.Time
	log      *slog.Logger

	cur     atomic.Pointer[serving] // what this replica's runtime is built from
	cache   sync.Map                // version → *playbook.Playbook (immutable)
	st      *state                  // the lease holder's working copy (loop goroutine only)
	stats   atomic.Pointer[map[string]policies.Stats]
	leader  atomic.Bool
	retryAt time.Time // after a failed step (loop goroutine only)
	fails   int
	// lagSince is when the learner began waiting for counted episodes to reach the buffer.
	lagSince time.Time

	stop context.CancelFunc
	done chan struct{}

	m series
}

// New opens the store of spec's learner and makes the models; it makes no network
// call (Load reads the state).
func New(ctx context.Context, rt Runtime, spec Spec, o Options) (*Learner, error) {
	lc := spec.Learn
	store, err := storage.OpenStore(ctx, lc.Store)
	if err != nil {
		return nil, fmt.Errorf("learn.store: %w", err)
	}
	exp := spec.Experiment
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	l := &Learner{rt: rt, spec: spec, cfg: lc, exp: exp, control: spec.Control, initial: spec.Initial, seedFrom: spec.Seed,
		from: spec.From, own: replay.Selection{Experiment: exp, Labelled: !spec.Sole}, store: store,
		versions: &storage.Versions{Store: store}, replica: replicaID(), step: o.Step, pair: o.Pair,
		now: o.Now, log: log.With("component", "learn", "experiment", exp), done: make(chan struct{})}
	if l.now == nil {
		l.now = time.Now
	}
	if l.pair == nil {
		l.pair = learn.Pair
	}
	if l.step == nil {
		if l.step, err = modelStep(ctx, lc, l.log); err != nil {
			_ = store.Close()
			return nil, err
		}
	}
	if lc.GuidanceFile != "" {
		if l.guide, err = modelGuide(ctx, lc, l.log); err != nil {
			_ = store.Close()
			return nil, err
		}
	}
	// The lease is the store's: experiments have distinct stores (config refuses a
	// shared one), so each has its own lease, and different experiments' learners
	// may lead on different replicas.
	if rs, ok := store.(*storage.RedisStore); ok {
		l.lease = &redisLease{rdb: rs.Client(), key: rs.Key() + ":learn-lease", id: l.replica, ttl: lc.LeaseTTL}
		l.observe = o.ObserveLease
	} else {
		l.lease = soleLease{}
	}
	m := o.Metrics
	if m == nil {
		m = NewMetrics(nil)
	}
	l.m = m.of(exp)
	return l, nil
}

// modelStep is learn.Step with the models learn: names.
func modelStep(ctx context.Context, lc config.Learn, log *slog.Logger) (StepFunc, error) {
	mo := trainer.ModelOptions{BaseURL: lc.BaseURL, APIKey: lc.APIKey, Region: lc.Region}
	spec := func(s string) string {
		if s != "" {
			return s
		}
		return lc.Model
	}
	reflector, err := trainer.NewModel(ctx, spec(lc.ReflectorModel), mo)
	if err != nil {
		return nil, fmt.Errorf("learn.reflector_model: %w", err)
	}
	mutator, err := trainer.NewModel(ctx, spec(lc.MutatorModel), mo)
	if err != nil {
		return nil, fmt.Errorf("learn.mutator_model: %w", err)
	}
	models := learn.Models{Reflector: reflector, Mutator: mutator}
	opts := learn.StepOptions{Limits: playbook.Limits{Prune: lc.Prune, MaxEntries: lc.MaxEntries}, MaxTurns: lc.MaxTurns, Logger: log}
	return func(ctx context.Context, base *playbook.Playbook, version int, b learn.Batch) (*learn.StepResult, error) {
		return learn.Step(ctx, models, base, version, b, opts)
	}, nil
}

// guideFunc refreshes CLEAR's guidance from the buffer's tasks.
type guideFunc func(ctx context.Context, tasks []*replay.Task) (learn.GuidanceResult, error)

// modelGuide is learn.RefreshGuidance on the reflector model, into learn.guidance_file.
func modelGuide(ctx context.Context, lc config.Learn, log *slog.Logger) (guideFunc, error) {
	spec := lc.ReflectorModel
	if spec == "" {
		spec = lc.Model
	}
	m, err := trainer.NewModel(ctx, spec, trainer.ModelOptions{BaseURL: lc.BaseURL, APIKey: lc.APIKey, Region: lc.Region})
	if err != nil {
		return nil, fmt.Errorf("learn.reflector_model: %w", err)
	}
	o := learn.GuidanceOptions{File: lc.GuidanceFile, MaxTasks: lc.GuidanceTasks,
		Reflect: trainer.Options{Model: m, ModelName: spec, Concurrency: 2, Logger: log}}
	return func(ctx context.Context, tasks []*replay.Task) (learn.GuidanceResult, error) {
		return learn.RefreshGuidance(ctx, tasks, o)
	}, nil
}

func replicaID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Experiment is the name of the learner's experiment.
func (l *Learner) Experiment() string { return l.exp }

// Spec is what the learner was made from.
func (l *Learner) Spec() Spec { return l.spec }

// Leader says this replica holds the experiment's learner lease.
func (l *Learner) Leader() bool { return l.leader.Load() }

// Replica is the id this replica holds the lease under (a Redis lease's value).
func (l *Learner) Replica() string { return l.replica }

// LeaseClient is the Redis client of the learner's lease, or nil without one.
func (l *Learner) LeaseClient() redis.UniversalClient {
	if r, ok := l.lease.(*redisLease); ok {
		return r.rdb
	}
	return nil
}

// Done is closed once the loop Start began has ended (Close).
func (l *Learner) Done() <-chan struct{} { return l.done }

// Load reads the shared state once, before the first runtime is built, so a
// restarted replica serves the learnt versions from its first call. A store that
// does not answer is retried by the loop.
func (l *Learner) Load(ctx context.Context) {
	st, err := l.readState(ctx)
	if err == nil && st != nil {
		var sv *serving
		if sv, err = l.prepare(ctx, st); err == nil {
			l.cur.Store(sv)
			l.gauges(st)
		}
	}
	if err != nil {
		l.log.Warn("learn: state not read at start; serving the configured arms until it is", "store", l.store.Location(), "err", err)
	}
}

// Start runs the loop until Close.
func (l *Learner) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	go l.loop(ctx)
}

// Close stops the loop (a step in flight is abandoned), releases the lease and
// closes the store.
func (l *Learner) Close() {
	if l.stop != nil {
		l.stop()
		<-l.done
	}
	// Always release: it deletes the lease only while it is this replica's, and a
	// renewal cancelled by the stop may have taken it while reporting it lost.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.lease.Release(ctx); err != nil {
		l.log.Warn("learn: lease not released; another replica takes over when it expires", "err", err)
	}
	_ = l.store.Close()
}

func (l *Learner) loop(ctx context.Context) {
	// The lease is renewed on its own clock: a step may take minutes of model calls.
	// done closes only once the renewals have stopped: Close then releases the lease
	// and closes the store with nothing left using them.
	tenure := newTenure()
	var renewing sync.WaitGroup
	renewing.Go(func() { l.holdLease(ctx, tenure) })
	defer close(l.done)
	defer renewing.Wait()
	t := time.NewTicker(l.cfg.CheckEvery)
	defer t.Stop()
	for {
		l.tick(ctx, tenure)
		select {
		case <-ctx.Done():
			tenure.end()
			return
		case <-t.C:
		}
	}
}

// tenure is one continuous holding of the lease: its context ends when the lease is
// lost, so a step in flight is abandoned rather than written by a former holder.
type tenure struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	id     int
}

func newTenure() *tenure { return &tenure{} }

// begin starts a tenure under parent (the learner's life) unless one runs.
func (t *tenure) begin(parent context.Context) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx == nil {
		t.ctx, t.cancel = context.WithCancel(parent)
		t.id++
	}
}

func (t *tenure) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cancel != nil {
		t.cancel()
		t.ctx, t.cancel = nil, nil
	}
}

// current is the tenure's context and number, or nil.
func (t *tenure) current() (context.Context, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ctx, t.id
}

// holdLease acquires and renews the lease every ttl/3 until ctx ends.
func (l *Learner) holdLease(ctx context.Context, t *tenure) {
	every := max(l.cfg.LeaseTTL/3, time.Millisecond)
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		l.renew(ctx, t, every)
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// renew is one lease call: held, this replica leads (a tenure runs); not held, it
// follows.
func (l *Learner) renew(ctx context.Context, t *tenure, budget time.Duration) {
	actx, cancel := context.WithTimeout(ctx, budget)
	held, err := l.lease.Acquire(actx)
	cancel()
	if l.observe != nil && ctx.Err() == nil {
		l.observe(err)
	}
	if err != nil && ctx.Err() == nil {
		l.log.Warn("learn: lease unavailable", "err", err)
	}
	if held && ctx.Err() == nil {
		if !l.leader.Swap(true) {
			l.log.Info("learn: this replica holds the learner lease", "replica", l.replica)
		}
		t.begin(ctx)
		l.m.leader.Set(1)
		return
	}
	if l.leader.Swap(false) {
		l.log.Warn("learn: learner lease lost")
	}
	t.end()
	l.m.leader.Set(0)
}

// tick is one round: a holder leads, the others follow the shared state.
func (l *Learner) tick(ctx context.Context, t *tenure) {
	lctx, id := t.current()
	if lctx == nil || !l.leader.Load() {
		l.st = nil // a later tenure starts from the stored state
		l.follow(ctx)
		return
	}
	if err := l.lead(lctx, id); err != nil && lctx.Err() == nil {
		l.log.Warn("learn: round failed; retrying", "err", err)
	}
}

// follow serves the stored state when its generation moved.
func (l *Learner) follow(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, l.cfg.CheckEvery+2*time.Second)
	defer cancel()
	st, err := l.readState(rctx)
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("learn: state not read; serving the versions already loaded", "err", err)
		}
		return
	}
	if st != nil {
		if err := l.serve(rctx, st); err != nil && ctx.Err() == nil {
			l.log.Warn("learn: versions not loaded; serving the previous ones", "err", err)
		}
	}
	l.refreshStats(rctx)
}
