package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"slices"
	"strings"

	"github.com/camproxy/camproxy/replay"
)

// Reports is a buffer's report by experiment: one Report per experiment its
// episodes belong to (replay.ExperimentOf), so that two experiments' arms of one
// name — each gateway agent's baseline and cam — are never averaged together.
type Reports []*Report

// Split computes the reports of b. With Options.Experiment it is New's one report.
// Else a buffer whose episodes name at most one experiment gives New's one report
// too (the episodes that record none are that experiment's: replay.SoleExperiment);
// one naming several gives a report per experiment, by name, and one more, last,
// for the episodes that record none, which belong to none of them.
func Split(b *replay.Buffer, o Options) (Reports, error) {
	groups := map[string][]*replay.Episode{}
	for _, ep := range b.Episodes {
		x := ExperimentOf(ep)
		groups[x] = append(groups[x], ep)
	}
	var named []string
	for x := range groups {
		if x != "" {
			named = append(named, x)
		}
	}
	if o.Experiment != "" || len(named) <= 1 {
		r, err := New(b, o)
		if err != nil {
			return nil, err
		}
		return Reports{r}, nil
	}
	slices.Sort(named)
	if len(groups[""]) > 0 {
		named = append(named, "")
	}
	out := make(Reports, 0, len(named))
	for _, x := range named {
		sub := &replay.Buffer{Episodes: groups[x]}
		for _, ev := range b.Learn {
			// A learn event that names no experiment may be any one's; the episodes
			// that record none get only those.
			if ev.Experiment == x || ev.Experiment == "" {
				sub.Learn = append(sub.Learn, ev)
			}
		}
		r, err := New(sub, Options{Source: o.Source, Experiment: x, Control: o.Control})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", groupName(x), err)
		}
		r.none = x == ""
		out = append(out, r)
	}
	return out, nil
}

// groupName names an experiment's group in a message: "experiment NAME", or what
// stands for the episodes that record none.
func groupName(x string) string {
	if x == "" {
		return "episodes that record no experiment"
	}
	return "experiment " + x
}

// WriteText prints each report, one after the other.
func (rs Reports) WriteText(w io.Writer) error {
	for i, r := range rs {
		if i > 0 {
			if _, err := io.WriteString(w, "\n\n"); err != nil {
				return err
			}
		}
		if err := r.WriteText(w); err != nil {
			return err
		}
	}
	return nil
}

// reportsJSON is the JSON form of several reports.
type reportsJSON struct {
	V           int       `json:"v"`
	Source      string    `json:"source"`
	Experiments []*Report `json:"experiments"`
}

// WriteJSON writes one report as Report.WriteJSON does; several as
// {"v", "source", "experiments": [report, …]}, each report whole.
func (rs Reports) WriteJSON(w io.Writer) error {
	if len(rs) == 1 {
		return rs[0].WriteJSON(w)
	}
	out := reportsJSON{V: SchemaVersion, Experiments: make([]*Report, len(rs))}
	for i, r := range rs {
		out.Source = cmp.Or(out.Source, r.Source)
		out.Experiments[i] = r.rounded()
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("report: write json: %w", err)
	}
	return nil
}

// WriteHTML writes one report as Report.WriteHTML does; several as one page with a
// section per experiment.
func (rs Reports) WriteHTML(w io.Writer) error {
	if len(rs) == 1 {
		return rs[0].WriteHTML(w)
	}
	ew := &errWriter{w: w}
	writePageHead(ew, rs[0].Source)
	names := make([]string, len(rs))
	notes := rs[0].notes()
	for i, r := range rs {
		names[i] = cmp.Or(r.Experiment, replay.NoExperiment)
		if l := learnNote(r.Learning); l != "" && !strings.HasSuffix(notes, l) {
			notes += l
		}
	}
	ew.printf("<p class=\"sub\">%d experiments, each compared on its own: %s</p>\n", len(rs), html.EscapeString(strings.Join(names, ", ")))
	for _, r := range rs {
		name := groupName(r.Experiment)
		ew.printf("<section class=\"experiment\">\n<h2>%s</h2>\n", html.EscapeString(strings.ToUpper(name[:1])+name[1:]))
		r.writeHTMLBody(ew)
		ew.printf("</section>\n")
	}
	writePageFoot(ew, notes)
	return ew.err
}
