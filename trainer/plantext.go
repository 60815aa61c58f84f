package trainer

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Counts says where the buffer's tasks went: how many it holds and why those left
// out are.
func (p *Plan) Counts() string {
	return fmt.Sprintf("%d tasks in the buffer; left out: %d with too few rewarded runs, %d without a task text, %d by --mixed-only", p.Tasks, p.TooFew, p.NoText, p.Uniform)
}

// WritePlan writes the jobs of plan to run (jobs, its first ones) for a person, as
// `train reflect --dry-run` prints them: a row a job (its task, whether its outcomes
// are mixed, its runs with their rewards, an estimate of its input tokens, and
// "done" when done holds its key: the reflections already written), then what is
// left to run, the plan's Counts, what the runs would cost with prompts, and the
// prompt version.
func WritePlan(w io.Writer, plan *Plan, jobs []*Job, done map[string]bool, prompts Prompts, maxSteps, maxToolBytes int) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "job\ttask\tmixed\truns (reward)\test. input\t")
	var files, input int64
	pending := 0
	for i, j := range jobs {
		var runs []string
		for _, ep := range j.Runs {
			runs = append(runs, fmt.Sprintf("%s (%g)", ep.ID, *ep.Reward))
		}
		f, in := Estimate(j, prompts, maxSteps, maxToolBytes)
		state := ""
		if done[j.Key] {
			state = "done"
		} else {
			pending++
			files += f
			input += in
		}
		mixed := "no"
		if j.Mixed {
			mixed = "yes"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t~%s\t%s\n", i+1, j.TaskID, mixed, strings.Join(runs, " "), FormatTokens(in), state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%d jobs over %d tasks (%d with mixed outcomes); %d already in --out, %d to run\n",
		len(jobs), plan.Eligible, plan.Mixed, len(jobs)-pending, pending)
	fmt.Fprintf(w, "%s\n", plan.Counts())
	fmt.Fprintf(w, "the runs to reflect on hold ~%s tokens; estimated model input ~%s tokens (each job reading every run once in %d-byte pieces, re-sending its conversation each turn, at most %d turns), plus a few hundred output tokens a turn\n",
		FormatTokens(files), FormatTokens(input), maxToolBytes, maxSteps)
	_, err := fmt.Fprintf(w, "prompt version %s\n", prompts.Version())
	return err
}
