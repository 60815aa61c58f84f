package report

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/camproxy/camproxy/replay"
)

// This file is the learning curve: the playbook versions the online learner (learn:
// inside camproxy serve) wrote, tried and promoted, with the mean reward each one's
// arm earned, and the champion over time. It is read from the buffer's learn events
// and the episodes of the arms they name.

// Learning is the online learner's curve; nil when the buffer holds no learn event.
type Learning struct {
	Champion        string         `json:"champion"`         // the champion arm after the last decision
	ChampionVersion int            `json:"champion_version"` // its playbook version
	Versions        []LearnVersion `json:"versions"`         // by version
	Champions       []ChampionSpan `json:"champions"`        // the champion timeline, oldest first
}

// LearnVersion is one playbook version and the episodes of the arm that served it.
type LearnVersion struct {
	Version   int       `json:"version"`
	Arm       string    `json:"arm"`
	Parent    int       `json:"parent"` // 0: the playbook learning started from
	Iteration int       `json:"iteration"`
	Entries   int       `json:"entries"`
	CreatedAt time.Time `json:"created_at"`
	// Outcome is champion (it is now), retired (it was, and was replaced), stopped
	// (a candidate the guardrail or the champion beat, or inconclusive after
	// learn.max_trial), candidate (on trial), or untried (only its counts changed:
	// the agent would have seen the champion's context; the next step started from it).
	Outcome    string      `json:"outcome"`
	DecidedAt  *time.Time  `json:"decided_at"` // when it was promoted or stopped
	Rewarded   int         `json:"rewarded"`   // rewarded episodes of its arm
	MeanReward *float64    `json:"mean_reward"`
	CI95       *[2]float64 `json:"ci95"`
}

// ChampionSpan is one champion's reign: the rewarded episodes of its arm that
// started between From and To.
type ChampionSpan struct {
	Version    int         `json:"version"`
	Arm        string      `json:"arm"`
	From       time.Time   `json:"from"`
	To         *time.Time  `json:"to"` // null: still the champion
	Rewarded   int         `json:"rewarded"`
	MeanReward *float64    `json:"mean_reward"`
	CI95       *[2]float64 `json:"ci95"`
}

// learning builds the curve from learn events (in time order) and the reported
// episodes; experiment, when set, keeps the events of that experiment and those
// that name none.
func learning(events []*replay.LearnEvent, episodes []*replay.Episode, experiment string) *Learning {
	var evs []*replay.LearnEvent
	for _, ev := range events {
		if experiment == "" || ev.Experiment == "" || ev.Experiment == experiment {
			evs = append(evs, ev)
		}
	}
	if len(evs) == 0 {
		return nil
	}
	l := &Learning{Versions: []LearnVersion{}, Champions: []ChampionSpan{}}
	byVersion := map[int]*LearnVersion{}
	version := func(ev *replay.LearnEvent) *LearnVersion {
		v := byVersion[ev.Version]
		if v == nil {
			v = &LearnVersion{Version: ev.Version, Arm: ev.Arm, Parent: ev.Parent, Iteration: ev.Iteration, Entries: ev.Entries,
				CreatedAt: ev.At, Outcome: "candidate"}
			byVersion[ev.Version] = v
		}
		return v
	}
	for _, ev := range evs {
		v := version(ev)
		at := ev.At
		switch ev.Action {
		case replay.LearnVersion:
			switch {
			case ev.Champion == ev.Arm && ev.ChampionVersion == ev.Version:
				v.Outcome = "champion" // the playbook learning starts from
			case ev.Arm == "":
				v.Outcome = "untried" // only counts changed: the next step started from it
			}
		case replay.LearnPromoted:
			for _, o := range byVersion {
				if o.Outcome == "champion" && o != v {
					o.Outcome = "retired"
				}
			}
			v.Outcome, v.DecidedAt = "champion", &at
		case replay.LearnStopped:
			v.Outcome, v.DecidedAt = "stopped", &at
		}
		switch {
		case len(l.Champions) == 0:
			l.Champions = append(l.Champions, ChampionSpan{Version: ev.ChampionVersion, Arm: ev.Champion, From: ev.At})
		case ev.Action == replay.LearnPromoted:
			last := &l.Champions[len(l.Champions)-1]
			last.To = &at
			l.Champions = append(l.Champions, ChampionSpan{Version: ev.ChampionVersion, Arm: ev.Champion, From: ev.At})
		}
		l.Champion, l.ChampionVersion = ev.Champion, ev.ChampionVersion
	}
	byArm := map[string][]float64{}
	for _, ep := range episodes {
		if ep.Reward != nil {
			byArm[ep.Arm] = append(byArm[ep.Arm], *ep.Reward)
		}
	}
	for _, v := range byVersion {
		v.Rewarded, v.MeanReward, v.CI95 = meanCI(byArm[v.Arm])
		l.Versions = append(l.Versions, *v)
	}
	slices.SortFunc(l.Versions, func(a, b LearnVersion) int { return a.Version - b.Version })
	for i := range l.Champions {
		c := &l.Champions[i]
		var rs []float64
		for _, ep := range episodes {
			if ep.Arm == c.Arm && ep.Reward != nil && !ep.StartedAt.Before(c.From) && (c.To == nil || ep.StartedAt.Before(*c.To)) {
				rs = append(rs, *ep.Reward)
			}
		}
		c.Rewarded, c.MeanReward, c.CI95 = meanCI(rs)
	}
	return l
}

// meanCI is the count, mean and 95% t interval (from two values) of rs.
func meanCI(rs []float64) (int, *float64, *[2]float64) {
	if len(rs) == 0 {
		return 0, nil, nil
	}
	mean, variance := meanVar(rs)
	if len(rs) < 2 {
		return 1, &mean, nil
	}
	_ = variance
	ci, _ := RewardCI95(rs)
	return len(rs), &mean, ci
}

func (l *Learning) rounded() *Learning {
	if l == nil {
		return nil
	}
	out := *l
	round := func(m *float64, ci *[2]float64) (*float64, *[2]float64) {
		if ci != nil {
			ci = &[2]float64{round6(ci[0]), round6(ci[1])}
		}
		return roundPtr(m), ci
	}
	out.Versions = slices.Clone(l.Versions)
	for i := range out.Versions {
		out.Versions[i].MeanReward, out.Versions[i].CI95 = round(out.Versions[i].MeanReward, out.Versions[i].CI95)
	}
	out.Champions = slices.Clone(l.Champions)
	for i := range out.Champions {
		out.Champions[i].MeanReward, out.Champions[i].CI95 = round(out.Champions[i].MeanReward, out.Champions[i].CI95)
	}
	return &out
}

func fmtVersion(n int) string {
	if n <= 0 {
		return dash
	}
	return fmt.Sprintf("v%d", n)
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "now"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// writeLearningText prints the versions and the champion timeline.
func (r *Report) writeLearningText(ew *errWriter) {
	l := r.Learning
	if l == nil {
		return
	}
	ew.printf("\nlearning curve: playbook versions of the online learner (champion now %s, %s)\n", l.Champion, fmtVersion(l.ChampionVersion))
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "version\tarm\tparent\tentries\toutcome\trewarded\tmean reward\t95% CI\n")
	for _, v := range l.Versions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", fmtVersion(v.Version), v.Arm, fmtVersion(v.Parent), v.Entries, v.Outcome,
			v.Rewarded, fmtNum(v.MeanReward, "%.3f"), fmtCI(v.CI95))
	}
	tw.Flush()
	ew.printf("\nchampion over time (its episodes that started while it was champion)\n")
	tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "from (UTC)\tto\tversion\tarm\trewarded\tmean reward\t95% CI\n")
	for _, c := range l.Champions {
		from := c.From
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", fmtTime(&from), fmtTime(c.To), fmtVersion(c.Version), c.Arm, c.Rewarded,
			fmtNum(c.MeanReward, "%.3f"), fmtCI(c.CI95))
	}
	tw.Flush()
}

// writeLearningHTML draws the champion's mean reward over time (one step per reign,
// its 95% interval shaded) and the two tables.
func (r *Report) writeLearningHTML(ew *errWriter, lo, hi float64) {
	l := r.Learning
	if l == nil {
		return
	}
	esc := html.EscapeString
	ew.printf("<section id=\"learning\">\n<h2>Learning curve</h2>\n<p class=\"sub\">The online learner's playbook versions; champion now %s (%s).</p>\n",
		esc(l.Champion), fmtVersion(l.ChampionVersion))
	ew.printf("<figure>\n<figcaption>The champion's mean reward over time, by version, with 95%% confidence intervals</figcaption>\n")
	svgOpen(ew, "the champion's mean reward over time, one step per champion version")
	y := yAxis(ew, lo, hi, "champion mean reward")
	t0 := l.Champions[0].From
	t1 := t0
	for _, c := range l.Champions {
		t1 = maxTime(t1, c.From)
		if c.To != nil {
			t1 = maxTime(t1, *c.To)
		}
	}
	t1 = maxTime(t1, r.lastStart)
	span := t1.Sub(t0)
	if span <= 0 {
		span = time.Second
	}
	x := func(t time.Time) float64 { return padLeft + plotW*float64(t.Sub(t0))/float64(span) }
	for _, t := range timeTicks(t0, t0.Add(span)) {
		xx := x(t)
		ew.printf("<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#888\"/>", xx, xx, padTop+plotH, padTop+plotH+4)
		ew.printf("<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", xx, padTop+plotH+18, t.UTC().Format(timeLayout(span)))
	}
	ew.printf("<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#888\"/>\n", padLeft, padLeft+plotW, padTop+plotH, padTop+plotH)
	for i, c := range l.Champions {
		end := t0.Add(span)
		if c.To != nil {
			end = *c.To
		}
		x0, x1 := x(c.From), math.Max(x(end), x(c.From)+2)
		col := Color(i)
		if c.CI95 != nil {
			ya, yb := y(c.CI95[1]), y(c.CI95[0])
			ew.printf("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" fill-opacity=\"0.18\"/>\n", x0, ya, x1-x0, yb-ya, col)
		}
		if c.MeanReward == nil {
			continue
		}
		ym := y(*c.MeanReward)
		ew.printf("<line class=\"reign\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"><title>%s %s: %.3f (n = %d)</title></line>\n",
			x0, x1, ym, ym, col, fmtVersion(c.Version), esc(c.Arm), *c.MeanReward, c.Rewarded)
		ew.printf("<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", x0+3, math.Max(ym-6, padTop+10), fmtVersion(c.Version))
	}
	ew.printf("</svg>\n</figure>\n")
	ew.printf("<table class=\"versions\">\n<tr><th>version</th><th class=\"l\">arm</th><th>parent</th><th>entries</th><th class=\"l\">outcome</th><th>rewarded</th><th>mean reward</th><th>95%% CI</th></tr>\n")
	for _, v := range l.Versions {
		ew.printf("<tr data-version=\"%d\"><td>%s</td><td class=\"l\">%s</td><td>%s</td><td>%d</td><td class=\"l\">%s</td><td>%d</td><td>%s</td><td>%s</td></tr>\n",
			v.Version, fmtVersion(v.Version), esc(v.Arm), fmtVersion(v.Parent), v.Entries, esc(v.Outcome), v.Rewarded,
			fmtNum(v.MeanReward, "%.3f"), fmtCI(v.CI95))
	}
	ew.printf("</table>\n<table class=\"champions\">\n<tr><th class=\"l\">from (UTC)</th><th class=\"l\">to</th><th>version</th><th class=\"l\">arm</th><th>rewarded</th><th>mean reward</th><th>95%% CI</th></tr>\n")
	for _, c := range l.Champions {
		from := c.From
		ew.printf("<tr><td class=\"l\">%s</td><td class=\"l\">%s</td><td>%s</td><td class=\"l\">%s</td><td>%d</td><td>%s</td><td>%s</td></tr>\n",
			fmtTime(&from), fmtTime(c.To), fmtVersion(c.Version), esc(c.Arm), c.Rewarded, fmtNum(c.MeanReward, "%.3f"), fmtCI(c.CI95))
	}
	ew.printf("</table>\n</section>\n")
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// learnNote explains the learning curve, under the tables.
func learnNote(l *Learning) string {
	if l == nil {
		return ""
	}
	return strings.Join([]string{" The learning curve lists every playbook version the online learner wrote with the rewards of the arm that served it",
		"(learn-vN serves version N); the champion's reign counts its arm's episodes that started while it was champion."}, " ")
}
