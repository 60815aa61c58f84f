package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Defaults of Options.
const (
	DefaultMaxSteps    = 30
	DefaultConcurrency = 4
	// DefaultAbortAfter: when this many jobs have failed and none succeeded, the run
	// stops (a wrong model name, key or endpoint fails every job alike).
	DefaultAbortAfter = 5
	// maxCallsPerTurn bounds the tool calls answered in one model turn; the rest get
	// an error, so that one turn cannot flood the context.
	maxCallsPerTurn = 8
)

// Options configure Reflect.
type Options struct {
	Model        Model
	ModelName    string  // recorded in each record: the --model spec
	Out          string  // the JSON Lines output, appended to; jobs already in it are skipped
	Prompts      Prompts // zero value = DefaultPrompts
	MaxSteps     int     // model turns per job, the last one asked to answer; default 30
	MaxToolBytes int     // a tool result is cut here; default DefaultMaxToolBytes
	MaxTokens    int     // per model answer; 0 = the server's default
	Temperature  *float64
	Concurrency  int // jobs at once; default 4
	Retry        RetryPolicy
	WorkDir      string // where sandboxes are made; "" = the system temp dir
	Logger       *slog.Logger
	Progress     *Progress // nil = none
	AbortAfter   int       // stop when this many jobs failed before any succeeded; default 5, < 0 = never

	// prepareSandbox, when set, runs on each sandbox before the agent starts (tests
	// plant files and links in it).
	prepareSandbox func(dir string) error
}

func (o *Options) defaults() {
	if o.Prompts == (Prompts{}) {
		o.Prompts = DefaultPrompts()
	}
	if o.MaxSteps <= 0 {
		o.MaxSteps = DefaultMaxSteps
	}
	if o.MaxToolBytes <= 0 {
		o.MaxToolBytes = DefaultMaxToolBytes
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.AbortAfter == 0 {
		o.AbortAfter = DefaultAbortAfter
	}
	o.Retry.defaults()
}

// ErrAborted is returned when the first jobs all failed (see Options.AbortAfter).
var ErrAborted = errors.New("reflect: stopped")

// reflector runs the jobs of one Reflect call.
type reflector struct {
	o       Options
	version string
	out     *outFile
	abort   context.CancelCauseFunc

	mu    sync.Mutex
	stats Stats
}

// Reflect runs every job not already in o.Out, o.Concurrency at a time, and appends
// each job's record as it finishes. A failed job is logged and counted; the others go
// on, unless the first o.AbortAfter jobs all failed (ErrAborted). It returns the
// run's stats, and ctx's error when it was cancelled (the jobs
// written so far stay written, and a rerun picks up the rest).
func Reflect(ctx context.Context, jobs []*Job, o Options) (Stats, error) {
	o.defaults()
	if o.Model == nil {
		return Stats{}, errors.New("reflect: no model")
	}
	out, scan, err := openOutput(o.Out)
	if err != nil {
		return Stats{}, fmt.Errorf("reflect: output %s: %w", o.Out, err)
	}
	defer out.Close()
	if scan.torn > 0 {
		o.Logger.Warn("cut a torn last line left by an interrupted run", "out", o.Out, "bytes", scan.torn)
	}
	if scan.bad > 0 {
		o.Logger.Warn("lines of the output are not records; they are left as they are", "out", o.Out, "lines", scan.bad)
	}
	parent := ctx
	ctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	r := &reflector{o: o, version: o.Prompts.Version(), out: out, abort: abort}
	r.stats = Stats{Jobs: len(jobs), Started: time.Now()}
	var pending []*Job
	seen := map[string]bool{}
	for _, j := range jobs {
		switch {
		case scan.done[j.Key]:
			r.stats.Resumed++
		case seen[j.Key]:
			r.stats.Jobs-- // the same subset twice in the plan: one job
		default:
			seen[j.Key] = true
			pending = append(pending, j)
		}
	}
	o.Progress.update(r.stats, "")

	work := make(chan *Job)
	var wg sync.WaitGroup
	for range min(o.Concurrency, max(1, len(pending))) {
		wg.Go(func() {
			for j := range work {
				r.run(ctx, j)
			}
		})
	}
feed:
	for _, j := range pending {
		select {
		case work <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()

	r.mu.Lock()
	r.stats.Finished = time.Now()
	s := r.stats
	r.mu.Unlock()
	o.Progress.finish(s)
	if err := parent.Err(); err != nil {
		return s, err
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrAborted) {
		return s, cause
	}
	return s, nil
}

// run does one job and records its outcome.
func (r *reflector) run(ctx context.Context, job *Job) {
	if ctx.Err() != nil {
		return
	}
	rec, steps, err := r.reflect(ctx, job)
	if err == nil {
		err = r.out.Append(rec)
	}
	r.mu.Lock()
	var event string
	failed := false
	switch {
	case err == nil:
		r.stats.Done++
		event = fmt.Sprintf("%s: written (%d steps, %s tokens)", job.TaskID, steps, FormatTokens(rec.Tokens.Input+rec.Tokens.Output))
	case ctx.Err() != nil:
		// Interrupted, not failed: a rerun does it.
	default:
		r.stats.Failed++
		failed = true
		event = fmt.Sprintf("%s: FAILED: %v", job.TaskID, err)
		if r.o.AbortAfter > 0 && r.stats.Done == 0 && r.stats.Failed >= r.o.AbortAfter {
			r.abort(fmt.Errorf("%w: the first %d jobs all failed, the last with: %v", ErrAborted, r.stats.Failed, err))
		}
	}
	if event != "" {
		r.o.Progress.update(r.stats, event) // under r.mu: lines come out in order
	}
	r.mu.Unlock()
	if failed {
		r.o.Logger.Error("reflection job failed", "task", job.TaskID, "episodes", strings.Join(job.Episodes(), ","), "err", err)
	}
}

// count adds a model call's tokens (and a retry) to the stats.
func (r *reflector) count(u Usage, calls, retries int) {
	r.mu.Lock()
	r.stats.Tokens.add(u)
	r.stats.Calls += calls
	r.stats.Retries += retries
	r.o.Progress.update(r.stats, "")
	r.mu.Unlock()
}

// reflect runs the agent on one job's sandbox until it answers.
func (r *reflector) reflect(ctx context.Context, job *Job) (*Record, int, error) {
	sb, err := NewSandbox(r.o.WorkDir, job, r.o.MaxToolBytes)
	if err != nil {
		return nil, 0, err
	}
	defer sb.Close()
	if r.o.prepareSandbox != nil {
		if err := r.o.prepareSandbox(sb.Dir()); err != nil {
			return nil, 0, err
		}
	}
	req := &Request{
		System:      r.o.Prompts.System,
		Messages:    []Message{{Role: "user", Text: r.o.Prompts.userMessage(job, r.o.MaxSteps)}},
		Tools:       toolSpecs(),
		MaxTokens:   r.o.MaxTokens,
		Temperature: r.o.Temperature,
	}
	var usage Usage
	final := strings.TrimSpace(r.o.Prompts.Final)
	for step := 1; step <= r.o.MaxSteps; step++ {
		last := step == r.o.MaxSteps
		if last {
			req.NoTools = true
			lastMsg := &req.Messages[len(req.Messages)-1]
			lastMsg.Text = strings.TrimSpace(lastMsg.Text + "\n\n" + final)
		}
		rep, err := chatWithRetry(ctx, r.o.Model, req, r.o.Retry, func(n int, wait time.Duration, err error) {
			r.count(Usage{}, 0, 1)
			r.o.Logger.Warn("model call failed; retrying", "task", job.TaskID, "retry", n, "wait", wait.Round(time.Millisecond), "err", err)
		})
		if err != nil {
			return nil, step, fmt.Errorf("step %d: %w", step, err)
		}
		usage.add(rep.Usage)
		r.count(rep.Usage, 1, 0)
		guidance := guidanceText(rep.Text)
		if len(rep.Calls) == 0 || last {
			if guidance != "" {
				return &Record{
					TaskID: job.TaskID, TaskDescription: job.Task, Guidance: guidance,
					SourceEpisodes: job.Episodes(), Rewards: job.Rewards(),
					Model: r.o.ModelName, PromptVersion: r.version, Tokens: usage,
				}, step, nil
			}
			if last {
				return nil, step, fmt.Errorf("no guidance within %d steps (--max-steps)", r.o.MaxSteps)
			}
			// An empty answer: ask again for the guidance.
			if strings.TrimSpace(rep.Text) != "" {
				req.Messages = append(req.Messages, Message{Role: "assistant", Text: rep.Text}, Message{Role: "user", Text: final})
			} else {
				lastMsg := &req.Messages[len(req.Messages)-1]
				lastMsg.Text = strings.TrimSpace(lastMsg.Text + "\n\n" + final)
			}
			continue
		}
		req.Messages = append(req.Messages, Message{Role: "assistant", Text: rep.Text, Calls: rep.Calls})
		results := make([]Result, len(rep.Calls))
		for i, c := range rep.Calls {
			results[i] = Result{CallID: c.ID, Name: c.Name, Content: r.callTool(sb, c, i)}
		}
		req.Messages = append(req.Messages, Message{Role: "user", Results: results})
	}
	return nil, r.o.MaxSteps, fmt.Errorf("no guidance within %d steps (--max-steps)", r.o.MaxSteps)
}

// callTool runs one tool call; an error becomes the result the model sees.
func (r *reflector) callTool(sb *Sandbox, c Call, i int) string {
	if i >= maxCallsPerTurn {
		return fmt.Sprintf("error: at most %d tool calls are answered per turn; call it again in the next turn", maxCallsPerTurn)
	}
	out, err := sb.Call(c.Name, c.Args)
	if err != nil {
		msg := err.Error()
		msg = strings.TrimPrefix(msg, ErrTool.Error()+": ")
		return "error: " + msg
	}
	return out
}
