package replay

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestExperimentOf: the one rule every reader groups and selects by — the
// experiment the events record, else the reward metadata's "experiment" string,
// else "".
func TestExperimentOf(t *testing.T) {
	cases := []struct {
		name       string
		experiment string
		metadata   string
		want       string
	}{
		{"events record it", "support", "", "support"},
		{"events win over the harness's metadata", "support", `{"experiment":"coding"}`, "support"},
		{"metadata when the events record none", "", `{"experiment":"coding","judge":"v1"}`, "coding"},
		{"metadata not a string", "", `{"experiment":3}`, ""},
		{"metadata without it", "", `{"judge":"v1"}`, ""},
		{"metadata not an object", "", `[1]`, ""},
		{"nothing", "", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ep := &Episode{ID: "e", Experiment: c.experiment}
			if c.metadata != "" {
				ep.Metadata = json.RawMessage(c.metadata)
			}
			if got := ExperimentOf(ep); got != c.want {
				t.Fatalf("ExperimentOf = %q, want %q", got, c.want)
			}
		})
	}
	if SoleExperiment([]string{"support"}) != "support" || SoleExperiment(nil) != "" || SoleExperiment([]string{"a", "b"}) != "" {
		t.Fatal("SoleExperiment: the unlabelled join the one named experiment, and no experiment of several")
	}
}

// experimentEvents are four episodes of three experiments whose arms share names:
// the experiment on the episode event (and its steps), on the reward event only
// (its episode event written before events carried it), in the harness's metadata
// only, and nowhere. The reward of "sup" names another experiment in its metadata,
// and arrives before its episode event.
func experimentEvents(t testing.TB) readerSource {
	t.Helper()
	withExp := func(ev *EpisodeEvent, x string) *EpisodeEvent { ev.Experiment = x; return ev }
	stepExp := func(ev *StepEvent, x string) *StepEvent { ev.Experiment = x; return ev }
	rewardExp := func(ev *RewardEvent, x string) *RewardEvent { ev.Experiment = x; return ev }
	return readerEncode(t,
		readerReward("sup", 1, 50, nil, `{"experiment":"coding"}`),
		withExp(readerEpisode("sup", "refund", 0), "support"),
		stepExp(readerStep("sup", 0, 10, "user:refund please"), "support"),
		readerEpisode("res", "appworld", 1),
		readerStep("res", 0, 11, "user:go"),
		rewardExp(readerReward("res", 0.5, 60, nil, ""), "research"),
		readerEpisode("cod", "fix bug", 2),
		readerReward("cod", 0, 70, nil, `{"experiment":"coding"}`),
		readerEpisode("old", "legacy", 3),
		readerReward("old", 1, 80, nil, ""),
	)
}

// TestReadExperiment: Read and the streaming reader (full and light) put each
// episode in its experiment by the rule.
func TestReadExperiment(t *testing.T) {
	src := experimentEvents(t)
	want := map[string]string{"sup": "support", "res": "research", "cod": "coding", "old": ""}
	check := func(what string, b *Buffer) {
		t.Helper()
		got := map[string]string{}
		for _, ep := range b.Episodes {
			got[ep.ID] = ExperimentOf(ep)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: experiments %v, want %v", what, got, want)
		}
	}
	b, err := Read(t.Context(), src)
	if err != nil {
		t.Fatal(err)
	}
	check("Read", b)
	if ep := episodeOf(b, "sup"); ep.Experiment != "support" {
		t.Fatalf("the episode event's experiment is the episode's: %q", ep.Experiment)
	}
	for _, light := range []bool{false, true} {
		streamSameAsRead(t, src, ReadOptions{Light: light, MemoryBytes: 1})
		got, _ := streamCollect(t, src, ReadOptions{Light: light})
		check("Episodes", got)
	}
	sel, _ := streamCollect(t, src, ReadOptions{Select: Selection{Experiment: "support"}})
	var ids []string
	for _, ep := range sel.Episodes {
		ids = append(ids, ep.ID)
	}
	if !slices.Equal(ids, []string{"sup", "old"}) {
		t.Fatalf("--experiment support selects %v, want its own and the one that records none", ids)
	}
}

// TestStatsByExperiment: three experiments with arms of the same names keep a row
// each; the episodes that record none join the one named experiment, or stand
// apart from several.
func TestStatsByExperiment(t *testing.T) {
	ep := func(id, exp, arm string, reward float64) *Episode {
		return &Episode{ID: id, TaskID: "t-" + id, Experiment: exp, Arm: arm, Reward: readerPtr(reward)}
	}
	b := &Buffer{Episodes: []*Episode{
		ep("1", "support", "baseline", 0), ep("2", "support", "cam", 1), ep("3", "support", "cam", 1),
		ep("4", "research", "baseline", 0.2), ep("5", "research", "cam", 0.4),
		ep("6", "coding", "cam", 0), ep("7", "coding", "cam", 0),
		ep("8", "", "cam", 0.5),
	}}
	got := computeStats(b)
	type row struct {
		exp, arm string
		n        int
		mean     float64
	}
	var rows []row
	for _, a := range got.Arms {
		rows = append(rows, row{a.Experiment, a.Arm, a.Episodes, a.MeanReward})
	}
	want := []row{{"", "cam", 1, 0.5}, {"coding", "cam", 2, 0}, {"research", "baseline", 1, 0.2}, {"research", "cam", 1, 0.4},
		{"support", "baseline", 1, 0}, {"support", "cam", 2, 1}}
	if !reflect.DeepEqual(rows, want) || !slices.Equal(got.Experiments, []string{"", "coding", "research", "support"}) {
		t.Fatalf("rows %v of %q\nwant %v", rows, got.Experiments, want)
	}
	var sb strings.Builder
	if err := got.WriteText(&sb); err != nil {
		t.Fatal(err)
	}
	for _, frag := range []string{
		"experiments    coding, research, support",
		"experiment  arm       episodes  rewarded  mean reward  success rate",
		"(none)      cam       1         1         0.500",
		"coding      cam       2         2         0.000",
		"support     cam       2         2         1.000",
	} {
		if !strings.Contains(sb.String(), frag) {
			t.Errorf("text lacks %q:\n%s", frag, sb.String())
		}
	}

	// One experiment named: the unlabelled episodes are its (older) own.
	one := computeStats(&Buffer{Episodes: []*Episode{ep("1", "support", "cam", 1), ep("2", "", "cam", 0)}})
	if len(one.Arms) != 1 || one.Arms[0] != (ArmStats{Experiment: "support", Arm: "cam", Episodes: 2, Rewarded: 2, MeanReward: 0.5}) ||
		!slices.Equal(one.Experiments, []string{"support"}) {
		t.Fatalf("one experiment: %+v", one)
	}
	sb.Reset()
	_ = one.WriteText(&sb)
	if strings.Contains(sb.String(), "experiment  arm") || !strings.Contains(sb.String(), "experiments    support") {
		t.Fatalf("one experiment needs no experiment column:\n%s", sb.String())
	}
}
