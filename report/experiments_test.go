package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/replay"
)

// The experiments fixture: a gateway's three experiments, each with arms named
// baseline and cam, whose rewards differ so that any averaging across experiments
// shows. Six runs per arm over tasks a, b, c (twice each); rewards by run:
//
//	support   baseline 0 0 1 0 0 1 (mean 1/3)   cam 1 1 1 0 1 1 (mean 5/6)
//	coding    baseline 1 1 1 1 0 1 (mean 5/6)   cam 0 0 1 0 0 0 (mean 1/6)
//	research  baseline 0.2 0.4 0.3 0.2 0.4 0.3 (mean 0.3)   cam 0.6 … (mean 0.6)
//
// support's episodes record their experiment on the episode event; coding's only on
// the reward event (its episode events predate the name); research's only in the
// harness's metadata. Two more episodes, on cam, record none (reward 0.5 each), and
// one learn event belongs to coding.
var experimentRewards = map[string]map[string][6]float64{
	"support":  {"baseline": {0, 0, 1, 0, 0, 1}, "cam": {1, 1, 1, 0, 1, 1}},
	"coding":   {"baseline": {1, 1, 1, 1, 0, 1}, "cam": {0, 0, 1, 0, 0, 0}},
	"research": {"baseline": {0.2, 0.4, 0.3, 0.2, 0.4, 0.3}, "cam": {0.6, 0.5, 0.7, 0.6, 0.5, 0.7}},
}

var experimentStart = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

func experimentLines(t *testing.T) [][]byte {
	t.Helper()
	var lines [][]byte
	add := lineAdder(t, &lines)
	i := 0
	episode := func(id, exp, arm, task string, reward float64, where string) {
		start := experimentStart.Add(time.Duration(i) * 3 * time.Minute)
		i++
		e := replay.EpisodeEvent{V: replay.Version, Type: replay.TypeEpisode, ID: id + "-e", EpisodeID: id, TaskID: task,
			Task: "task " + task, Arm: arm, Protocol: "openai", Model: "gpt-4o", StartedAt: start}
		s := replay.StepEvent{V: replay.Version, Type: replay.TypeStep, ID: id + "-s0", EpisodeID: id, Status: 200,
			At: start.Add(20 * time.Second), Timing: replay.Timing{Augment: 40}}
		r := replay.RewardEvent{V: replay.Version, Type: replay.TypeReward, ID: id + "-r", EpisodeID: id, Reward: reward,
			At: start.Add(30 * time.Second)}
		switch where {
		case "episode":
			e.Experiment, s.Experiment, r.Experiment = exp, exp, exp
		case "reward":
			r.Experiment = exp
		case "metadata":
			r.Metadata = json.RawMessage(fmt.Sprintf(`{"experiment":%q}`, exp))
		}
		add(e)
		add(s)
		add(r)
	}
	where := map[string]string{"support": "episode", "coding": "reward", "research": "metadata"}
	for run := range 6 {
		for _, exp := range []string{"support", "coding", "research"} {
			for _, arm := range []string{"baseline", "cam"} {
				task := string(rune('a' + run%3))
				episode(fmt.Sprintf("%s-%s-%d", exp, arm, run), exp, arm, task, experimentRewards[exp][arm][run], where[exp])
			}
		}
	}
	episode("old-0", "", "cam", "a", 0.5, "")
	episode("old-1", "", "cam", "b", 0.5, "")
	add(replay.LearnEvent{V: replay.Version, Type: replay.TypeLearn, ID: "learn-1", Experiment: "coding", Action: replay.LearnVersion,
		Version: 1, Arm: "cam", Champion: "cam", ChampionVersion: 1, At: experimentStart})
	return lines
}

func experimentBuffer(t *testing.T) *replay.Buffer {
	t.Helper()
	return readLines(t, experimentLines(t))
}

// TestExperimentsFixtureFile keeps testdata/episodes-experiments.jsonl, which the CLI
// tests import, equal to the fixture.
func TestExperimentsFixtureFile(t *testing.T) {
	golden(t, "episodes-experiments.jsonl", append(bytes.Join(experimentLines(t), []byte("\n")), '\n'))
}

// TestSplitKeepsExperimentsApart: each experiment is its own report whose
// baseline and cam rows hold only its own rewards, the episodes that record none
// are reported apart, and learn events go to their experiment.
func TestSplitKeepsExperimentsApart(t *testing.T) {
	rs, err := Split(experimentBuffer(t), Options{Source: "file:///gateway"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.Experiment)
	}
	if strings.Join(got, ",") != "coding,research,support," {
		t.Fatalf("reports of experiments %q, want coding, research, support and the unlabelled", got)
	}
	for _, r := range rs[:3] {
		if r.Episodes != 12 || len(r.Arms) != 2 || r.Control != "baseline" {
			t.Fatalf("%s: %d episodes, arms %+v", r.Experiment, r.Episodes, r.Arms)
		}
		for _, a := range r.Arms {
			var sum float64
			for _, v := range experimentRewards[r.Experiment][a.Name] {
				sum += v
			}
			if a.Episodes != 6 || a.Rewarded != 6 || !equal(*a.MeanReward, sum/6) {
				t.Errorf("%s %s: %d episodes, mean %v, want 6 and %v (its own rewards only)", r.Experiment, a.Name, a.Episodes, *a.MeanReward, sum/6)
			}
		}
		if (r.Learning != nil) != (r.Experiment == "coding") {
			t.Errorf("%s: learning %+v: only coding has a learner", r.Experiment, r.Learning)
		}
	}
	none := rs[3]
	if none.Episodes != 2 || len(none.Arms) != 1 || none.Arms[0].Name != "cam" || !equal(*none.Arms[0].MeanReward, 0.5) || none.Learning != nil {
		t.Fatalf("the unlabelled episodes: %+v", none)
	}
	var text bytes.Buffer
	if err := rs.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, frag := range []string{
		"camproxy report: file:///gateway, experiment coding, 12 episodes, 2 arms, control arm baseline",
		"camproxy report: file:///gateway, experiment support, 12 episodes, 2 arms, control arm baseline",
		"camproxy report: file:///gateway, episodes that record no experiment, 2 episodes, 1 arm, control arm cam",
	} {
		if !strings.Contains(text.String(), frag) {
			t.Errorf("text lacks %q:\n%s", frag, text.String())
		}
	}
}

func equal(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// TestSplitOneExperiment: with --experiment, or with one experiment named in the
// buffer, there is one report, New's.
func TestSplitOneExperiment(t *testing.T) {
	b := experimentBuffer(t)
	rs, err := Split(b, Options{Experiment: "support"})
	if err != nil || len(rs) != 1 {
		t.Fatalf("%d reports, %v", len(rs), err)
	}
	if r := rs[0]; r.Experiment != "support" || r.Episodes != 14 || r.Unlabelled != 2 || r.Excluded != 24 {
		t.Fatalf("--experiment support: %d episodes, %d unlabelled, %d excluded", r.Episodes, r.Unlabelled, r.Excluded)
	}
	var one []*replay.Episode
	for _, ep := range b.Episodes {
		if x := ExperimentOf(ep); x == "support" || x == "" {
			one = append(one, ep)
		}
	}
	rs, err = Split(&replay.Buffer{Episodes: one}, Options{})
	if err != nil || len(rs) != 1 || rs[0].Episodes != 14 || rs[0].Experiment != "" {
		t.Fatalf("one experiment named: %d reports, %v", len(rs), err)
	}
	want, _ := New(&replay.Buffer{Episodes: one}, Options{})
	var g, w bytes.Buffer
	_ = rs.WriteJSON(&g)
	_ = want.WriteJSON(&w)
	if !bytes.Equal(g.Bytes(), w.Bytes()) {
		t.Fatalf("one experiment's JSON is not New's:\n%s", g.Bytes())
	}
}

// TestSplitControl: a control arm one experiment lacks is an error naming it.
func TestSplitControl(t *testing.T) {
	_, err := Split(experimentBuffer(t), Options{Control: "baseline"})
	if !errors.Is(err, ErrNoControl) || !strings.Contains(err.Error(), "episodes that record no experiment") {
		t.Fatalf("control baseline, which the unlabelled episodes lack: %v", err)
	}
}

// TestGoldenExperiments: the gateway fixture's reports as text and JSON (golden
// files), and as one HTML page with a section per experiment.
func TestGoldenExperiments(t *testing.T) {
	rs, err := Split(experimentBuffer(t), Options{Source: "file:///gateway"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*bytes.Buffer{}
	for name, write := range map[string]func(io.Writer) error{"txt": rs.WriteText, "json": rs.WriteJSON, "html": rs.WriteHTML} {
		out[name] = &bytes.Buffer{}
		if err := write(out[name]); err != nil {
			t.Fatal(err)
		}
	}
	golden(t, "report-experiments.txt", out["txt"].Bytes())
	golden(t, "report-experiments.json", out["json"].Bytes())
	var doc struct {
		V           int    `json:"v"`
		Source      string `json:"source"`
		Experiments []struct {
			Experiment string `json:"experiment"`
			Arms       []struct {
				Arm        string  `json:"arm"`
				MeanReward float64 `json:"mean_reward"`
			} `json:"arms"`
		} `json:"experiments"`
	}
	if err := json.Unmarshal(out["json"].Bytes(), &doc); err != nil || doc.V != 1 || doc.Source != "file:///gateway" || len(doc.Experiments) != 4 {
		t.Fatalf("%v %+v", err, doc)
	}
	if e := doc.Experiments[2]; e.Experiment != "support" || e.Arms[1].Arm != "cam" || e.Arms[1].MeanReward != 0.833333 {
		t.Fatalf("support: %+v", e)
	}
	page := out["html"].String()
	if strings.Count(page, `<section class="experiment">`) != 4 || strings.Count(page, "<h1>") != 1 ||
		!strings.Contains(page, "<h2>Experiment research</h2>") || !strings.Contains(page, "<h2>Episodes that record no experiment</h2>") ||
		!strings.Contains(page, "4 experiments, each compared on its own: coding, research, support, (none)") || !strings.HasSuffix(page, "</html>\n") {
		t.Fatalf("page:\n%s", page)
	}
}

// SplitStream reports what Split reports on Read's buffer.
func TestSplitStreamSameAsSplit(t *testing.T) {
	src := replay.NewFileSource(writeLines(t, experimentLines(t)))
	want, err := Split(experimentBuffer(t), Options{Source: "s"})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := SplitStream(context.Background(), src, replay.ReadOptions{MemoryBytes: 1}, Options{Source: "s"})
	if err != nil {
		t.Fatal(err)
	}
	var g, w bytes.Buffer
	_ = got.WriteJSON(&g)
	_ = want.WriteJSON(&w)
	if !bytes.Equal(g.Bytes(), w.Bytes()) {
		t.Fatalf("SplitStream\n%s\nSplit\n%s", g.Bytes(), w.Bytes())
	}
}
