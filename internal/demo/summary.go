package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/replay/location"
	"github.com/camproxy/camproxy/report"
)

// Note is said wherever the demo prints its figures.
const Note = "the agent and the optimiser models are scripted: this proves the plumbing, not model quality"

// Line is the demo's last line, `demo: {json}`. Every figure comes from the report
// `camproxy report --format json` gives on the same buffer, rounded the same way:
// the versions and the champion's reigns from its learning curve, the baseline and
// the champion from its arms, the lift from its comparison of the two.
type Line struct {
	Replay    string        `json:"replay"` // the buffer: camproxy report --from this
	Note      string        `json:"note"`
	Versions  []VersionLine `json:"versions"`
	Champions []ReignLine   `json:"champions"` // the champion over time: the learning curve
	Baseline  ArmLine       `json:"baseline"`
	Champion  ArmLine       `json:"champion"`
	Lift      *float64      `json:"lift"`      // champion − baseline mean reward
	LiftCI95  *[2]float64   `json:"lift_ci95"` // Welch's 95% interval of the lift
	P         *float64      `json:"p_value"`
}

// VersionLine is one playbook version and how the arm that served it did.
type VersionLine struct {
	Version int    `json:"version"`
	Arm     string `json:"arm"`
	Parent  int    `json:"parent"`
	Entries int    `json:"entries"`
	// Outcome is the learner's last word on it: champion, retired (a champion that
	// was replaced), stopped, or candidate.
	Outcome    string   `json:"outcome"`
	Rewarded   int      `json:"rewarded"`
	MeanReward *float64 `json:"mean_reward"`
}

// ReignLine is one champion's reign: its arm's episodes that started meanwhile.
type ReignLine struct {
	Version    int      `json:"version"`
	Arm        string   `json:"arm"`
	Rewarded   int      `json:"rewarded"`
	MeanReward *float64 `json:"mean_reward"`
}

// ArmLine is one arm's outcome over the whole run.
type ArmLine struct {
	Arm        string      `json:"arm"`
	Version    int         `json:"version,omitempty"` // the champion's playbook version
	Episodes   int         `json:"episodes"`
	Rewarded   int         `json:"rewarded"`
	MeanReward *float64    `json:"mean_reward"`
	CI95       *[2]float64 `json:"ci95"`
}

// ReportJSON is the report of the buffer at uri exactly as `camproxy report
// --format json --from uri` prints it, decoded.
func ReportJSON(ctx context.Context, uri string) (*report.Report, error) {
	src, err := replay.OpenSource(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	rep, _, err := report.FromStream(ctx, src, replay.ReadOptions{}, report.Options{Source: location.Redact(uri)})
	if c, ok := src.(io.Closer); ok {
		_ = c.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("demo: report: %w", err)
	}
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		return nil, err
	}
	var out report.Report
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		return nil, fmt.Errorf("demo: report json: %w", err)
	}
	return &out, nil
}

// Summarize makes the demo line from the buffer at uri (see Line).
func Summarize(ctx context.Context, uri string) (*Line, error) {
	rep, err := ReportJSON(ctx, uri)
	if err != nil {
		return nil, err
	}
	return SummarizeReport(rep)
}

// SummarizeReport is the demo line of a report (as decoded from its JSON).
func SummarizeReport(rep *report.Report) (*Line, error) {
	if rep.Learning == nil {
		return nil, errors.New("demo: the buffer holds no learn event: was the learner on?")
	}
	arm := func(name string) *report.Arm {
		for i := range rep.Arms {
			if rep.Arms[i].Name == name {
				return &rep.Arms[i]
			}
		}
		return nil
	}
	line := &Line{Replay: rep.Source, Note: Note, Versions: []VersionLine{}, Champions: []ReignLine{}}
	for _, v := range rep.Learning.Versions {
		line.Versions = append(line.Versions, VersionLine{Version: v.Version, Arm: v.Arm, Parent: v.Parent, Entries: v.Entries,
			Outcome: v.Outcome, Rewarded: v.Rewarded, MeanReward: v.MeanReward})
	}
	for _, c := range rep.Learning.Champions {
		line.Champions = append(line.Champions, ReignLine{Version: c.Version, Arm: c.Arm, Rewarded: c.Rewarded, MeanReward: c.MeanReward})
	}
	champion := rep.Learning.Champion
	base, champ := arm(BaselineArm), arm(champion)
	if base == nil || champ == nil {
		return nil, fmt.Errorf("demo: the buffer lacks the baseline or the champion %q: record some traffic first", champion)
	}
	line.Baseline = ArmLine{Arm: base.Name, Episodes: base.Episodes, Rewarded: base.Rewarded, MeanReward: base.MeanReward, CI95: base.CI95}
	line.Champion = ArmLine{Arm: champ.Name, Version: rep.Learning.ChampionVersion, Episodes: champ.Episodes, Rewarded: champ.Rewarded,
		MeanReward: champ.MeanReward, CI95: champ.CI95}
	for _, c := range rep.Comparisons {
		if c.Arm == champion && c.Control == BaselineArm {
			line.Lift, line.LiftCI95, line.P = c.Lift, c.LiftCI95, c.P
		}
	}
	return line, nil
}

// WriteTable prints the versions and the verdict for people.
func (l *Line) WriteTable(w io.Writer) {
	pct := func(v *float64) string {
		if v == nil {
			return "–"
		}
		return fmt.Sprintf("%5.1f%%", *v*100)
	}
	fmt.Fprintf(w, "\nreward by playbook version (from the replay buffer %s):\n", l.Replay)
	fmt.Fprintf(w, "  %-8s %-10s %-7s %-8s %-10s %8s %s\n", "version", "arm", "parent", "entries", "outcome", "rewarded", "mean reward")
	fmt.Fprintf(w, "  %-8s %-10s %-7s %-8s %-10s %8d %s\n", "-", l.Baseline.Arm, "-", "-", "control", l.Baseline.Rewarded, pct(l.Baseline.MeanReward))
	for _, v := range l.Versions {
		parent := "-"
		if v.Parent > 0 {
			parent = fmt.Sprintf("v%d", v.Parent)
		}
		fmt.Fprintf(w, "  %-8s %-10s %-7s %-8d %-10s %8d %s\n", fmt.Sprintf("v%d", v.Version), v.Arm, parent, v.Entries, v.Outcome, v.Rewarded, pct(v.MeanReward))
	}
	fmt.Fprintf(w, "\nthe champion over time (its episodes while it reigned):")
	for _, c := range l.Champions {
		fmt.Fprintf(w, "  v%d %s (%d)", c.Version, strings.TrimSpace(pct(c.MeanReward)), c.Rewarded)
	}
	fmt.Fprintln(w)
	if l.Lift != nil {
		ci := ""
		if l.LiftCI95 != nil {
			ci = fmt.Sprintf(" (95%% interval %+.1f to %+.1f)", l.LiftCI95[0]*100, l.LiftCI95[1]*100)
		}
		fmt.Fprintf(w, "\nchampion %s (v%d) vs baseline: %s vs %s, lift %+.1f points%s\n", l.Champion.Arm, l.Champion.Version,
			pct(l.Champion.MeanReward), strings.TrimSpace(pct(l.Baseline.MeanReward)), *l.Lift*100, ci)
	}
	fmt.Fprintf(w, "note: %s\n", l.Note)
}

// String is the line itself: "demo: {json}".
func (l *Line) String() string {
	b, _ := json.Marshal(l)
	return "demo: " + string(b)
}
