package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
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
	// Experiment keeps the episodes that record this experiment plus those that
	// record none (see ExperimentOf); "" keeps all. The same rule as report's.
	Experiment string
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
	if s.Experiment != "" {
		if x := ExperimentOf(ep); x != "" && x != s.Experiment {
			return false
		}
	}
	return true
}

// ExperimentOf returns the experiment an episode records, or "". Episode events do
// not carry the experiment's name (an arm name can serve several experiments over
// time, and learn events name the experiment but belong to no episode), so the only
// record is an "experiment" string in the reward's metadata, what a harness may send
// with POST /v1/feedback.
func ExperimentOf(ep *Episode) string {
	if len(ep.Metadata) == 0 {
		return ""
	}
	var m struct {
		Experiment string `json:"experiment"`
	}
	if json.Unmarshal(ep.Metadata, &m) != nil {
		return ""
	}
	return m.Experiment
}
