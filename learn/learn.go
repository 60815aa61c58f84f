// Package learn owns RCL's reflect → mutate loop over a playbook: one step on a batch
// of rewarded episodes (the reflector tags entries, the mutator edits them, both only
// through tool calls), the batch sampler (failures first, each paired with a success
// of its task), failure replay, the optimizer state, the journal that makes a killed
// run resume without re-sending a call, and the offline driver behind
// `camproxy train playbook`. The online learner inside `camproxy serve`
// (learn/online) runs the same Step.
package learn

import (
	"context"
	"errors"
	"log/slog"

	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/trainer"
)

// Models are the two optimiser models; they may be the same one.
type Models struct {
	Reflector trainer.Model
	Mutator   trainer.Model
}

// Item is one unit of a batch: a failed run paired with a successful run of the same
// task where one exists (RCL's dual-trace contrast). Failure is nil for a success
// shown alone.
type Item struct {
	Failure *replay.Episode
	Success *replay.Episode
}

// Batch is what one step reflects on.
type Batch struct {
	Iteration int
	Items     []Item
	// State is the optimizer state: the rolling summary the previous steps left,
	// handed to this one ("" at the start).
	State string
}

// StepOptions tune one step.
type StepOptions struct {
	Limits       playbook.Limits
	MaxTurns     int // model turns per role, the last one asked to finish; default 12
	MaxToolBytes int // a sandbox tool result is cut here; default trainer.DefaultMaxToolBytes
	MaxTokens    int // per model answer; 0 = the server's default
	Temperature  *float64
	Retry        trainer.RetryPolicy
	WorkDir      string  // where the sandbox is made; "" = the system temp dir
	Journal      Journal // nil = every call goes to the model
	Logger       *slog.Logger
	Prompts      Prompts // zero value = DefaultPrompts
}

// StepResult is what a step made.
type StepResult struct {
	Playbook *playbook.Playbook // the edited playbook, pruned and bounded
	Ops      []playbook.Op      // every playbook tool call, applied or refused, in order
	Applied  int                // calls that changed the playbook
	Removed  []string           // entry ids pruning and the size budget removed
	Summary  string             // the mutator's finish summary (else the reflector's): the next optimizer state
	Usage    trainer.Usage
	Calls    int      // model calls made (journal replays not counted; Usage counts only these)
	Replayed int      // turns answered from the journal
	Sources  []string // the episode ids of the batch
}

// Journal records each model answer of a run, keyed by iteration, role and turn, so
// that a killed run resumes without re-sending a call whose answer it had received.
type Journal interface {
	Lookup(key string) (*trainer.Reply, bool)
	Record(key string, rep *trainer.Reply) error
}

// ErrNoBatch is returned by Step for a batch without episodes.
var ErrNoBatch = errors.New("learn: empty batch")

// Step runs the reflector, then the mutator, on base (version is the version the
// result will be written as: new and changed entries carry it) and returns the edited
// playbook. A bad tool call goes back to the model as a tool error; only model
// failures (after retries) and ctx end a step with an error.
func Step(ctx context.Context, m Models, base *playbook.Playbook, version int, b Batch, o StepOptions) (*StepResult, error) {
	return step(ctx, m, base, version, b, o)
}

// Pair builds a batch's items from rewarded episodes: every failure, each with a
// success of its task when there is one, failures first (then the successes of tasks
// without a failure), at most size items (0 = all), deterministic for a seed.
// Episodes without a reward are left out; a task that never failed is shown by one
// success.
func Pair(episodes []*replay.Episode, size int, seed uint64) []Item {
	return pair(episodes, size, seed)
}
