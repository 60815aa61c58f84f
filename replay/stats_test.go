package replay

import (
	"context"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

// computeStats summarises b as StatsOf summarises a source.
func computeStats(b *Buffer) Stats {
	acc := newStatsAcc()
	for _, e := range b.Episodes {
		acc.add(e)
	}
	return acc.stats(b.Skipped, b.Duplicates)
}

// statsBuffer: tasks a (3 runs), b (1 run), c (2 runs); arms cam and baseline.
func statsBuffer() *Buffer {
	ep := func(id, task, arm string, reward *float64, success *bool) *Episode {
		return &Episode{ID: id, TaskID: task, Arm: arm, Reward: reward, Success: success}
	}
	return &Buffer{
		Episodes: []*Episode{
			ep("1", "a", "cam", readerPtr(1.0), readerPtr(true)),
			ep("2", "a", "cam", readerPtr(0.5), readerPtr(false)),
			ep("3", "a", "baseline", readerPtr(0.0), readerPtr(false)),
			ep("4", "b", "baseline", nil, nil),
			ep("5", "c", "cam", nil, nil),
			ep("6", "c", "baseline", readerPtr(1.0), nil), // a reward without a success flag
		},
		Skipped: 2, Duplicates: 7,
	}
}

func TestComputeStats(t *testing.T) {
	got := computeStats(statsBuffer())
	want := Stats{
		Episodes: 6, Tasks: 3, Rewarded: 4,
		RunsPerTask:   RunsPerTask{Min: 1, Median: 2, Max: 3},
		RewardedShare: 4.0 / 6, MeanReward: 2.5 / 4, SuccessRate: 1.0 / 4,
		Experiments: []string{},
		Arms: []ArmStats{
			{Arm: "baseline", Episodes: 3, Rewarded: 2, MeanReward: 0.5, SuccessRate: 0},
			{Arm: "cam", Episodes: 3, Rewarded: 2, MeanReward: 0.75, SuccessRate: 0.5},
		},
		Skipped: 2, Duplicates: 7,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("computeStats:\n got %+v\nwant %+v", got, want)
	}
}

func TestComputeStatsEmpty(t *testing.T) {
	got := computeStats(&Buffer{})
	if got.Episodes != 0 || got.RewardedShare != 0 || got.MeanReward != 0 || got.RunsPerTask != (RunsPerTask{}) || len(got.Arms) != 0 {
		t.Errorf("empty buffer: %+v", got)
	}
	var sb strings.Builder
	if err := got.WriteText(&sb); err != nil || !strings.Contains(sb.String(), "episodes") {
		t.Errorf("WriteText of empty stats: %v\n%s", err, sb.String())
	}
}

func TestRunsPerTaskEvenMedian(t *testing.T) {
	b := &Buffer{}
	for i, task := range []string{"a", "b", "b", "c", "c", "c", "d", "d", "d", "d"} {
		b.Episodes = append(b.Episodes, &Episode{ID: string(rune('0' + i)), TaskID: task})
	}
	if got := computeStats(b).RunsPerTask; got != (RunsPerTask{Min: 1, Median: 2, Max: 4}) {
		t.Errorf("runs per task %+v", got)
	}
}

func TestStatsWriteText(t *testing.T) {
	var sb strings.Builder
	if err := computeStats(statsBuffer()).WriteText(&sb); err != nil {
		t.Fatal(err)
	}
	text := sb.String()
	for _, frag := range []string{
		"episodes       6", "tasks          3", "min 1, median 2, max 3", "rewarded       4 (66.7%)",
		"mean reward    0.625", "success rate   25.0%", "skipped lines  2", "duplicates     7",
		"arm       episodes  rewarded  mean reward  success rate",
		"baseline  3         2         0.500        0.0%",
		"cam       3         2         0.750        50.0%",
	} {
		if !strings.Contains(text, frag) {
			t.Errorf("text lacks %q:\n%s", frag, text)
		}
	}
}

func TestStatsJSON(t *testing.T) {
	b, err := json.Marshal(computeStats(statsBuffer()))
	if err != nil {
		t.Fatal(err)
	}
	for _, frag := range []string{
		`"episodes":6`, `"tasks":3`, `"rewarded":4`, `"runs_per_task":{"min":1,"median":2,"max":3}`,
		`"mean_reward":0.625`, `"success_rate":0.25`, `"arms":[{"arm":"baseline"`, `"skipped":2`, `"duplicates":7`,
	} {
		if !strings.Contains(string(b), frag) {
			t.Errorf("JSON lacks %s:\n%s", frag, b)
		}
	}
}

// StatsOf, one streaming pass with a spill, says what computeStats says of Read's
// buffer; the selection narrows it to what it selects.
func TestStatsOfSameAsComputeStats(t *testing.T) {
	t.Parallel() // its own directories and data: it overlaps the package's other heavy tests

	dir := streamMessyBuffer(t, 4) // all of it: a light read spills past the smallest memtable
	src := NewFileSource(dir)
	b, err := Read(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	want := computeStats(b)
	got, sum, err := StatsOf(context.Background(), src, ReadOptions{MemoryBytes: 1, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Spilled == 0 {
		t.Fatal("nothing spilled")
	}
	// Rewards sum in another order: equal up to rounding.
	if math.Abs(got.MeanReward-want.MeanReward) > 1e-12 {
		t.Fatalf("mean reward %v, want %v", got.MeanReward, want.MeanReward)
	}
	got.MeanReward = want.MeanReward
	for i := range got.Arms {
		if math.Abs(got.Arms[i].MeanReward-want.Arms[i].MeanReward) > 1e-12 {
			t.Fatalf("arm %s mean %v, want %v", got.Arms[i].Arm, got.Arms[i].MeanReward, want.Arms[i].MeanReward)
		}
		got.Arms[i].MeanReward = want.Arms[i].MeanReward
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("StatsOf:\n got %+v\nwant %+v", got, want)
	}
	// Three arms in each of the experiments x1 and x2 and in the episodes that record
	// none: nine rows.
	if len(want.Arms) != 9 || want.Tasks != 50 || !reflect.DeepEqual(want.Experiments, []string{"", "x1", "x2"}) {
		t.Fatalf("the buffer has %d arm rows of experiments %q and %d tasks, want 9 of \"\", x1, x2 and 50", len(want.Arms), want.Experiments, want.Tasks)
	}

	one, _, err := StatsOf(context.Background(), src, ReadOptions{Select: Selection{Arms: []string{"cam"}}})
	if err != nil {
		t.Fatal(err)
	}
	var cam ArmStats
	for _, a := range want.Arms {
		if a.Arm == "cam" {
			cam.Episodes += a.Episodes
			cam.Rewarded += a.Rewarded
		}
	}
	if len(one.Arms) != 3 || one.Episodes != cam.Episodes || one.Rewarded != cam.Rewarded {
		t.Fatalf("selected arm cam: %+v, want the arm's %+v in each experiment", one, cam)
	}
}
