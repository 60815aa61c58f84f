package learn

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/playbook/storage"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/trainer"
)

// Defaults of TrainOptions.
const (
	DefaultIterations = 10
	DefaultBatchSize  = 8
	DefaultGraduate   = 2
	DefaultEvict      = 3
	DefaultVal        = 0.2
	DefaultGroup      = 1
	// maxStateRunes bounds the optimizer state: the newest summaries that fit.
	maxStateRunes = 2000
)

// BestName is where Train writes the chosen version in its store.
const BestName = "playbook.json"

// TrainOptions configure the offline loop of `camproxy train playbook`.
type TrainOptions struct {
	Episodes []*replay.Episode // the buffer; only rewarded episodes are used
	Store    storage.Store     // versions, manifest and playbook.json go here
	Seed     *playbook.Playbook
	Models   Models

	Iterations int    // default DefaultIterations
	BatchSize  int    // items per batch; default DefaultBatchSize
	SampleSeed uint64 // the batch draw and the validation split

	// Rollouts, when set, score every version on the validation tasks and re-run the
	// replayed failed tasks (see Plan's doc for the replay rule).
	Rollouts           Rollouter
	Val                float64 // fraction of tasks held out for scoring (only with Rollouts); default 0.2
	Group              int     // rollouts per task; default 1
	RolloutConcurrency int     // rollouts at once; default 4

	Graduate int // a replayed task leaves the queue after this many passing rollouts; default 2
	Evict    int // … or after this many failures; default 3

	Step    StepOptions  // Journal is set from Journal
	Journal *FileJournal // nil = no resume
	// Label names what the options do not show (the model specs); it is part of the
	// run's fingerprint.
	Label    string
	Progress io.Writer        // one line per iteration; nil = none
	Now      func() time.Time // manifest times; nil = time.Now
}

func (o *TrainOptions) defaults() {
	if o.Iterations <= 0 {
		o.Iterations = DefaultIterations
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.Group <= 0 {
		o.Group = DefaultGroup
	}
	if o.RolloutConcurrency <= 0 {
		o.RolloutConcurrency = 4
	}
	if o.Graduate <= 0 {
		o.Graduate = DefaultGraduate
	}
	if o.Evict <= 0 {
		o.Evict = DefaultEvict
	}
	if o.Rollouts == nil {
		o.Val = 0
	}
	if o.Seed == nil {
		o.Seed = &playbook.Playbook{}
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	o.Step.defaults()
}

// Fingerprint identifies a run: everything that shapes its model conversations and
// rollouts (not the number of iterations: a longer rerun continues a shorter one).
// A journal written under another fingerprint is not reused.
func Fingerprint(o TrainOptions) string {
	o.defaults()
	h := sha256.New()
	eps := rewarded(o.Episodes)
	slices.SortFunc(eps, func(a, b *replay.Episode) int { return strings.Compare(a.ID, b.ID) })
	for _, ep := range eps {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%g\x00%v\n", ep.ID, ep.TaskID, ep.Task, *ep.Reward, trainer.Succeeded(ep))
	}
	temp := "default"
	if o.Step.Temperature != nil {
		temp = strconv.FormatFloat(*o.Step.Temperature, 'g', -1, 64)
	}
	fmt.Fprintf(h, "label=%s batch=%d seed=%d scored=%v val=%g group=%d graduate=%d evict=%d limits=%+v turns=%d toolbytes=%d tokens=%d temp=%s prompts=%s\n",
		o.Label, o.BatchSize, o.SampleSeed, o.Rollouts != nil, o.Val, o.Group, o.Graduate, o.Evict, o.Step.Limits,
		o.Step.MaxTurns, o.Step.MaxToolBytes, o.Step.MaxTokens, temp, o.Step.Prompts.Version())
	h.Write(o.Seed.JSON())
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func rewarded(eps []*replay.Episode) []*replay.Episode {
	var out []*replay.Episode
	for _, ep := range eps {
		if ep != nil && ep.Reward != nil && !math.IsNaN(*ep.Reward) {
			out = append(out, ep)
		}
	}
	return out
}

// Plan is what a run will reflect on.
//
// Sampling: each iteration's batch holds at most one item per task. Failure replay
// comes first: tasks in the replay queue (oldest first, at most half the batch) are
// shown again, each time with another of their recorded failures (and a success of
// the task where there is one). The rest of the batch is fresh items in Pair's order
// (failures first; a new pass over the buffer, with another seed, when it runs out),
// skipping tasks already queued.
//
// Replay: a task enters the queue when one of its failures is reflected on; that
// recorded failure is its first fail. The buffer is fixed, so without rollouts a
// replayed task's recorded runs fail again: each replay counts one more fail, and the
// task is evicted after Evict reflections. With rollouts, after each iteration every
// task of the batch that showed a failure is run Group times on the playbook the
// iteration produced: each passing run counts a pass, each failing one a fail; the
// task graduates at Graduate passes, or is evicted at Evict fails.
type Plan struct {
	Train, Val []string // task ids
	Episodes   int      // rewarded episodes of the training tasks
	Failures   int
	Iterations []PlannedBatch // the batches as they will be without rollouts
}

// PlannedBatch is one iteration's batch.
type PlannedBatch struct {
	Iteration int
	Items     []Item
	Replayed  int // the first Replayed items are replays of queued tasks
}

// MakePlan splits the tasks and draws the batches (as they will be without rollouts:
// with them, a task that graduates early leaves its place to another).
func MakePlan(o TrainOptions) *Plan {
	o.defaults()
	p, s := split(o)
	for it := 1; it <= o.Iterations; it++ {
		items, replayed := s.batch()
		p.Iterations = append(p.Iterations, PlannedBatch{Iteration: it, Items: items, Replayed: replayed})
		s.update(items, replayed, nil)
	}
	return p
}

func split(o TrainOptions) (*Plan, *sampler) {
	eps := rewarded(o.Episodes)
	var ids []string
	for _, ep := range eps {
		ids = append(ids, ep.TaskID)
	}
	val := map[string]bool{}
	if o.Val > 0 {
		var named []string
		for _, id := range ids {
			if id != "" {
				named = append(named, id)
			}
		}
		val = trainer.SplitByTask(named, o.Val, int64(o.SampleSeed))
	}
	p := &Plan{}
	var train []*replay.Episode
	seen := map[string]bool{}
	for _, ep := range eps {
		if val[ep.TaskID] {
			if !seen[ep.TaskID] {
				p.Val = append(p.Val, ep.TaskID)
			}
		} else {
			train = append(train, ep)
			p.Episodes++
			if !trainer.Succeeded(ep) {
				p.Failures++
			}
			if !seen[ep.TaskID] {
				p.Train = append(p.Train, ep.TaskID)
			}
		}
		seen[ep.TaskID] = true
	}
	slices.Sort(p.Train)
	slices.Sort(p.Val)
	return p, newSampler(train, o.BatchSize, o.SampleSeed, o.Graduate, o.Evict)
}

// sampler draws the batches (see Plan).
type sampler struct {
	train              []*replay.Episode
	size               int
	seed               uint64
	graduate, evict    int
	stream             []Item
	pos, epoch         int
	failures           map[string][]Item // a task's failures, paired, in Pair's order
	queue              []*queued
	graduated, evicted int
}

type queued struct {
	task          string
	shown         int
	passes, fails int
}

func newSampler(train []*replay.Episode, size int, seed uint64, graduate, evict int) *sampler {
	s := &sampler{train: train, size: size, seed: seed, graduate: graduate, evict: evict,
		stream: Pair(train, 0, seed), failures: map[string][]Item{}}
	for _, it := range s.stream {
		if it.Failure != nil {
			k := taskKey(it.Failure)
			s.failures[k] = append(s.failures[k], it)
		}
	}
	// Within a task, Pair's order is the failures' draw order.
	for k, its := range s.failures {
		slices.SortStableFunc(its, func(a, b Item) int {
			return cmp.Compare(draw(seed, a.Failure.ID), draw(seed, b.Failure.ID))
		})
		s.failures[k] = its
	}
	return s
}

func itemTask(it Item) string { return taskKey(cmp.Or(it.Failure, it.Success)) }

func (s *sampler) batch() (items []Item, replayed int) {
	in := map[string]bool{}
	for _, q := range s.queue {
		if len(items) >= s.size/2 {
			break
		}
		its := s.failures[q.task]
		items = append(items, its[q.shown%len(its)])
		q.shown++
		in[q.task] = true
	}
	replayed = len(items)
	queuedTasks := map[string]bool{}
	for _, q := range s.queue {
		queuedTasks[q.task] = true
	}
	for scanned := 0; len(items) < s.size && scanned < len(s.stream); scanned++ {
		if s.pos >= len(s.stream) {
			s.epoch++
			s.pos = 0
			s.stream = Pair(s.train, 0, s.seed+uint64(s.epoch))
		}
		it := s.stream[s.pos]
		s.pos++
		k := itemTask(it)
		if in[k] || queuedTasks[k] {
			continue
		}
		items = append(items, it)
		in[k] = true
	}
	return items, replayed
}

// update moves the queue after an iteration; outcomes (nil without rollouts) are
// each failed task's rollout results on the iteration's playbook.
func (s *sampler) update(items []Item, replayed int, outcomes map[string][]bool) {
	byTask := map[string]*queued{}
	for _, q := range s.queue {
		byTask[q.task] = q
	}
	for i, it := range items {
		if it.Failure == nil {
			continue
		}
		k := itemTask(it)
		q := byTask[k]
		if i >= replayed && q == nil {
			q = &queued{task: k, shown: 1, fails: 1}
			s.queue = append(s.queue, q)
			byTask[k] = q
		} else if outcomes == nil && q != nil {
			q.fails++ // the recorded runs are what they were: failed again
		}
		if q == nil {
			continue
		}
		for _, pass := range outcomes[k] {
			if pass {
				q.passes++
			} else {
				q.fails++
			}
		}
	}
	s.queue = slices.DeleteFunc(s.queue, func(q *queued) bool {
		switch {
		case q.passes >= s.graduate:
			s.graduated++
			return true
		case q.fails >= s.evict:
			s.evicted++
			return true
		}
		return false
	})
}

// TrainResult is what a run did.
type TrainResult struct {
	Versions         []storage.Version // the versions of this run, v1 first, as in the manifest
	Best             int               // the version copied to playbook.json
	Scored           bool
	Iterations       int // iterations run
	Calls, Replayed  int // model calls made, and answered from the journal
	Rollouts         int // rollouts run
	RolloutsReplayed int // rollouts answered from the journal
	Usage            trainer.Usage
	Graduated        int
	Evicted          int
}

// ErrNoEpisodes: the buffer has no rewarded episode to learn from.
var ErrNoEpisodes = errors.New("no rewarded episode to learn from")

type run struct {
	o        TrainOptions
	versions *storage.Versions
	res      *TrainResult
	tasks    map[string]string // task id → its text
	val      []string          // the validation tasks
	mu       sync.Mutex
}

// Train runs the offline loop: v1 is the seed; each iteration reflects on a batch
// and writes the next version when it applied an edit; with Rollouts each version is
// scored on the validation tasks. The best version (by mean reward, ties: the older;
// without rollouts the last) is written to playbook.json. With a Journal, a rerun
// sends no call whose answer it has and writes the same files.
func Train(ctx context.Context, o TrainOptions) (*TrainResult, error) {
	o.defaults()
	if o.Store == nil || o.Models.Reflector == nil || o.Models.Mutator == nil {
		return nil, errors.New("learn: Train needs a store and both models")
	}
	plan, s := split(o)
	if plan.Episodes == 0 {
		return nil, ErrNoEpisodes
	}
	if o.Rollouts != nil && len(plan.Val) == 0 {
		return nil, errors.New("learn: scoring needs validation tasks: raise Val, or the buffer has a single task")
	}
	if o.Journal != nil {
		o.Step.Journal = o.Journal
	}
	r := &run{o: o, versions: &storage.Versions{Store: o.Store, Now: o.Now}, res: &TrainResult{Scored: o.Rollouts != nil},
		tasks: map[string]string{}, val: plan.Val}
	for _, ep := range o.Episodes {
		if ep != nil && r.tasks[ep.TaskID] == "" {
			r.tasks[ep.TaskID] = ep.Task
		}
	}

	cur := o.Seed.Clone()
	curV := 1
	if err := r.ensure(ctx, cur, storage.Version{Version: 1}); err != nil {
		return r.res, err
	}
	if err := r.score(ctx, 1, cur); err != nil {
		return r.res, err
	}
	state := ""
	for it := 1; it <= o.Iterations; it++ {
		items, replayed := s.batch()
		if len(items) == 0 {
			break
		}
		sr, err := Step(ctx, o.Models, cur, curV+1, Batch{Iteration: it, Items: items, State: state}, o.Step)
		if err != nil {
			return r.res, err
		}
		r.res.Iterations = it
		r.res.Calls += sr.Calls
		r.res.Replayed += sr.Replayed
		r.res.Usage.Input += sr.Usage.Input
		r.res.Usage.Output += sr.Usage.Output
		wrote := ""
		if sr.Applied > 0 {
			curV++
			cur = sr.Playbook
			if err := r.ensure(ctx, cur, storage.Version{Version: curV, Parent: curV - 1, Iteration: it,
				Summary: sr.Summary, Sources: sr.Sources}); err != nil {
				return r.res, err
			}
			wrote = fmt.Sprintf("wrote v%d", curV)
			if err := r.score(ctx, curV, cur); err != nil {
				return r.res, err
			}
		} else {
			wrote = fmt.Sprintf("no edit, v%d stands", curV)
		}
		state = rollState(state, it, sr.Summary)
		var outcomes map[string][]bool
		if o.Rollouts != nil {
			if outcomes, err = r.replayRollouts(ctx, it, items, cur); err != nil {
				return r.res, err
			}
		}
		s.update(items, replayed, outcomes)
		r.progress(it, items, replayed, sr, cur, wrote, curV)
	}
	r.res.Graduated, r.res.Evicted = s.graduated, s.evicted
	return r.res, r.finish(ctx, curV)
}

// ensure writes version row.Version of pb, or checks that the store already holds
// exactly it (a resumed or repeated run).
func (r *run) ensure(ctx context.Context, pb *playbook.Playbook, row storage.Version) error {
	m, err := r.versions.Manifest(ctx)
	if err != nil {
		return err
	}
	if v, ok := m.Get(row.Version); ok {
		data, err := r.o.Store.Get(ctx, v.File)
		if err != nil {
			return fmt.Errorf("learn: v%d: %w", row.Version, err)
		}
		if !bytes.Equal(data, pb.JSON()) {
			return fmt.Errorf("learn: %s in %s holds another playbook than this run makes: %w (use another --out)",
				v.File, r.o.Store.Location(), ErrJournalMismatch)
		}
		r.res.Versions = append(r.res.Versions, *v)
		return nil
	}
	if latest := m.Latest(); latest != row.Version-1 {
		return fmt.Errorf("learn: %s holds versions up to v%d; this run writes v%d next: %w (use another --out)",
			r.o.Store.Location(), latest, row.Version, ErrJournalMismatch)
	}
	v, err := r.versions.Write(ctx, pb, row)
	if err != nil {
		return err
	}
	r.res.Versions = append(r.res.Versions, v)
	return nil
}

// rolloutJob is one rollout with its journal key.
type rolloutJob struct {
	key string
	req RolloutRequest
}

// rollouts runs jobs (journaled ones are answered from the journal), at most
// RolloutConcurrency at once; results are in jobs' order.
func (r *run) rollouts(ctx context.Context, jobs []rolloutJob) ([]RolloutResult, error) {
	out := make([]RolloutResult, len(jobs))
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, r.o.RolloutConcurrency)
	var wg sync.WaitGroup
	for i, j := range jobs {
		if r.o.Journal != nil {
			if res, ok := r.o.Journal.LookupRollout(j.key); ok {
				out[i] = res
				r.mu.Lock()
				r.res.RolloutsReplayed++
				r.mu.Unlock()
				continue
			}
		}
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			res, err := r.o.Rollouts.Rollout(ctx, j.req)
			if err == nil && r.o.Journal != nil {
				err = r.o.Journal.RecordRollout(j.key, res)
			}
			if err != nil {
				errs[i] = err
				return
			}
			out[i] = res
			r.mu.Lock()
			r.res.Rollouts++
			r.mu.Unlock()
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// score runs version n on the validation tasks and records its mean reward.
func (r *run) score(ctx context.Context, n int, pb *playbook.Playbook) error {
	if r.o.Rollouts == nil {
		return nil
	}
	text := pb.Context(0)
	var jobs []rolloutJob
	for _, task := range r.val {
		for k := range r.o.Group {
			jobs = append(jobs, rolloutJob{key: fmt.Sprintf("score/v%d/%s/%d", n, task, k),
				req: RolloutRequest{TaskID: task, Task: r.tasks[task], Context: text}})
		}
	}
	results, err := r.rollouts(ctx, jobs)
	if err != nil {
		return fmt.Errorf("learn: scoring v%d: %w", n, err)
	}
	sum := 0.0
	for _, res := range results {
		sum += res.Reward
	}
	// Rounded to 9 decimals: a mean of equal rewards reads as that reward, not 0.20000000000000004.
	mean := math.Round(sum/float64(len(results))*1e9) / 1e9
	m, err := r.versions.Manifest(ctx)
	if err != nil {
		return err
	}
	v, ok := m.Get(n)
	if !ok {
		return fmt.Errorf("learn: v%d is not in the manifest", n)
	}
	if v.Scored && v.Score != nil && *v.Score == mean && v.Runs == len(results) {
		r.setScore(n, mean, len(results))
		return nil // a repeated run: the manifest says it already
	}
	v.Scored, v.Score, v.Runs = true, &mean, len(results)
	if err := r.versions.PutManifest(ctx, m); err != nil {
		return err
	}
	r.setScore(n, mean, len(results))
	return nil
}

func (r *run) setScore(n int, mean float64, runs int) {
	for i := range r.res.Versions {
		if r.res.Versions[i].Version == n {
			r.res.Versions[i].Scored, r.res.Versions[i].Score, r.res.Versions[i].Runs = true, &mean, runs
		}
	}
}

// replayRollouts runs each task of the batch that showed a failure Group times on
// the iteration's playbook: the evidence that graduates or evicts it.
func (r *run) replayRollouts(ctx context.Context, it int, items []Item, pb *playbook.Playbook) (map[string][]bool, error) {
	text := pb.Context(0)
	var jobs []rolloutJob
	var tasks []string
	for _, item := range items {
		if item.Failure == nil || item.Failure.TaskID == "" {
			continue
		}
		id := item.Failure.TaskID
		for k := range r.o.Group {
			jobs = append(jobs, rolloutJob{key: fmt.Sprintf("it%d/rollout/%s/%d", it, id, k),
				req: RolloutRequest{TaskID: id, Task: r.tasks[id], Context: text}})
			tasks = append(tasks, itemTask(item))
		}
	}
	results, err := r.rollouts(ctx, jobs)
	if err != nil {
		return nil, fmt.Errorf("learn: replay rollouts of iteration %d: %w", it, err)
	}
	out := map[string][]bool{}
	for i, res := range results {
		pass := res.Reward >= 1
		if res.Success != nil {
			pass = *res.Success
		}
		out[tasks[i]] = append(out[tasks[i]], pass)
	}
	return out, nil
}

// finish copies the chosen version to playbook.json.
func (r *run) finish(ctx context.Context, last int) error {
	best := last
	if r.o.Rollouts != nil {
		bestScore := math.Inf(-1)
		for _, v := range r.res.Versions { // v1 first: ties keep the older
			if v.Score != nil && *v.Score > bestScore {
				best, bestScore = v.Version, *v.Score
			}
		}
	}
	r.res.Best = best
	data, err := r.o.Store.Get(ctx, storage.FileName(best))
	if err != nil {
		return fmt.Errorf("learn: %w", err)
	}
	if old, err := r.o.Store.Get(ctx, BestName); err == nil && bytes.Equal(old, data) {
		return nil
	}
	return r.o.Store.Put(ctx, BestName, data)
}

// rollState appends an iteration's summary to the optimizer state, keeping the
// newest summaries that fit in maxStateRunes.
func rollState(state string, it int, summary string) string {
	summary = strings.Join(strings.Fields(summary), " ")
	if summary == "" {
		return state
	}
	parts := append(splitState(state), fmt.Sprintf("iteration %d: %s", it, clipRunes(summary, maxStateRunes)))
	total := 0
	keep := len(parts)
	for i := len(parts) - 1; i >= 0; i-- {
		total += len([]rune(parts[i])) + 1
		if total > maxStateRunes {
			break
		}
		keep = i
	}
	return strings.Join(parts[keep:], "\n")
}

func splitState(state string) []string {
	if state == "" {
		return nil
	}
	return strings.Split(state, "\n")
}

func (r *run) progress(it int, items []Item, replayed int, sr *StepResult, pb *playbook.Playbook, wrote string, curV int) {
	fails := 0
	for _, item := range items {
		if item.Failure != nil {
			fails++
		}
	}
	refused := 0
	for _, op := range sr.Ops {
		if op.Error != "" {
			refused++
		}
	}
	line := fmt.Sprintf("iteration %d/%d: batch %d (%d failures, %d replayed), %d edits applied (%d refused), %d entries, %s, tokens %s in / %s out",
		it, r.o.Iterations, len(items), fails, replayed, sr.Applied, refused, len(pb.Entries), wrote,
		trainer.FormatTokens(sr.Usage.Input), trainer.FormatTokens(sr.Usage.Output))
	if sr.Replayed > 0 {
		line += fmt.Sprintf(", %d turns from the journal", sr.Replayed)
	}
	for _, v := range r.res.Versions {
		if v.Version == curV && v.Score != nil && strings.HasPrefix(wrote, "wrote") {
			line += fmt.Sprintf(", score %.4f", *v.Score)
		}
	}
	fmt.Fprintln(r.o.Progress, line)
}

// EstimateTokens is a rough input-token cost of a step on items with playbook pb:
// each role reads every file once in MaxToolBytes pieces and re-sends its
// conversation each turn (as trainer.Estimate does for `train reflect`).
func EstimateTokens(items []Item, pb *playbook.Playbook, o StepOptions) (files, input int64) {
	o.defaults()
	index, all, _ := RenderBatch(Batch{Items: items})
	all[FilePlaybook] = string(pb.JSON())
	pieces := 0
	for _, text := range all {
		files += int64(len(text))
		pieces += (len(text) + o.MaxToolBytes - 1) / o.MaxToolBytes
	}
	turns := int64(min(pieces+2, o.MaxTurns))
	files /= 4
	for _, sys := range []string{o.Prompts.ReflectorSystem + o.Prompts.ReflectorUser, o.Prompts.MutatorSystem + o.Prompts.MutatorUser} {
		prompt := int64(len(sys)+2*len(index)+len(pb.Lines())+2000) / 4 // + the tool definitions
		input += turns*prompt + files*(turns+1)/2
	}
	return files, input
}
