package replay

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// Stats summarises a replay buffer: enough to tell, before training, whether there
// are several rewarded runs per task (what contrastive reflection needs) and how the
// arms compare.
type Stats struct {
	Episodes      int         `json:"episodes"`
	Tasks         int         `json:"tasks"`
	Rewarded      int         `json:"rewarded"`
	RunsPerTask   RunsPerTask `json:"runs_per_task"`
	RewardedShare float64     `json:"rewarded_share"` // Rewarded / Episodes
	MeanReward    float64     `json:"mean_reward"`    // over rewarded episodes
	SuccessRate   float64     `json:"success_rate"`   // successes / rewarded episodes
	// Experiments are the experiments the episodes belong to (ExperimentOf), by name;
	// "" stands for the episodes that record none when they stand apart from several
	// named ones (else they are SoleExperiment's). Empty when no episode records one.
	Experiments []string   `json:"experiments"`
	Arms        []ArmStats `json:"arms"`       // by experiment, then arm name: one row per arm of each experiment
	Skipped     int        `json:"skipped"`    // lines the reader could not use
	Duplicates  int        `json:"duplicates"` // events dropped as repeats
}

// RunsPerTask is the spread of episodes per task. Median is the lower middle value
// for an even number of tasks, so it is always a count that occurs.
type RunsPerTask struct {
	Min    int `json:"min"`
	Median int `json:"median"`
	Max    int `json:"max"`
}

// ArmStats is one arm's share of the buffer and its outcome. Two experiments'
// arms of one name are two rows: their rewards are never averaged together.
type ArmStats struct {
	Experiment  string  `json:"experiment,omitempty"`
	Arm         string  `json:"arm"`
	Episodes    int     `json:"episodes"`
	Rewarded    int     `json:"rewarded"`
	MeanReward  float64 `json:"mean_reward"`  // over rewarded episodes
	SuccessRate float64 `json:"success_rate"` // successes / rewarded episodes
}

// tally accumulates rewards; both the totals and each arm use it.
type tally struct {
	episodes, rewarded, successes int
	rewardSum                     float64
}

func (t *tally) add(e *Episode) {
	t.episodes++
	if e.Reward == nil {
		return
	}
	t.rewarded++
	t.rewardSum += *e.Reward
	if e.Success != nil && *e.Success {
		t.successes++
	}
}

func (t *tally) merge(o *tally) {
	t.episodes += o.episodes
	t.rewarded += o.rewarded
	t.successes += o.successes
	t.rewardSum += o.rewardSum
}

func (t *tally) mean() float64 { return ratio(t.rewardSum, t.rewarded) }
func (t *tally) rate() float64 { return ratio(float64(t.successes), t.rewarded) }

func ratio(num float64, den int) float64 {
	if den == 0 {
		return 0
	}
	return num / float64(den)
}

// StatsOf summarises the episodes of src that o selects in one streaming pass:
// it keeps a tally per arm and a count per task, never the episodes.
func StatsOf(ctx context.Context, src Source, o ReadOptions) (Stats, Summary, error) {
	acc := newStatsAcc()
	o.Light = true
	sum, err := Episodes(ctx, src, o, func(e *Episode) error {
		acc.add(e)
		return nil
	})
	if err != nil {
		return Stats{}, sum, err
	}
	return acc.stats(sum.Skipped, sum.Duplicates), sum, nil
}

// statsAcc is what stats need of the episodes, taken one at a time.
type statsAcc struct {
	all   tally
	arms  map[armKey]*tally
	tasks map[string]int // episodes per TaskID
}

// armKey is an arm of an experiment ("": the episodes record none).
type armKey struct{ experiment, arm string }

func newStatsAcc() *statsAcc {
	return &statsAcc{arms: map[armKey]*tally{}, tasks: map[string]int{}}
}

func (a *statsAcc) add(e *Episode) {
	a.all.add(e)
	k := armKey{ExperimentOf(e), e.Arm}
	t := a.arms[k]
	if t == nil {
		t = &tally{}
		a.arms[k] = t
	}
	t.add(e)
	a.tasks[e.TaskID]++
}

func (a *statsAcc) stats(skipped, duplicates int) Stats {
	arms, experiments := armStats(a.arms)
	return Stats{
		Episodes: a.all.episodes, Tasks: len(a.tasks), Rewarded: a.all.rewarded,
		RunsPerTask:   runsPerTask(a.tasks),
		RewardedShare: ratio(float64(a.all.rewarded), a.all.episodes),
		MeanReward:    a.all.mean(), SuccessRate: a.all.rate(),
		Experiments: experiments, Arms: arms,
		Skipped: skipped, Duplicates: duplicates,
	}
}

func runsPerTask(tasks map[string]int) RunsPerTask {
	if len(tasks) == 0 {
		return RunsPerTask{}
	}
	n := make([]int, 0, len(tasks))
	for _, c := range tasks {
		n = append(n, c)
	}
	slices.Sort(n)
	return RunsPerTask{Min: n[0], Median: n[(len(n)-1)/2], Max: n[len(n)-1]}
}

// armStats is a row per arm of each experiment, the episodes that record no
// experiment under SoleExperiment's, and the experiments' names.
func armStats(arms map[armKey]*tally) ([]ArmStats, []string) {
	var named []string
	for k := range arms {
		if k.experiment != "" && !slices.Contains(named, k.experiment) {
			named = append(named, k.experiment)
		}
	}
	sole := SoleExperiment(named)
	merged := make(map[armKey]*tally, len(arms))
	for k, t := range arms {
		if k.experiment == "" {
			k.experiment = sole
		}
		m := merged[k]
		if m == nil {
			m = &tally{}
			merged[k] = m
		}
		m.merge(t)
	}
	out := make([]ArmStats, 0, len(merged))
	experiments := []string{}
	for k, t := range merged {
		out = append(out, ArmStats{Experiment: k.experiment, Arm: k.arm, Episodes: t.episodes, Rewarded: t.rewarded, MeanReward: t.mean(), SuccessRate: t.rate()})
		if len(named) > 0 && !slices.Contains(experiments, k.experiment) {
			experiments = append(experiments, k.experiment)
		}
	}
	slices.SortFunc(out, func(a, b ArmStats) int {
		return cmp.Or(strings.Compare(a.Experiment, b.Experiment), strings.Compare(a.Arm, b.Arm))
	})
	slices.Sort(experiments)
	return out, experiments
}

// WriteText prints the stats as two aligned tables: the buffer as a whole, then one
// line per arm, with the experiment it belongs to when the buffer holds several.
func (s Stats) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "episodes\t%d\n", s.Episodes)
	fmt.Fprintf(tw, "tasks\t%d\n", s.Tasks)
	fmt.Fprintf(tw, "runs per task\tmin %d, median %d, max %d\n", s.RunsPerTask.Min, s.RunsPerTask.Median, s.RunsPerTask.Max)
	fmt.Fprintf(tw, "rewarded\t%d (%.1f%%)\n", s.Rewarded, 100*s.RewardedShare)
	fmt.Fprintf(tw, "mean reward\t%.3f\n", s.MeanReward)
	fmt.Fprintf(tw, "success rate\t%.1f%%\n", 100*s.SuccessRate)
	if names := s.named(); len(names) > 0 {
		fmt.Fprintf(tw, "experiments\t%s\n", strings.Join(names, ", "))
	}
	fmt.Fprintf(tw, "skipped lines\t%d\n", s.Skipped)
	fmt.Fprintf(tw, "duplicates\t%d\n", s.Duplicates)
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write stats: %w", err)
	}
	return s.writeArms(w)
}

// named is the experiments the stats name, without "".
func (s Stats) named() []string {
	return slices.DeleteFunc(slices.Clone(s.Experiments), func(x string) bool { return x == "" })
}

func (s Stats) writeArms(w io.Writer) error {
	if len(s.Arms) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w)
	several := len(s.Experiments) > 1
	if several {
		fmt.Fprint(tw, "experiment\t")
	}
	fmt.Fprint(tw, "arm\tepisodes\trewarded\tmean reward\tsuccess rate\n")
	for _, a := range s.Arms {
		if several {
			fmt.Fprintf(tw, "%s\t", cmp.Or(a.Experiment, NoExperiment))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.1f%%\n", a.Arm, a.Episodes, a.Rewarded, a.MeanReward, 100*a.SuccessRate)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write stats: %w", err)
	}
	return nil
}
