package learn

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/camproxy/camproxy/trainer"
)

// Summary is what a run did, in one line for a person: the versions written to out
// and the one playbook.json is, the model calls and tokens, the rollouts, and how
// long it took.
func (r *TrainResult) Summary(out string, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "train playbook: %d iterations, %d versions in %s", r.Iterations, len(r.Versions), out)
	if r.Best > 0 {
		if r.Scored {
			for _, v := range r.Versions {
				if v.Version == r.Best && v.Score != nil {
					fmt.Fprintf(&b, "; playbook.json is v%d (best mean reward %.4f over %d runs)", r.Best, *v.Score, v.Runs)
				}
			}
		} else {
			fmt.Fprintf(&b, "; playbook.json is v%d (the last; unscored)", r.Best)
		}
	}
	fmt.Fprintf(&b, "; %d model calls (%d answered from the journal), tokens %s in, %s out",
		r.Calls, r.Replayed, trainer.FormatTokens(r.Usage.Input), trainer.FormatTokens(r.Usage.Output))
	if r.Scored {
		fmt.Fprintf(&b, "; %d rollouts (%d from the journal); replay: %d graduated, %d evicted", r.Rollouts, r.RolloutsReplayed, r.Graduated, r.Evicted)
	}
	fmt.Fprintf(&b, "; %s", took.Round(time.Millisecond))
	return b.String()
}

// WritePlan writes plan, the plan of a run with o, for a person, as `train playbook
// --dry-run` prints it: the split, each iteration's batch with its estimated input
// tokens, the total, and (with o.Rollouts) the rollouts scoring would run.
func WritePlan(w io.Writer, o TrainOptions, plan *Plan) error {
	scored := o.Rollouts != nil
	fmt.Fprintf(w, "plan: %d iterations of up to %d items; %d training tasks (%d rewarded episodes, %d failures)",
		o.Iterations, o.BatchSize, len(plan.Train), plan.Episodes, plan.Failures)
	if scored {
		fmt.Fprintf(w, "; %d validation tasks (--val %g) scored with %d run(s) each per version: %s",
			len(plan.Val), o.Val, o.Group, strings.Join(plan.Val, " "))
	} else {
		fmt.Fprint(w, "; no scoring (no --rollout-url): every version is kept, the last becomes playbook.json")
	}
	fmt.Fprintln(w)
	var total int64
	for _, it := range plan.Iterations {
		var parts []string
		for i, item := range it.Items {
			s := ""
			switch {
			case item.Failure != nil && item.Success != nil:
				s = fmt.Sprintf("%s (failure %s, success %s)", item.Failure.TaskID, item.Failure.ID, item.Success.ID)
			case item.Failure != nil:
				s = fmt.Sprintf("%s (failure %s)", item.Failure.TaskID, item.Failure.ID)
			default:
				s = fmt.Sprintf("%s (success %s)", item.Success.TaskID, item.Success.ID)
			}
			if i < it.Replayed {
				s = "replay " + s
			}
			parts = append(parts, s)
		}
		_, in := EstimateTokens(it.Items, o.Seed, o.Step)
		total += in
		fmt.Fprintf(w, "iteration %d: %d items (%d replayed), ~%s input tokens: %s\n", it.Iteration, len(it.Items), it.Replayed, trainer.FormatTokens(in), strings.Join(parts, "; "))
	}
	fmt.Fprintf(w, "estimated model input ~%s tokens over %d iterations (reflector and mutator each reading every run once in %d-byte pieces, re-sending the conversation each turn, at most %d turns), plus a few hundred output tokens a turn\n",
		trainer.FormatTokens(total), o.Iterations, o.Step.MaxToolBytes, o.Step.MaxTurns)
	if scored {
		fmt.Fprintf(w, "rollouts: at most %d to score versions (v1 and one per iteration, %d tasks × %d), plus %d runs per replayed or failed task per iteration; replays depend on their outcomes (the plan above assumes none graduates)\n",
			(o.Iterations+1)*len(plan.Val)*o.Group, len(plan.Val), o.Group, o.Group)
	}
	_, err := fmt.Fprintln(w, "dry run: no model and no rollout was called")
	return err
}
