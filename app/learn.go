package app

// This file is the online learner (learn: in the config): RCL's reflect → mutate step
// run on the live traffic of the champion arm, each new playbook version tried as a
// candidate arm of the running experiment under Thompson sampling. Each experiment
// with learn.enabled has a learner of its own (learners.go); what follows is one.
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

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/camproxy/camproxy/admin"
	"github.com/camproxy/camproxy/augment"
	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/learn"
	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/playbook/storage"
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/proxy"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/replay/location"
	"github.com/camproxy/camproxy/trainer"
)

// LearnStepFunc runs one optimiser step on base; version is the number the result
// will be written as. The default is learn.Step with the configured models.
type LearnStepFunc func(ctx context.Context, base *playbook.Playbook, version int, batch learn.Batch) (*learn.StepResult, error)

// LearnPairFunc builds a batch from rewarded episodes; the default is learn.Pair.
type LearnPairFunc func(episodes []*replay.Episode, size int, seed uint64) []learn.Item

// learnStateName is the learner's state in the store.
const learnStateName = "learn-state.json"

// Learner arm statuses.
const (
	armCandidate = "candidate"
	armChampion  = "champion"
	armStopped   = "stopped"
	armRetired   = "retired" // a champion that was replaced
)

// learnState is what every replica serves and the lease holder changes.
type learnState struct {
	Experiment      string `json:"experiment"`
	Gen             int64  `json:"gen"` // bumped on every change: replicas rebuild when it moves
	Champion        string `json:"champion"`
	ChampionVersion int    `json:"champion_version"`
	// BaseVersion, when set, is the version the next step starts from instead of the
	// champion's: a step that changed only counts (the same context) is written but
	// not tried, and its counts carry on.
	BaseVersion int        `json:"base_version,omitempty"`
	Removed     []string   `json:"removed,omitempty"` // configured arms that left the experiment (replaced champions)
	Arms        []learnArm `json:"arms"`              // one per version, oldest first
	Steps       int        `json:"steps"`
	LastN       float64    `json:"last_n"` // the champion's rewarded episodes at the last step
	Cutoff      time.Time  `json:"cutoff"` // the champion's episodes rewarded after this feed the next step
	OptState    string     `json:"optimizer_state,omitempty"`
	UpdatedAt   time.Time  `json:"updated_at"`
}

// learnArm is one version and the arm that serves it.
type learnArm struct {
	Arm       string    `json:"arm"`
	Version   int       `json:"version"`
	Parent    int       `json:"parent"`
	Iteration int       `json:"iteration"`
	Entries   int       `json:"entries"`
	Status    string    `json:"status"` // candidate | champion | stopped | retired
	Reason    string    `json:"reason,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	ChangedAt time.Time `json:"changed_at"`
}

func (s *learnState) clone() *learnState {
	c := *s
	c.Removed = slices.Clone(s.Removed)
	c.Arms = slices.Clone(s.Arms)
	return &c
}

func (s *learnState) arm(name string) *learnArm {
	for i := range s.Arms {
		if s.Arms[i].Arm == name {
			return &s.Arms[i]
		}
	}
	return nil
}

// candidates are the arms under trial.
func (s *learnState) candidates() []*learnArm {
	var out []*learnArm
	for i := range s.Arms {
		if s.Arms[i].Status == armCandidate {
			out = append(out, &s.Arms[i])
		}
	}
	return out
}

// served are the learner's own arms the experiment runs: candidates and a learnt champion.
func (s *learnState) served() []learnArm {
	var out []learnArm
	for _, a := range s.Arms {
		if isLearnArm(a.Arm) && (a.Status == armCandidate || a.Status == armChampion) {
			out = append(out, a)
		}
	}
	return out
}

func isLearnArm(name string) bool { return strings.HasPrefix(name, config.LearnArmPrefix) }

func learnArmName(version int) string { return config.LearnArmPrefix + strconv.Itoa(version) }

// serving is a state with the playbooks of its served arms, ready to build a runtime.
type serving struct {
	st        *learnState
	playbooks map[int]*playbook.Playbook
}

// learner runs the loop of one experiment on one replica.
type learner struct {
	a        *App
	spec     learnerSpec // what it was made from
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
	step     LearnStepFunc
	pair     LearnPairFunc
	guide    guideFunc // nil unless learn.guidance_file
	now      func() time.Time
	log      *slog.Logger

	cur     atomic.Pointer[serving] // what this replica serves
	cache   sync.Map                // version → *playbook.Playbook (immutable)
	st      *learnState             // the lease holder's working copy (loop goroutine only)
	stats   atomic.Pointer[map[string]policies.Stats]
	leader  atomic.Bool
	retryAt time.Time // after a failed step (loop goroutine only)
	fails   int
	// lagSince is when the learner began waiting for counted episodes to reach the buffer.
	lagSince time.Time

	stop context.CancelFunc
	done chan struct{}

	mSteps     prometheus.Counter
	mGuidance  prometheus.Counter
	mDecisions *prometheus.CounterVec // action
	mVersion   prometheus.Gauge
	mLeader    prometheus.Gauge
	leaseState *opState // the Redis lease's health; nil without one
	mCands     prometheus.Gauge
}

// newLearner opens the store of experiment view's learner and makes the models; it
// makes no network call.
func newLearner(a *App, view *config.Config, spec learnerSpec) (*learner, error) {
	lc := view.Learn
	store, err := storage.OpenStore(context.Background(), lc.Store)
	if err != nil {
		return nil, fmt.Errorf("learn.store: %w", err)
	}
	exp := view.Experiment.Name
	l := &learner{a: a, spec: spec, cfg: lc, exp: exp, control: spec.Control, initial: spec.Initial, seedFrom: spec.Seed,
		from: spec.From, own: replay.Selection{Experiment: exp, Labelled: !spec.Sole}, store: store,
		versions: &storage.Versions{Store: store}, step: a.learnOpts.LearnStep, pair: a.learnOpts.LearnPair,
		now: time.Now, log: a.log.With("component", "learn", "experiment", exp), done: make(chan struct{})}
	if l.pair == nil {
		l.pair = learn.Pair
	}
	if l.step == nil {
		if l.step, err = modelStep(lc, l.log); err != nil {
			_ = store.Close()
			return nil, err
		}
	}
	if lc.GuidanceFile != "" {
		if l.guide, err = modelGuide(lc, l.log); err != nil {
			_ = store.Close()
			return nil, err
		}
	}
	// The lease is the store's: experiments have distinct stores (config refuses a
	// shared one), so each has its own lease, and different experiments' learners
	// may lead on different replicas.
	id := replicaID()
	if rs, ok := store.(*storage.RedisStore); ok {
		l.lease = &redisLease{rdb: rs.Client(), key: rs.Key() + ":learn-lease", id: id, ttl: lc.LeaseTTL}
		l.leaseState = &opState{part: partLease, log: l.log}
		a.addLeasePart()
	} else {
		l.lease = soleLease{}
	}
	m := a.learnMetrics()
	l.mSteps, l.mGuidance = m.steps.WithLabelValues(exp), m.guidance.WithLabelValues(exp)
	l.mDecisions = m.decisions.MustCurryWith(prometheus.Labels{"experiment": exp})
	l.mVersion, l.mLeader, l.mCands = m.version.WithLabelValues(exp), m.leader.WithLabelValues(exp), m.candidates.WithLabelValues(exp)
	return l, nil
}

// modelStep is learn.Step with the models learn: names.
func modelStep(lc config.Learn, log *slog.Logger) (LearnStepFunc, error) {
	mo := trainer.ModelOptions{BaseURL: lc.BaseURL, APIKey: lc.APIKey, Region: lc.Region}
	spec := func(s string) string {
		if s != "" {
			return s
		}
		return lc.Model
	}
	reflector, err := trainer.NewModel(context.Background(), spec(lc.ReflectorModel), mo)
	if err != nil {
		return nil, fmt.Errorf("learn.reflector_model: %w", err)
	}
	mutator, err := trainer.NewModel(context.Background(), spec(lc.MutatorModel), mo)
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
func modelGuide(lc config.Learn, log *slog.Logger) (guideFunc, error) {
	spec := lc.ReflectorModel
	if spec == "" {
		spec = lc.Model
	}
	m, err := trainer.NewModel(context.Background(), spec, trainer.ModelOptions{BaseURL: lc.BaseURL, APIKey: lc.APIKey, Region: lc.Region})
	if err != nil {
		return nil, fmt.Errorf("learn.reflector_model: %w", err)
	}
	o := learn.GuidanceOptions{File: lc.GuidanceFile, MaxTasks: lc.GuidanceTasks,
		Reflect: trainer.Options{Model: m, ModelName: spec, Concurrency: 2, Logger: log}}
	return func(ctx context.Context, tasks []*replay.Task) (learn.GuidanceResult, error) {
		return learn.RefreshGuidance(ctx, tasks, o)
	}, nil
}

// refreshGuidance runs the guidance refresh on buf; its failure is logged, never the
// step's: the playbook and the guidance are separate products of the same buffer.
func (l *learner) refreshGuidance(ctx context.Context, buf *replay.Buffer) {
	if l.guide == nil {
		return
	}
	gctx, cancel := context.WithTimeout(ctx, l.cfg.StepTimeout)
	defer cancel()
	res, err := l.guide(gctx, buf.Tasks())
	l.mGuidance.Add(float64(res.Stats.Done))
	if err != nil {
		l.log.Warn("learn: guidance refresh failed; the playbook step goes on", "file", l.cfg.GuidanceFile,
			"written", res.Stats.Done, "err", err)
		return
	}
	if res.Qualified > 0 {
		l.log.Info("learn: guidance refreshed", "file", l.cfg.GuidanceFile, "tasks", res.Qualified, "written", res.Stats.Done,
			"failed", res.Stats.Failed)
	}
}

func replicaID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// load reads the shared state once, before the first runtime is built, so a restarted
// replica serves the learnt versions from its first call. A store that does not
// answer is retried by the loop.
func (l *learner) load(ctx context.Context) {
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

// start runs the loop until close.
func (l *learner) start() {
	ctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	go l.loop(ctx)
}

func (l *learner) close() {
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

func (l *learner) loop(ctx context.Context) {
	// The lease is renewed on its own clock: a step may take minutes of model calls.
	// done closes only once the renewals have stopped: close then releases the lease
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
func (l *learner) holdLease(ctx context.Context, t *tenure) {
	every := max(l.cfg.LeaseTTL/3, time.Millisecond)
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, every)
		held, err := l.lease.Acquire(actx)
		cancel()
		if l.leaseState != nil && ctx.Err() == nil {
			l.leaseState.observe(err)
		}
		if err != nil && ctx.Err() == nil {
			l.log.Warn("learn: lease unavailable", "err", err)
		}
		if held && ctx.Err() == nil {
			if !l.leader.Swap(true) {
				l.log.Info("learn: this replica holds the learner lease")
			}
			t.begin(ctx)
			l.mLeader.Set(1)
		} else {
			if l.leader.Swap(false) {
				l.log.Warn("learn: learner lease lost")
			}
			t.end()
			l.mLeader.Set(0)
		}
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// tick is one round: a holder leads, the others follow the shared state.
func (l *learner) tick(ctx context.Context, t *tenure) {
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
func (l *learner) follow(ctx context.Context) {
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

func (l *learner) readState(ctx context.Context) (*learnState, error) {
	b, err := l.store.Get(ctx, learnStateName)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st learnState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s in %s: %w", learnStateName, l.store.Location(), err)
	}
	if st.Experiment != l.exp {
		return nil, nil // another experiment's learner: nothing of it is served here
	}
	return &st, nil
}

func (l *learner) writeState(ctx context.Context, st *learnState) error {
	st.Gen++
	st.UpdatedAt = l.now().UTC()
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := l.store.Put(ctx, learnStateName, append(b, '\n')); err != nil {
		st.Gen--
		return fmt.Errorf("learn state in %s: %w", l.store.Location(), err)
	}
	return nil
}

// playbook returns version n, loaded once.
func (l *learner) playbook(ctx context.Context, n int) (*playbook.Playbook, error) {
	if pb, ok := l.cache.Load(n); ok {
		return pb.(*playbook.Playbook), nil
	}
	pb, err := l.versions.Load(ctx, n)
	if err != nil {
		return nil, err
	}
	l.cache.Store(n, pb)
	return pb, nil
}

// prepare loads the playbooks st serves.
func (l *learner) prepare(ctx context.Context, st *learnState) (*serving, error) {
	sv := &serving{st: st.clone(), playbooks: map[int]*playbook.Playbook{}}
	for _, arm := range st.served() {
		pb, err := l.playbook(ctx, arm.Version)
		if err != nil {
			return nil, err
		}
		sv.playbooks[arm.Version] = pb
	}
	return sv, nil
}

// serve makes st the state this replica serves, rebuilding its runtime when the
// generation moved.
func (l *learner) serve(ctx context.Context, st *learnState) error {
	if cur := l.cur.Load(); cur != nil && cur.st.Gen == st.Gen {
		return nil
	}
	sv, err := l.prepare(ctx, st)
	if err != nil {
		return err
	}
	prev := l.cur.Swap(sv)
	if err := l.a.rebuild(); err != nil {
		l.cur.CompareAndSwap(sv, prev)
		return fmt.Errorf("runtime with learn generation %d: %w", st.Gen, err)
	}
	l.gauges(st)
	l.log.Info("learn: serving", "generation", st.Gen, "champion", st.Champion, "version", st.ChampionVersion,
		"candidates", len(st.candidates()))
	return nil
}

func (l *learner) gauges(st *learnState) {
	l.mVersion.Set(float64(st.ChampionVersion))
	l.mCands.Set(float64(len(st.candidates())))
}

// shape is cfg as this replica serves it: the configured arms but those the learner
// removed, the learner's arms, and adaptive allocation on. sources serve the
// learner's arms.
func (l *learner) shape(cfg *config.Config) (*config.Config, map[string]proxy.ContextSource) {
	c := *cfg
	c.Experiment.Adaptive.Enabled = true
	sv := l.cur.Load()
	if sv == nil {
		return &c, nil
	}
	arms := make([]config.Arm, 0, len(cfg.Experiment.Arms)+len(sv.st.Arms))
	for _, a := range cfg.Experiment.Arms {
		if !slices.Contains(sv.st.Removed, a.Name) || a.Name == l.control {
			arms = append(arms, a)
		}
	}
	sources := map[string]proxy.ContextSource{}
	for _, a := range sv.st.served() {
		pb := sv.playbooks[a.Version]
		if pb == nil {
			continue
		}
		arms = append(arms, config.Arm{Name: a.Arm, Weight: 1, Augmenter: a.Arm})
		src := &versionSource{text: pb.Context(l.cfg.TopN), version: "v" + strconv.Itoa(a.Version)}
		sources[a.Arm] = proxy.ContextSource{Name: a.Arm, Version: src.Version, Timeout: time.Second, Augmenter: src}
	}
	c.Experiment.Arms = arms
	return &c, sources
}

// versionSource serves one immutable version's context.
type versionSource struct{ text, version string }

func (v *versionSource) Augment(context.Context, augment.Request) (string, error) {
	if v.text == "" {
		return "", augment.ErrEmpty
	}
	return v.text, nil
}

func (v *versionSource) Version() string { return v.version }

// refreshStats keeps the learner arms' shared statistics for the dashboard.
func (l *learner) refreshStats(ctx context.Context) map[string]policies.Stats {
	sv := l.cur.Load()
	if sv == nil {
		return nil
	}
	names := []string{sv.st.Champion, l.control}
	for _, a := range sv.st.Arms {
		names = append(names, a.Arm)
	}
	st, err := l.a.stats.Load(ctx, l.exp, names)
	if err != nil {
		return nil
	}
	l.stats.Store(&st)
	return st
}

// lead is one round of the lease holder: start or pick up the state, judge the
// candidates, maybe step.
func (l *learner) lead(ctx context.Context, tenureID int) error {
	if l.st == nil {
		st, err := l.readState(ctx)
		if err != nil {
			return err
		}
		if st == nil {
			if st, err = l.initState(ctx); err != nil {
				return err
			}
		}
		l.st = st
		l.log.Info("learn: leading", "tenure", tenureID, "champion", st.Champion, "version", st.ChampionVersion, "steps", st.Steps)
	}
	if err := l.serve(ctx, l.st); err != nil {
		return err
	}
	stats := l.refreshStats(ctx)
	if stats == nil {
		return errors.New("reward statistics not loaded")
	}
	if champN := stats[l.st.Champion].N; champN < l.st.LastN {
		l.st.LastN = 0 // the statistics restarted (in-memory statistics and a restart)
	}
	next := l.st.clone()
	events := l.judge(next, stats)
	champN := stats[next.Champion].N
	if len(events) > 0 {
		if err := l.commit(ctx, next, events); err != nil {
			return err
		}
	}
	if len(l.st.candidates()) >= l.cfg.MaxCandidates || champN-l.st.LastN < float64(l.cfg.Every) || l.now().Before(l.retryAt) {
		return nil
	}
	return l.runStep(ctx, champN)
}

// commit writes next and its events, then serves it.
func (l *learner) commit(ctx context.Context, next *learnState, events []*replay.LearnEvent) error {
	if err := l.writeState(ctx, next); err != nil {
		return err
	}
	l.st = next
	for _, ev := range events {
		l.a.record(ev)
		l.mDecisions.WithLabelValues(ev.Action).Inc()
		l.log.Info("learn: "+ev.Action, "arm", ev.Arm, "version", ev.Version, "champion", ev.Champion, "reason", ev.Reason)
	}
	return l.serve(ctx, next)
}

// initState starts a learner: the initial champion's playbook (empty for an arm
// without augmenter) becomes the next version of the store.
func (l *learner) initState(ctx context.Context) (*learnState, error) {
	seed := &playbook.Playbook{}
	if l.seedFrom.Type == config.AugmenterPlaybook {
		b, err := os.ReadFile(l.seedFrom.File)
		if err != nil {
			return nil, fmt.Errorf("the champion's playbook: %w", err)
		}
		if seed, err = playbook.Parse(b); err != nil {
			return nil, fmt.Errorf("the champion's playbook %s: %w", l.seedFrom.File, err)
		}
	}
	row, err := l.versions.Write(ctx, seed, storage.Version{Summary: "the playbook of arm " + l.initial + " when learning started"})
	if err != nil {
		return nil, err
	}
	now := l.now().UTC()
	st := &learnState{Experiment: l.exp, Champion: l.initial, ChampionVersion: row.Version,
		Arms: []learnArm{{Arm: l.initial, Version: row.Version, Entries: row.Entries, Status: armChampion, CreatedAt: now, ChangedAt: now}}}
	ev := l.event(st, replay.LearnVersion, &st.Arms[0], nil)
	ev.Reason = "the playbook learning starts from"
	if err := l.commit(ctx, st, []*replay.LearnEvent{ev}); err != nil {
		return nil, err
	}
	return st, nil
}

// judge stops and promotes candidates in st, returning the events.
func (l *learner) judge(st *learnState, stats map[string]policies.Stats) []*replay.LearnEvent {
	var guard map[string]bool
	if _, ad := l.a.experimentRun(l.exp); ad != nil {
		guard = ad.Stopped()
	}
	var events []*replay.LearnEvent
	var best *learnArm
	var bestP float64
	champ := stats[st.Champion]
	minN := float64(l.cfg.MinEpisodes)
	for _, c := range st.candidates() {
		cs := stats[c.Arm]
		if guard[c.Arm] {
			c.Status, c.Reason, c.ChangedAt = armStopped, "the adaptive guardrail: worse than the control "+l.control, l.now().UTC()
			events = append(events, l.event(st, replay.LearnStopped, c, stats, c.Arm, st.Champion, l.control))
			continue
		}
		if cs.N < minN || champ.N < minN {
			continue
		}
		p := policies.ProbBetter(cs, champ, 0, uint64(c.Version)<<32|uint64(cs.N))
		switch {
		case p >= 1-l.cfg.PromoteAlpha && p > bestP:
			best, bestP = c, p
		case p <= l.cfg.PromoteAlpha:
			c.Status, c.Reason, c.ChangedAt = armStopped, fmt.Sprintf("worse than the champion %s: P(better) = %.3f", st.Champion, p), l.now().UTC()
			ev := l.event(st, replay.LearnStopped, c, stats, c.Arm, st.Champion, l.control)
			ev.PBetter = &p
			events = append(events, ev)
		case l.cfg.MaxTrial > 0 && cs.N >= float64(l.cfg.MaxTrial):
			// No verdict after a long trial: as good as the champion, as far as can be
			// told. Stopping it frees the slot for the next step.
			c.Status, c.Reason, c.ChangedAt = armStopped,
				fmt.Sprintf("inconclusive after %d rewarded episodes: P(better than %s) = %.3f", int(cs.N), st.Champion, p), l.now().UTC()
			ev := l.event(st, replay.LearnStopped, c, stats, c.Arm, st.Champion, l.control)
			ev.PBetter = &p
			events = append(events, ev)
		}
	}
	if best != nil {
		old := st.Champion
		if o := st.arm(old); o != nil {
			o.Status, o.Reason, o.ChangedAt = armRetired, "replaced by "+best.Arm, l.now().UTC()
		}
		if !isLearnArm(old) && old != l.control && !slices.Contains(st.Removed, old) {
			st.Removed = append(st.Removed, old)
		}
		best.Status, best.ChangedAt = armChampion, l.now().UTC()
		best.Reason = fmt.Sprintf("beats the champion %s: P(better) = %.3f", old, bestP)
		st.Champion, st.ChampionVersion, st.BaseVersion = best.Arm, best.Version, 0
		// The new champion's own episodes feed the next step.
		st.LastN, st.Cutoff = 0, time.Time{}
		ev := l.event(st, replay.LearnPromoted, best, stats, best.Arm, old, l.control)
		ev.PBetter = &bestP
		events = append(events, ev)
	}
	return events
}

// runStep reflects on the champion's episodes rewarded since the last step and adds
// the version it makes as a candidate.
func (l *learner) runStep(ctx context.Context, champN float64) error {
	st := l.st
	src, err := replay.OpenSource(ctx, l.from)
	if err != nil {
		return fmt.Errorf("learn.from: %w", err)
	}
	var eps []*replay.Episode
	cutoff := st.Cutoff
	keep := func(ep *replay.Episode) error {
		if ep.Arm == st.Champion && ep.Reward != nil && ep.RewardAt.After(st.Cutoff) && l.own.Selects(ep) {
			eps = append(eps, ep)
			if ep.RewardAt.After(cutoff) {
				cutoff = ep.RewardAt
			}
		}
		return nil
	}
	var buf *replay.Buffer // the experiment's every episode: only a guidance refresh reflects on them all
	if l.guide != nil {
		var all *replay.Buffer
		if all, err = replay.Read(ctx, src); err == nil {
			buf = &replay.Buffer{}
			for _, ep := range all.Episodes {
				if l.own.Selects(ep) {
					buf.Episodes = append(buf.Episodes, ep)
					_ = keep(ep)
				}
			}
		}
	} else {
		// A fleet's buffer is far larger than one step: stream the champion's
		// episodes (the rest spill, bounded) and keep those rewarded since the last.
		sel := l.own
		sel.Arms = []string{st.Champion}
		_, err = replay.Episodes(ctx, src, replay.ReadOptions{Select: sel}, keep)
		replay.SortEpisodes(eps) // Buffer order, as a step has always seen them
	}
	if c, ok := src.(interface{ Close() error }); ok {
		_ = c.Close()
	}
	if err != nil {
		return fmt.Errorf("learn.from: %w", err)
	}
	// The replay buffer lags the statistics (sinks write in batches, rewards arrive
	// through other replicas): wait a little for the episodes that were counted.
	if len(eps) < l.cfg.Every {
		if l.lagSince.IsZero() {
			l.lagSince = l.now()
		}
		if l.now().Sub(l.lagSince) < max(2*l.cfg.CheckEvery, 2*time.Second) || len(eps) == 0 {
			l.log.Debug("learn: waiting for the champion's rewarded episodes to reach the replay buffer", "champion", st.Champion,
				"have", len(eps), "from", location.Redact(l.from))
			return nil
		}
	}
	l.lagSince = time.Time{}
	l.refreshGuidance(ctx, buf)
	items := l.pair(eps, l.cfg.BatchSize, uint64(st.Steps+1))
	if len(items) == 0 {
		return nil
	}
	parent := st.ChampionVersion
	if st.BaseVersion > 0 {
		parent = st.BaseVersion
	}
	base, err := l.playbook(ctx, parent)
	if err != nil {
		return err
	}
	m, err := l.versions.Manifest(ctx)
	if err != nil {
		return err
	}
	version := m.Latest() + 1
	sctx, cancel := context.WithTimeout(ctx, l.cfg.StepTimeout)
	res, err := l.step(sctx, base.Clone(), version, learn.Batch{Iteration: st.Steps + 1, Items: items, State: st.OptState})
	cancel()
	if err != nil {
		// Back off (doubling, up to 10 minutes) rather than call a failing model every round.
		l.fails++
		l.retryAt = l.now().Add(min(l.cfg.CheckEvery<<min(l.fails, 16), 10*time.Minute))
		return fmt.Errorf("step %d on %s (v%d): %w", st.Steps+1, st.Champion, parent, err)
	}
	l.fails, l.retryAt = 0, time.Time{}
	l.mSteps.Inc()
	next := st.clone()
	next.Steps++
	next.LastN, next.Cutoff, next.OptState = champN, cutoff, res.Summary
	var events []*replay.LearnEvent
	if res.Applied > 0 && res.Playbook != nil {
		sources := res.Sources
		if len(sources) == 0 {
			for _, it := range items {
				for _, ep := range []*replay.Episode{it.Failure, it.Success} {
					if ep != nil {
						sources = append(sources, ep.ID)
					}
				}
			}
		}
		row, err := l.versions.Write(ctx, res.Playbook, storage.Version{Parent: parent, Iteration: next.Steps,
			Summary: res.Summary, Sources: sources})
		if err != nil {
			return err
		}
		if row.Version != version {
			l.log.Warn("learn: the store's latest version moved during the step; another writer shares learn.store",
				"expected", version, "written", row.Version)
		}
		l.cache.Store(row.Version, res.Playbook)
		now := l.now().UTC()
		if res.Playbook.Context(l.cfg.TopN) == base.Context(l.cfg.TopN) {
			// Only counts changed: the agent would see the very same context, so a trial
			// could only tie. The version is kept and the next step starts from it.
			next.BaseVersion = row.Version
			ev := l.event(next, replay.LearnVersion, &learnArm{Version: row.Version, Parent: parent, Iteration: next.Steps,
				Entries: row.Entries, Reason: "the same context as the champion's (only counts changed): not tried; the next step starts from it"}, nil)
			ev.Applied = res.Applied
			events = append(events, ev)
		} else {
			next.Arms = append(next.Arms, learnArm{Arm: learnArmName(row.Version), Version: row.Version, Parent: parent,
				Iteration: next.Steps, Entries: row.Entries, Status: armCandidate, CreatedAt: now, ChangedAt: now})
			arm := &next.Arms[len(next.Arms)-1]
			ev := l.event(next, replay.LearnVersion, arm, nil)
			ev.Applied = res.Applied
			cand := l.event(next, replay.LearnCandidate, arm, l.lastStats(), arm.Arm, st.Champion, l.control)
			cand.Applied = res.Applied
			events = append(events, ev, cand)
		}
	} else {
		l.log.Info("learn: the step changed nothing; no version written", "step", next.Steps, "champion", st.Champion)
	}
	return l.commit(ctx, next, events)
}

// event describes a decision about arm in st (after the decision), with the
// statistics of the named arms.
func (l *learner) event(st *learnState, action string, arm *learnArm, stats map[string]policies.Stats, names ...string) *replay.LearnEvent {
	ev := &replay.LearnEvent{V: replay.Version, Type: replay.TypeLearn, ID: replay.NewEventID(), Experiment: l.exp, Action: action,
		Version: arm.Version, Arm: arm.Arm, Parent: arm.Parent, Champion: st.Champion, ChampionVersion: st.ChampionVersion,
		Iteration: arm.Iteration, Entries: arm.Entries, Reason: arm.Reason, At: l.now().UTC()}
	if len(stats) > 0 {
		ev.Stats = map[string]replay.LearnArmStats{}
		for _, name := range names {
			s, ok := stats[name]
			if !ok {
				continue
			}
			as := replay.LearnArmStats{N: s.N}
			if s.N > 0 {
				m := s.Mean()
				as.Mean = &m
			}
			ev.Stats[name] = as
		}
	}
	return ev
}

// lastStats are the statistics the learner loaded last (nil before any).
func (l *learner) lastStats() map[string]policies.Stats {
	if p := l.stats.Load(); p != nil {
		return *p
	}
	return nil
}

// view is the learner as the dashboard shows it.
func (l *learner) view() *admin.LearnState {
	sv := l.cur.Load()
	out := &admin.LearnState{Experiment: l.exp, Leader: l.leader.Load(), Store: l.store.Location()}
	if sv == nil {
		return out
	}
	st := sv.st
	out.Champion, out.ChampionVersion, out.Steps, out.Generation = st.Champion, st.ChampionVersion, st.Steps, st.Gen
	var stats map[string]policies.Stats
	if p := l.stats.Load(); p != nil {
		stats = *p
	}
	for _, a := range st.Arms {
		v := admin.LearnVersion{Version: a.Version, Arm: a.Arm, Parent: a.Parent, Iteration: a.Iteration, Entries: a.Entries,
			Status: a.Status, Reason: a.Reason, CreatedAt: a.CreatedAt}
		if s, ok := stats[a.Arm]; ok && s.N > 0 {
			m := s.Mean()
			v.Rewarded, v.MeanReward = int64(s.N), &m
		}
		out.Versions = append(out.Versions, v)
	}
	return out
}

// lease is the learner lease: one holder in a fleet.
type lease interface {
	// Acquire takes the lease, or renews it when this replica holds it.
	Acquire(ctx context.Context) (bool, error)
	Release(ctx context.Context) error
}

// soleLease is a store without a lease (a directory, S3): this process is the learner.
type soleLease struct{}

func (soleLease) Acquire(context.Context) (bool, error) { return true, nil }
func (soleLease) Release(context.Context) error         { return nil }

// redisLease is SET NX PX, renewed and released only by its holder.
type redisLease struct {
	rdb redis.UniversalClient
	key string
	id  string
	ttl time.Duration
}

// renewScript extends the lease only while it is still ours.
var renewScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`)

// releaseScript deletes the lease only while it is still ours.
var releaseScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

func (r *redisLease) Acquire(ctx context.Context) (bool, error) {
	ok, err := r.rdb.SetNX(ctx, r.key, r.id, r.ttl).Result()
	if err != nil || ok {
		return ok, err
	}
	n, err := renewScript.Run(ctx, r.rdb, []string{r.key}, r.id, r.ttl.Milliseconds()).Int()
	return n == 1, err
}

func (r *redisLease) Release(ctx context.Context) error {
	return releaseScript.Run(ctx, r.rdb, []string{r.key}, r.id).Err()
}
