package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/internal/demo"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/report"
)

// TestDemoLineMatchesReport runs the demo and checks its last line against
// report.New over the buffer it wrote: the same arms, episodes, means, lift and
// interval (to the 6 significant digits the JSON keeps), and one version per
// version the learner recorded. Six rounds: the first promotion comes after round 2
// (3 under -race with four demos at once), and every round costs 40 episodes.
func TestDemoLineMatchesReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"-dir", dir, "-rounds", "6"}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "demo: {") || strings.Count(out.String(), "\ndemo: ") != 1 {
		t.Fatalf("the output does not end with one demo line:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "proves the plumbing, not model quality") {
		t.Fatal("the demo does not say it proves the plumbing, not model quality")
	}
	var line demo.Line
	if err := json.Unmarshal([]byte(strings.TrimPrefix(last, "demo: ")), &line); err != nil {
		t.Fatal(err)
	}
	if line.Replay != "file://"+filepath.Join(dir, "replay") {
		t.Fatalf("replay %q is not the directory the demo was given", line.Replay)
	}
	src, err := replay.OpenSource(context.Background(), line.Replay)
	if err != nil {
		t.Fatal(err)
	}
	buf, err := replay.Read(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := report.New(buf, report.Options{})
	if err != nil {
		t.Fatal(err)
	}
	arms := map[string]report.Arm{}
	for _, a := range rep.Arms {
		arms[a.Name] = a
	}
	near := func(what string, got, want *float64) {
		t.Helper()
		if got == nil || want == nil {
			if got != want {
				t.Fatalf("%s: %v vs the report's %v", what, got, want)
			}
			return
		}
		if math.Abs(*got-*want) > 1e-5*math.Max(1, math.Abs(*want)) {
			t.Fatalf("%s: %g vs the report's %g", what, *got, *want)
		}
	}
	for _, a := range []demo.ArmLine{line.Baseline, line.Champion} {
		r, ok := arms[a.Arm]
		if !ok || r.Episodes != a.Episodes || r.Rewarded != a.Rewarded {
			t.Fatalf("arm %s: %+v vs the report's %+v", a.Arm, a, r)
		}
		near(a.Arm+" mean", a.MeanReward, r.MeanReward)
	}
	var cmp *report.Comparison
	for i := range rep.Comparisons {
		if rep.Comparisons[i].Arm == line.Champion.Arm {
			cmp = &rep.Comparisons[i]
		}
	}
	if cmp == nil || cmp.Control != demo.BaselineArm || cmp.LiftCI95 == nil || line.LiftCI95 == nil {
		t.Fatalf("no comparison of the champion %s with the baseline: %+v", line.Champion.Arm, rep.Comparisons)
	}
	near("lift", line.Lift, cmp.Lift)
	near("lift interval low", &line.LiftCI95[0], &cmp.LiftCI95[0])
	near("lift interval high", &line.LiftCI95[1], &cmp.LiftCI95[1])
	near("p", line.P, cmp.P)

	written := 0
	last0 := buf.Learn[len(buf.Learn)-1]
	for _, ev := range buf.Learn {
		if ev.Action == replay.LearnVersion {
			written++
		}
	}
	if written < 2 || len(line.Versions) != written {
		t.Fatalf("%d versions in the line, %d written", len(line.Versions), written)
	}
	if line.Champion.Arm != last0.Champion || line.Champion.Version != last0.ChampionVersion {
		t.Fatalf("champion %s v%d, the learner's last word: %s v%d", line.Champion.Arm, line.Champion.Version, last0.Champion, last0.ChampionVersion)
	}
	if rep.Learning == nil || len(rep.Learning.Versions) != len(line.Versions) || len(rep.Learning.Champions) != len(line.Champions) {
		t.Fatalf("the line's versions/reigns do not match the report's learning curve: %+v", rep.Learning)
	}
	for i, v := range line.Versions {
		r := rep.Learning.Versions[i]
		if v.Version != r.Version || v.Arm != r.Arm || v.Outcome != r.Outcome || v.Rewarded != r.Rewarded || v.Rewarded != arms[v.Arm].Rewarded {
			t.Fatalf("v%d: %+v, the report %+v", v.Version, v, r)
		}
		near(v.Arm+" mean", v.MeanReward, r.MeanReward)
	}
	for i, c := range line.Champions {
		r := rep.Learning.Champions[i]
		if c.Version != r.Version || c.Rewarded != r.Rewarded {
			t.Fatalf("reign %d: %+v, the report %+v", i, c, r)
		}
		near("reign mean", c.MeanReward, r.MeanReward)
	}
	// The learner improved on the seed: the champion beats the baseline.
	if *line.Lift <= 0 || line.Champion.Arm == demo.ChampionArm {
		t.Fatalf("no lift after 6 rounds: %s", last)
	}
}

func TestFlags(t *testing.T) {
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-rounds", "0"}, {"-concurrency", "-1"}, {"extra"}, {"-nope"}, {"-dir", full}} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); err == nil {
			t.Fatalf("%q accepted", args)
		}
	}
}
