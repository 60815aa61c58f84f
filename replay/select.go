package replay

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tidwall/gjson"
)

// DefaultLate is how long after Selection.Until events of a selected episode may
// still arrive (steps of a long run, a harness's late reward). Six hours covers an
// agent run plus an evaluation batch; a reward sent later than that is not seen by
// a windowed read.
const DefaultLate = 6 * time.Hour

// Selection chooses which episodes a read delivers. The zero value selects all.
type Selection struct {
	// Since and Until select episodes by StartedAt: Since ≤ StartedAt < Until; a zero
	// bound is open.
	Since, Until time.Time
	// Arms and Tasks keep episodes whose Arm (TaskID) is one of these; empty keeps all.
	Arms, Tasks []string
	// Experiment keeps the episodes that belong to this experiment (ExperimentOf)
	// plus those that record none, which may be its own from before events carried
	// the name; "" keeps all. report --experiment counts the latter apart.
	Experiment string
	// Labelled, with Experiment, leaves out the episodes that record no experiment:
	// a reader that knows the config has several experiments (InExperiment with sole
	// false), where such an episode may be any agent's run.
	Labelled bool
	// Late is how long after Until the events of a selected episode may still be
	// written; a windowed source reads [Since, Until+Late). 0 means DefaultLate.
	Late time.Duration
}

// WindowSource is a Source that can read only the time partitions overlapping
// [from, to) (by write time); data that is not partitioned is always read.
type WindowSource interface {
	Source
	ScanWindow(ctx context.Context, from, to time.Time, fn func(line []byte) error) error
}

// Sizer is a Source that knows up front how many bytes a Scan reads, for an ETA.
type Sizer interface {
	Size(ctx context.Context) (int64, error)
}

// WindowSizer knows how many bytes a ScanWindow reads.
type WindowSizer interface {
	SizeWindow(ctx context.Context, from, to time.Time) (int64, error)
}

// Validate reports every problem of the selection at once.
func (s Selection) Validate() error {
	var probs []string
	if !s.Since.IsZero() && !s.Until.IsZero() && !s.Since.Before(s.Until) {
		probs = append(probs, fmt.Sprintf("since (%s) is not before until (%s)", s.Since.Format(time.RFC3339), s.Until.Format(time.RFC3339)))
	}
	if s.Late < 0 {
		probs = append(probs, fmt.Sprintf("late (%s) is negative", s.Late))
	}
	if len(probs) > 0 {
		return fmt.Errorf("replay selection: %s", joinProblems(probs))
	}
	return nil
}

func joinProblems(p []string) string {
	out := p[0]
	for _, s := range p[1:] {
		out += "; " + s
	}
	return out
}

// windowed reports whether the selection bounds time at all.
func (s Selection) windowed() bool { return !s.Since.IsZero() || !s.Until.IsZero() }

// window is what a WindowSource reads: [Since, Until+Late); a zero bound is open.
func (s Selection) window() (from, to time.Time) {
	if !s.Until.IsZero() {
		late := s.Late
		if late == 0 {
			late = DefaultLate
		}
		to = s.Until.Add(late)
	}
	return s.Since, to
}

// Selects reports whether ep is selected.
func (s Selection) Selects(ep *Episode) bool {
	if !s.Since.IsZero() && ep.StartedAt.Before(s.Since) {
		return false
	}
	if !s.Until.IsZero() && !ep.StartedAt.Before(s.Until) {
		return false
	}
	if len(s.Arms) > 0 && !slices.Contains(s.Arms, ep.Arm) {
		return false
	}
	if len(s.Tasks) > 0 && !slices.Contains(s.Tasks, ep.TaskID) {
		return false
	}
	if s.Experiment != "" && !InExperiment(ep, s.Experiment, !s.Labelled) {
		return false
	}
	return true
}

// InExperiment is ExperimentOf's rule for a reader that knows the config (the
// online learner): ep is experiment name's when it records name, or when it records
// none and name is the config's only experiment (sole: a config without an
// experiments list, whose older episodes predate the name). With several
// experiments an episode that records none is no experiment's (SoleExperiment's
// rule): it may be any agent's run, and one experiment's learner must not learn from
// another's.
func InExperiment(ep *Episode, name string, sole bool) bool {
	if x := ExperimentOf(ep); x != "" {
		return x == name
	}
	return sole
}

// ExperimentOf returns the experiment an episode belongs to, by the one rule every
// reader of the buffer uses (replay stats, report, export's partitions, the
// learner): the experiment its events record (Episode.Experiment: the episode
// event's, else its reward event's), else an "experiment" string in its reward's
// metadata (what a harness may send with POST /v1/feedback, and the only record
// before events carried the name), else "". An episode that records none belongs to
// the one experiment of a single-experiment config; a reader that cannot know the
// config treats it as SoleExperiment says.
func ExperimentOf(ep *Episode) string {
	if ep.Experiment != "" {
		return ep.Experiment
	}
	if r := gjson.GetBytes(ep.Metadata, "experiment"); r.Type == gjson.String {
		return r.Str
	}
	return ""
}

// NoExperiment is how tables name the group of episodes that record no experiment
// when it stands apart from named ones.
const NoExperiment = "(none)"

// SoleExperiment is where the episodes that record no experiment go when a set of
// episodes is grouped by experiment (named lists the experiments the others record,
// each once): to the one named experiment when there is exactly one (a
// single-experiment config's, whose older episodes predate the name), else to no
// experiment (""), never to one of several.
func SoleExperiment(named []string) string {
	if len(named) == 1 {
		return named[0]
	}
	return ""
}
