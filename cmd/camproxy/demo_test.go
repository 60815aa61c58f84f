package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/camproxy/camproxy/internal/demo"
	"github.com/camproxy/camproxy/internal/demo/demoapp"
	"github.com/camproxy/camproxy/report"
)

// TestReportReproducesTheDemo: `camproxy report --format json` on the buffer the
// demo wrote gives exactly the figures of the demo's last line (make demo).
func TestReportReproducesTheDemo(t *testing.T) {
	t.Parallel()
	line, _, err := demoapp.Run(context.Background(), demoapp.Options{Dir: filepath.Join(t.TempDir(), "demo"), Rounds: 6,
		Concurrency: 8, Harmful: true, Learning: demo.DefaultLearning()})
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, "report", "--format", "json", "--from", line.Replay)
	if code != 0 {
		t.Fatalf("camproxy report: exit %d: %s", code, errOut)
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	arms := map[string]report.Arm{}
	for _, a := range rep.Arms {
		arms[a.Name] = a
	}
	same := func(what string, a, b *float64) {
		t.Helper()
		if (a == nil) != (b == nil) || (a != nil && *a != *b) {
			t.Fatalf("%s: the demo says %v, camproxy report %v", what, demoFloat(a), demoFloat(b))
		}
	}
	for _, a := range []demo.ArmLine{line.Baseline, line.Champion} {
		r, ok := arms[a.Arm]
		if !ok || r.Episodes != a.Episodes || r.Rewarded != a.Rewarded {
			t.Fatalf("arm %s: the demo says %+v, camproxy report %+v", a.Arm, a, r)
		}
		same(a.Arm+" mean reward", a.MeanReward, r.MeanReward)
		if (a.CI95 == nil) != (r.CI95 == nil) || (a.CI95 != nil && *a.CI95 != *r.CI95) {
			t.Fatalf("arm %s interval: %v vs %v", a.Arm, a.CI95, r.CI95)
		}
	}
	if rep.Learning == nil || len(rep.Learning.Versions) != len(line.Versions) || len(rep.Learning.Champions) != len(line.Champions) {
		t.Fatalf("camproxy report's learning curve %+v does not match the demo's versions %+v", rep.Learning, line.Versions)
	}
	if rep.Learning.Champion != line.Champion.Arm || rep.Learning.ChampionVersion != line.Champion.Version {
		t.Fatalf("champion: the demo says %s v%d, camproxy report %s v%d", line.Champion.Arm, line.Champion.Version,
			rep.Learning.Champion, rep.Learning.ChampionVersion)
	}
	for i, v := range line.Versions {
		r := rep.Learning.Versions[i]
		if r.Version != v.Version || r.Arm != v.Arm || r.Outcome != v.Outcome || r.Rewarded != v.Rewarded {
			t.Fatalf("v%d: the demo says %+v, camproxy report %+v", v.Version, v, r)
		}
		same(v.Arm+" mean reward", v.MeanReward, r.MeanReward)
	}
	for i, c := range line.Champions {
		r := rep.Learning.Champions[i]
		if r.Version != c.Version || r.Arm != c.Arm || r.Rewarded != c.Rewarded {
			t.Fatalf("reign %d: the demo says %+v, camproxy report %+v", i, c, r)
		}
		same("reign mean reward", c.MeanReward, r.MeanReward)
	}
	found := false
	for _, c := range rep.Comparisons {
		if c.Arm != line.Champion.Arm {
			continue
		}
		found = true
		if c.Control != demo.BaselineArm {
			t.Fatalf("compared with %s", c.Control)
		}
		same("lift", line.Lift, c.Lift)
		same("p", line.P, c.P)
		if line.LiftCI95 == nil || c.LiftCI95 == nil || *line.LiftCI95 != *c.LiftCI95 {
			t.Fatalf("lift interval: the demo says %v, camproxy report %v", line.LiftCI95, c.LiftCI95)
		}
	}
	if !found {
		t.Fatalf("camproxy report compares no arm %s with the baseline", line.Champion.Arm)
	}
}

func demoFloat(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
