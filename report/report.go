// Package report compares the arms of an experiment from a replay buffer: per arm
// the episodes, the mean reward with its 95% confidence interval, the success rate,
// pass@k, turns, wall time and context latency; per arm against the control arm the
// lift, a p-value (Welch's t-test, or a permutation test for small arms) and a plain
// verdict. It renders as an aligned text table, JSON, or a self-contained HTML page.
package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/camproxy/camproxy/replay"
)

// SchemaVersion is the "v" of the JSON form; it changes only when a field changes
// meaning or goes away.
const SchemaVersion = 1

// BaselineArm is the arm that is the control when no control is named.
const BaselineArm = "baseline"

// Options choose what a report covers.
type Options struct {
	// Source names where the episodes came from (a redacted URI), for the heading.
	Source string
	// Experiment keeps only episodes that belong to this experiment, plus episodes
	// that record none (see ExperimentOf); "" keeps every episode (New) or reports
	// each experiment apart (Split).
	Experiment string
	// Control is the arm the others are compared to; "" picks "baseline" if there is
	// such an arm, else the first arm by name.
	Control string
}

// ErrEmpty is returned by New when no episode is left to report on.
var ErrEmpty = errors.New("no episodes to report on")

// ErrNoControl is returned by New when Options.Control names no arm of the buffer.
var ErrNoControl = errors.New("control arm not found")

// Report is the whole comparison. Its JSON form is the `--format json` output.
type Report struct {
	V          int    `json:"v"`
	Source     string `json:"source"`
	Experiment string `json:"experiment"` // "" when every episode is reported
	// Unlabelled counts episodes kept under Experiment because they record no
	// experiment; Excluded those dropped because they record another one.
	Unlabelled int    `json:"experiment_unlabelled"`
	Excluded   int    `json:"experiment_excluded"`
	Control    string `json:"control"`
	Episodes   int    `json:"episodes"`
	// Unit is how lifts are told: "points" when every reward lies in [0, 1] (lift ×
	// 100), else "reward" (lift in reward units).
	Unit        string       `json:"unit"`
	Alpha       float64      `json:"alpha"`
	Arms        []Arm        `json:"arms"`        // by name
	Comparisons []Comparison `json:"comparisons"` // every arm but the control, by name
	// Learning is the online learner's curve (learn.go); null without learn events.
	Learning *Learning `json:"learning"`
	// SynthesisedTimes counts episodes whose start time an import made up
	// (replay.SynthesisedStart): they are left out of the time chart, which is not
	// drawn when no rewarded episode has a real start. Their wall time, like that of
	// any episode whose steps an import spaced 1 ms apart (replay.SynthesisedSpan),
	// is not averaged.
	SynthesisedTimes int `json:"episodes_synthesised_times"`

	series    map[string][]Point // cumulative mean reward by arm, for the HTML chart
	lastStart time.Time          // the latest episode start, where the learning chart ends
	none      bool               // the episodes that record no experiment, apart from several named (Split)
}

// Arm is one arm's outcome. Pointers are nil (JSON null) where there is nothing to
// average.
type Arm struct {
	Name     string `json:"arm"`
	Episodes int    `json:"episodes"`
	Rewarded int    `json:"rewarded"`
	// MeanReward is over rewarded episodes; SD is their sample standard deviation
	// and CI95 their 95% interval (two rewards needed), by CIMethod: "wilson" when
	// every reward is 0 or 1 (Wilson's score interval, inside [0, 1]), else "t"
	// (MeanReward ± t(0.975, n−1)·SD/√n, clipped to the observed reward range).
	MeanReward *float64    `json:"mean_reward"`
	SD         *float64    `json:"sd"`
	CI95       *[2]float64 `json:"ci95"`
	CIMethod   string      `json:"ci95_method,omitempty"`
	// Successes counts rewarded episodes that succeeded: their success flag when the
	// harness sent one, else reward ≥ 1. SuccessRate is Successes / Rewarded.
	Successes   int      `json:"successes"`
	SuccessRate *float64 `json:"success_rate"`
	// PassAtK is pass@k for k = 1, 2, … over the tasks with at least k rewarded runs
	// on this arm.
	PassAtK []PassK `json:"pass_at_k"`
	// MeanTurns is steps per episode over episodes with at least one step;
	// MeanWallSeconds is EndedAt − StartedAt over those whose times were recorded
	// (null when none was: an import's, see Report.SynthesisedTimes); MeanContextMs is the first
	// step's augment time (context latency) over those.
	MeanTurns       *float64 `json:"mean_turns"`
	MeanWallSeconds *float64 `json:"mean_wall_seconds"`
	MeanContextMs   *float64 `json:"mean_context_ms"`

	rewards []float64 // rewarded episodes' rewards, in buffer order
}

// PassK is pass@k over the Tasks that have at least K rewarded runs.
type PassK struct {
	K     int     `json:"k"`
	Tasks int     `json:"tasks"`
	Value float64 `json:"value"`
}

// Comparison is one arm against the control arm.
type Comparison struct {
	Arm     string `json:"arm"`
	Control string `json:"control"`
	// Lift is mean(arm) − mean(control) in reward units; LiftPoints is Lift × 100
	// when Report.Unit is "points", else equal to Lift.
	Lift       *float64 `json:"lift"`
	LiftPoints *float64 `json:"lift_points"`
	// LiftCI95 is Welch's 95% interval of Lift (reward units): Lift ±
	// t(0.975, df)·√(s²ₐ/nₐ + s²ᶜ/nᶜ), df by Welch–Satterthwaite; null unless both
	// arms have two rewarded episodes.
	LiftCI95 *[2]float64 `json:"lift_ci95"`
	// Test is "welch" (both arms have MinWelch rewarded episodes or more),
	// "permutation" (Resamples seeded relabellings), or "" (no p-value: an arm has
	// no rewarded episode, or Welch/permutation had too little to work with).
	Test      string   `json:"test"`
	T         *float64 `json:"t"`  // Welch's statistic
	DF        *float64 `json:"df"` // Welch–Satterthwaite degrees of freedom
	P         *float64 `json:"p_value"`
	Resamples int      `json:"resamples,omitempty"` // permutation test only
	// Significant is P < Alpha.
	Significant bool `json:"significant"`
	// PooledSD is the pooled standard deviation of the two arms' rewards; it and the
	// observed lift give EpisodesPerArm, the rewarded episodes per arm that a test at
	// Alpha with Power would need, and MoreEpisodes, how many more than the smaller
	// arm has (null when significant, when there is no effect, or when it cannot be
	// estimated).
	PooledSD       *float64 `json:"pooled_sd"`
	EpisodesPerArm *int     `json:"episodes_per_arm_needed"`
	MoreEpisodes   *int     `json:"more_episodes_per_arm"`
	Verdict        string   `json:"verdict"`
}

// Point is one step of the cumulative mean reward of an arm: the mean over the
// arm's rewarded episodes that started up to At.
type Point struct {
	At   time.Time
	Mean float64
}

// ExperimentOf returns the experiment an episode belongs to, or "" when it records
// none: replay.ExperimentOf, the rule replay's selection, stats and export share.
func ExperimentOf(ep *replay.Episode) string { return replay.ExperimentOf(ep) }

// New computes the report for the episodes of b.
func New(b *replay.Buffer, o Options) (*Report, error) {
	r := &Report{V: SchemaVersion, Source: o.Source, Experiment: o.Experiment, Alpha: Alpha, Unit: "points",
		Arms: []Arm{}, Comparisons: []Comparison{}}
	episodes := make([]*replay.Episode, 0, len(b.Episodes))
	for _, ep := range b.Episodes {
		if o.Experiment != "" {
			switch ExperimentOf(ep) {
			case o.Experiment:
			case "":
				r.Unlabelled++
			default:
				r.Excluded++
				continue
			}
		}
		episodes = append(episodes, ep)
		if replay.SynthesisedStart(ep.StartedAt) || replay.SynthesisedSpan(ep) {
			r.SynthesisedTimes++
		}
		r.lastStart = maxTime(r.lastStart, ep.StartedAt)
		if ep.Reward != nil && (*ep.Reward < 0 || *ep.Reward > 1) {
			r.Unit = "reward"
		}
	}
	r.Episodes = len(episodes)
	if r.Episodes == 0 {
		if o.Experiment != "" && len(b.Episodes) > 0 {
			return nil, fmt.Errorf("%w: none of the %d episodes belongs to experiment %q", ErrEmpty, len(b.Episodes), o.Experiment)
		}
		return nil, ErrEmpty
	}

	byArm := map[string][]*replay.Episode{}
	for _, ep := range episodes {
		byArm[ep.Arm] = append(byArm[ep.Arm], ep)
	}
	names := make([]string, 0, len(byArm))
	for name := range byArm {
		names = append(names, name)
	}
	slices.Sort(names)

	control, err := pickControl(names, o.Control)
	if err != nil {
		return nil, err
	}
	r.Control = control
	r.series = map[string][]Point{}
	for _, name := range names {
		r.Arms = append(r.Arms, armStats(name, byArm[name]))
		r.series[name] = cumulative(byArm[name])
	}
	ctl := r.arm(control)
	for i := range r.Arms {
		if r.Arms[i].Name != control {
			r.Comparisons = append(r.Comparisons, r.compare(&r.Arms[i], ctl))
		}
	}
	r.Learning = learning(b.Learn, episodes, o.Experiment)
	return r, nil
}

func pickControl(names []string, want string) (string, error) {
	if want != "" {
		if slices.Contains(names, want) {
			return want, nil
		}
		return "", fmt.Errorf("%w: no arm %q in the buffer (arms: %s)", ErrNoControl, want, strings.Join(quoted(names), ", "))
	}
	if slices.Contains(names, BaselineArm) {
		return BaselineArm, nil
	}
	return names[0], nil
}

func quoted(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strconv.Quote(n)
	}
	return out
}

func (r *Report) arm(name string) *Arm {
	for i := range r.Arms {
		if r.Arms[i].Name == name {
			return &r.Arms[i]
		}
	}
	return nil
}

// Series returns the cumulative mean reward of an arm over episode start time:
// one point per rewarded episode, in start order.
func (r *Report) Series(arm string) []Point { return r.series[arm] }

// succeeded is the success rule: the harness's flag when it sent one, else a
// full reward.
func succeeded(ep *replay.Episode) bool {
	if ep.Success != nil {
		return *ep.Success
	}
	return *ep.Reward >= 1
}

func ptr[T any](v T) *T { return &v }

func armStats(name string, eps []*replay.Episode) Arm {
	a := Arm{Name: name, Episodes: len(eps)}
	var turns, wall, ctxMs float64
	var stepped, timed int
	tasks := map[string]*taskRuns{}
	var taskOrder []string
	for _, ep := range eps {
		if ep.Steps > 0 {
			stepped++
			turns += float64(ep.Steps)
			ctxMs += ep.AugmentMs
			if !ep.StartedAt.IsZero() && !ep.EndedAt.Before(ep.StartedAt) && !replay.SynthesisedSpan(ep) {
				timed++
				wall += ep.EndedAt.Sub(ep.StartedAt).Seconds()
			}
		}
		if ep.Reward == nil {
			continue
		}
		a.Rewarded++
		a.rewards = append(a.rewards, *ep.Reward)
		ok := succeeded(ep)
		if ok {
			a.Successes++
		}
		t := tasks[ep.TaskID]
		if t == nil {
			t = &taskRuns{}
			tasks[ep.TaskID] = t
			taskOrder = append(taskOrder, ep.TaskID)
		}
		t.n++
		if ok {
			t.c++
		}
	}
	if stepped > 0 {
		a.MeanTurns = ptr(turns / float64(stepped))
		a.MeanContextMs = ptr(ctxMs / float64(stepped))
	}
	if timed > 0 {
		a.MeanWallSeconds = ptr(wall / float64(timed))
	}
	if a.Rewarded > 0 {
		mean, variance := meanVar(a.rewards)
		a.MeanReward = ptr(mean)
		a.SuccessRate = ptr(float64(a.Successes) / float64(a.Rewarded))
		if a.Rewarded >= 2 {
			a.SD = ptr(math.Sqrt(variance))
			a.CI95, a.CIMethod = RewardCI95(a.rewards)
		}
	}
	runs := make([]taskRuns, 0, len(tasks))
	for _, id := range taskOrder {
		runs = append(runs, *tasks[id])
	}
	a.PassAtK = passAtK(runs)
	return a
}

// taskRuns is one task's rewarded runs on an arm and how many succeeded.
type taskRuns struct{ n, c int }

// maxListedK bounds how many k a report lists: 1…maxListedK, then the largest.
const maxListedK = 5

// passAtK lists pass@k for k = 1 up to the largest k that every task with runs
// supports (its fewest runs), and at least up to 3 where some task has 3 runs; each
// k averages over the tasks with at least k runs. Past maxListedK only the largest
// k is listed.
func passAtK(runs []taskRuns) []PassK {
	if len(runs) == 0 {
		return []PassK{}
	}
	fewest, most := runs[0].n, runs[0].n
	for _, r := range runs {
		fewest, most = min(fewest, r.n), max(most, r.n)
	}
	top := max(fewest, min(3, most))
	var out []PassK
	for k := 1; k <= top; k++ {
		if k > maxListedK && k != top {
			continue
		}
		p := PassK{K: k}
		sum := 0.0
		for _, r := range runs {
			if r.n >= k {
				p.Tasks++
				sum += PassAtK(r.n, r.c, k)
			}
		}
		p.Value = sum / float64(p.Tasks)
		out = append(out, p)
	}
	return out
}

// cumulative is the running mean reward of eps (already in start order) over
// their rewarded episodes.
func cumulative(eps []*replay.Episode) []Point {
	var out []Point
	sum := 0.0
	for _, ep := range eps {
		if ep.Reward == nil || ep.StartedAt.IsZero() || replay.SynthesisedStart(ep.StartedAt) {
			continue
		}
		sum += *ep.Reward
		out = append(out, Point{At: ep.StartedAt, Mean: sum / float64(len(out)+1)})
	}
	return out
}

func (r *Report) scale() float64 {
	if r.Unit == "points" {
		return 100
	}
	return 1
}

func (r *Report) compare(a, ctl *Arm) Comparison {
	c := Comparison{Arm: a.Name, Control: ctl.Name}
	if a.MeanReward == nil || ctl.MeanReward == nil {
		missing := a.Name
		if a.MeanReward != nil {
			missing = ctl.Name
		}
		c.Verdict = fmt.Sprintf("%s vs %s: no rewarded episodes on %s yet", a.Name, ctl.Name, missing)
		return c
	}
	lift := *a.MeanReward - *ctl.MeanReward
	if math.Abs(lift) < 1e-12*math.Max(1, math.Abs(*ctl.MeanReward)) {
		lift = 0 // equal means summed in another order
	}
	c.Lift, c.LiftPoints = ptr(lift), ptr(lift*r.scale())
	c.LiftCI95 = liftCI(lift, a.rewards, ctl.rewards)
	if a.Rewarded >= MinWelch && ctl.Rewarded >= MinWelch {
		w := WelchTest(a.rewards, ctl.rewards)
		c.Test, c.P = "welch", ptr(w.P)
		if !math.IsInf(w.T, 0) {
			c.T = ptr(w.T)
		}
		c.DF = ptr(w.DF)
	} else {
		c.Test, c.Resamples = "permutation", Resamples
		c.P = ptr(PermutationTest(a.rewards, ctl.rewards, Resamples, PermutationSeed))
	}
	c.Significant = *c.P < Alpha && lift != 0
	if n := a.Rewarded + ctl.Rewarded; n > 2 {
		_, va := meanVar(a.rewards)
		_, vc := meanVar(ctl.rewards)
		pooled := math.Sqrt((float64(a.Rewarded-1)*va + float64(ctl.Rewarded-1)*vc) / float64(n-2))
		c.PooledSD = ptr(pooled)
		if !c.Significant && lift != 0 {
			need := EpisodesPerArm(lift, pooled, Alpha, Power)
			c.EpisodesPerArm = ptr(need)
			c.MoreEpisodes = ptr(max(need-min(a.Rewarded, ctl.Rewarded), 1))
		}
	}
	c.Verdict = r.verdict(c)
	return c
}

// verdict says the comparison in one plain line.
func (r *Report) verdict(c Comparison) string {
	lift := r.formatLift(*c.LiftPoints)
	p := FormatP(*c.P)
	switch {
	case *c.Lift == 0:
		return fmt.Sprintf("%s vs %s: no measurable difference yet (p %s)", c.Arm, c.Control, p)
	case c.Significant && *c.Lift > 0:
		return fmt.Sprintf("%s beats %s by %s, p %s", c.Arm, c.Control, lift, p)
	case c.Significant:
		return fmt.Sprintf("%s trails %s by %s, p %s", c.Arm, c.Control, lift, p)
	case c.MoreEpisodes != nil:
		return fmt.Sprintf("%s vs %s: %s, not yet significant (p %s): about %d more rewarded episodes per arm needed "+
			"(%d per arm for %g%% power at this lift)",
			c.Arm, c.Control, lift, p, *c.MoreEpisodes, *c.EpisodesPerArm, Power*100)
	default:
		return fmt.Sprintf("%s vs %s: %s, not yet significant (p %s): too few rewarded episodes to estimate how many more are needed",
			c.Arm, c.Control, lift, p)
	}
}

// formatLift writes a lift with its sign (a true minus sign) and unit.
func (r *Report) formatLift(v float64) string {
	var s string
	if r.Unit == "points" {
		s = strconv.FormatFloat(math.Abs(v), 'f', 1, 64) + " points"
	} else {
		s = strconv.FormatFloat(math.Abs(v), 'f', 3, 64) + " reward"
	}
	if v < 0 {
		return "\u2212" + s
	}
	return "+" + s
}

// FormatP writes a p-value after its relation: "= 0.031", "= 0.0066", "< 0.001".
// Two significant digits are what a reader can use; below 0.001 the exact value is
// noise (and a permutation test cannot resolve it).
func FormatP(p float64) string {
	switch {
	case math.IsNaN(p):
		return "= n/a"
	case p < 0.001:
		return "< 0.001"
	case p >= 0.995:
		return "= 1"
	}
	return "= " + strconv.FormatFloat(p, 'g', 2, 64)
}

// dash stands for a value there is nothing to compute from.
const dash = "\u2013"

// WriteText prints the report: a heading, one aligned row per arm, the pass@k
// table, and one verdict line per compared arm.
func (r *Report) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	ew.printf("camproxy report: %s\n", r.heading())
	if r.Experiment != "" && r.Unlabelled > 0 {
		ew.printf("note: %d episodes record no experiment and are counted under %q\n", r.Unlabelled, r.Experiment)
	}
	if n := r.SynthesisedTimes; n > 0 {
		ew.printf("note: %s\n", r.synthesisedNote())
	}
	ew.printf("\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "arm\tepisodes\trewarded\tmean reward\t95% CI\tsuccess\tturns\twall time\tcontext latency\n")
	for _, a := range r.Arms {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Name, a.Episodes, a.Rewarded,
			fmtNum(a.MeanReward, "%.3f"), fmtCI(a.CI95), fmtPercent(a.SuccessRate),
			fmtNum(a.MeanTurns, "%.1f"), fmtSeconds(a.MeanWallSeconds), fmtMs(a.MeanContextMs))
	}
	tw.Flush()

	ks := r.passKs()
	if len(ks) > 0 {
		ew.printf("\npass@k over the tasks with at least k rewarded runs on the arm (tasks in brackets)\n")
		tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		fmt.Fprint(tw, "arm")
		for _, k := range ks {
			fmt.Fprintf(tw, "\tpass@%d", k)
		}
		fmt.Fprint(tw, "\n")
		for _, a := range r.Arms {
			fmt.Fprint(tw, a.Name)
			for _, k := range ks {
				fmt.Fprintf(tw, "\t%s", fmtPassK(a.PassAtK, k))
			}
			fmt.Fprint(tw, "\n")
		}
		tw.Flush()
	}

	if len(r.Comparisons) > 0 {
		ew.printf("\nagainst the control arm %s (significance level %g):\n", r.Control, r.Alpha)
		for _, c := range r.Comparisons {
			ew.printf("  %s%s\n", c.Verdict, c.method())
		}
	}
	r.writeLearningText(ew)
	return ew.err
}

// synthesisedNote says why times are missing.
func (r *Report) synthesisedNote() string {
	return fmt.Sprintf("%s of %d have times made up by an import, not recorded: no wall time or time chart from them",
		plural(r.SynthesisedTimes, "episode"), r.Episodes)
}

// heading is the one-line description of what the report covers.
func (r *Report) heading() string {
	var b strings.Builder
	if r.Source != "" {
		b.WriteString(r.Source + ", ")
	}
	if r.Experiment != "" || r.none {
		b.WriteString(groupName(r.Experiment) + ", ")
	}
	fmt.Fprintf(&b, "%s, %s, control arm %s", plural(r.Episodes, "episode"), plural(len(r.Arms), "arm"), r.Control)
	return b.String()
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// method names the test behind a verdict, for the text form.
func (c Comparison) method() string {
	switch c.Test {
	case "welch":
		if c.T == nil {
			return fmt.Sprintf("  [Welch's t-test, df %.1f]", *c.DF)
		}
		return fmt.Sprintf("  [Welch's t-test, t = %.2f, df = %.1f]", *c.T, *c.DF)
	case "permutation":
		return fmt.Sprintf("  [permutation test, %d resamples]", c.Resamples)
	}
	return ""
}

// passKs is every k some arm lists, ascending.
func (r *Report) passKs() []int {
	var ks []int
	for _, a := range r.Arms {
		for _, p := range a.PassAtK {
			if !slices.Contains(ks, p.K) {
				ks = append(ks, p.K)
			}
		}
	}
	slices.Sort(ks)
	return ks
}

func fmtPassK(ps []PassK, k int) string {
	for _, p := range ps {
		if p.K == k {
			return fmt.Sprintf("%.3f [%d]", p.Value, p.Tasks)
		}
	}
	return dash
}

func fmtNum(v *float64, format string) string {
	if v == nil {
		return dash
	}
	return fmt.Sprintf(format, *v)
}

func fmtCI(ci *[2]float64) string {
	if ci == nil {
		return dash
	}
	return fmt.Sprintf("%.3f\u2013%.3f", ci[0], ci[1])
}

func fmtPercent(v *float64) string {
	if v == nil {
		return dash
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}

// fmtSeconds writes a duration: "42.5s" under two minutes, else "3m12s" or "2h5m0s".
func fmtSeconds(v *float64) string {
	if v == nil {
		return dash
	}
	if *v < 120 {
		return fmt.Sprintf("%.1fs", *v)
	}
	return (time.Duration(*v * float64(time.Second))).Round(time.Second).String()
}

func fmtMs(v *float64) string {
	if v == nil {
		return dash
	}
	return fmt.Sprintf("%.0f ms", *v)
}

// errWriter keeps the first write error, so that printing code stays linear.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, a ...any) { fmt.Fprintf(e, format, a...) }

// WriteJSON writes the report as indented JSON (the schema is in the README).
// Floats are rounded to 6 significant digits: more is noise, and fewer digits keep
// the output identical across platforms whose floating point differs in the last
// bit.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r.rounded()); err != nil {
		return fmt.Errorf("report: write json: %w", err)
	}
	return nil
}

func round6(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	out, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
	return out
}

func roundPtr(v *float64) *float64 {
	if v == nil {
		return nil
	}
	return ptr(round6(*v))
}

// rounded is a copy of r with every float rounded by round6.
func (r *Report) rounded() *Report {
	out := *r
	out.Arms = make([]Arm, len(r.Arms))
	for i, a := range r.Arms {
		a.MeanReward, a.SD, a.SuccessRate = roundPtr(a.MeanReward), roundPtr(a.SD), roundPtr(a.SuccessRate)
		a.MeanTurns, a.MeanWallSeconds, a.MeanContextMs = roundPtr(a.MeanTurns), roundPtr(a.MeanWallSeconds), roundPtr(a.MeanContextMs)
		if a.CI95 != nil {
			a.CI95 = &[2]float64{round6(a.CI95[0]), round6(a.CI95[1])}
		}
		a.PassAtK = slices.Clone(a.PassAtK)
		for j := range a.PassAtK {
			a.PassAtK[j].Value = round6(a.PassAtK[j].Value)
		}
		out.Arms[i] = a
	}
	out.Comparisons = make([]Comparison, len(r.Comparisons))
	for i, c := range r.Comparisons {
		c.Lift, c.LiftPoints, c.T, c.DF = roundPtr(c.Lift), roundPtr(c.LiftPoints), roundPtr(c.T), roundPtr(c.DF)
		if c.LiftCI95 != nil {
			c.LiftCI95 = &[2]float64{round6(c.LiftCI95[0]), round6(c.LiftCI95[1])}
		}
		c.P, c.PooledSD = roundPtr(c.P), roundPtr(c.PooledSD)
		out.Comparisons[i] = c
	}
	out.Learning = r.Learning.rounded()
	return &out
}
