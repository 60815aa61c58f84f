package trainer

import (
	"fmt"
	"slices"
	"testing"

	"github.com/camproxy/camproxy/replay"
)

func TestSampleAirlineMixedFirst(t *testing.T) {
	b := airlineBuffer(t)
	mixed := mixedTasks(b)
	if len(mixed) != 26 {
		t.Fatalf("the buffer has %d tasks with mixed outcomes, want 26 (shared/data/README.md)", len(mixed))
	}
	p := Sample(b.Tasks(), SampleOptions{})
	if p.Tasks != 50 || p.Eligible != 50 || p.Mixed != 26 || len(p.Jobs) != 50 {
		t.Fatalf("plan: %d tasks, %d eligible, %d mixed, %d jobs", p.Tasks, p.Eligible, p.Mixed, len(p.Jobs))
	}
	covered := map[string]bool{}
	for i, j := range p.Jobs[:26] {
		if !mixed[j.TaskID] || !j.Mixed {
			t.Fatalf("job %d is task %s, which is not mixed: the 26 mixed tasks must come first", i, j.TaskID)
		}
		covered[j.TaskID] = true
		if subsetScore(j.Runs, []int{0, 1, 2}) != 2 {
			t.Errorf("job %d (%s): rewards %v: the subset of a mixed task should mix outcomes", i, j.TaskID, j.Rewards())
		}
		if len(j.Runs) != 3 {
			t.Errorf("job %d has %d runs, want 3", i, len(j.Runs))
		}
	}
	if len(covered) != 26 {
		t.Fatalf("the first 26 jobs cover %d mixed tasks", len(covered))
	}
	for _, j := range p.Jobs[26:] {
		if mixed[j.TaskID] {
			t.Fatalf("mixed task %s again after the first 26 jobs", j.TaskID)
		}
	}

	// Four subsets of three out of four runs: every subset, each once; the mixed tasks'
	// first subsets still come first.
	p4 := Sample(b.Tasks(), SampleOptions{Subsets: 4, SubsetSize: 3, Seed: 7})
	if len(p4.Jobs) != 200 {
		t.Fatalf("%d jobs with 4 subsets, want 200", len(p4.Jobs))
	}
	first := map[string]bool{}
	for _, j := range p4.Jobs[:26] {
		first[j.TaskID] = true
	}
	if len(first) != 26 {
		t.Fatalf("with 4 subsets the first 26 jobs cover %d tasks, want the 26 mixed ones", len(first))
	}
	keys := map[string]bool{}
	perTask := map[string]int{}
	for _, j := range p4.Jobs {
		if keys[j.Key] {
			t.Fatalf("subset drawn twice: %s %v", j.TaskID, j.Episodes())
		}
		keys[j.Key] = true
		perTask[j.TaskID]++
	}
	for id, n := range perTask {
		if n != 4 {
			t.Fatalf("task %s has %d subsets, want 4", id, n)
		}
	}
}

func TestSampleDeterministic(t *testing.T) {
	b := airlineBuffer(t)
	keys := func(seed int64) []string {
		var k []string
		for _, j := range Sample(b.Tasks(), SampleOptions{Subsets: 2, Seed: seed}).Jobs {
			k = append(k, j.Key)
		}
		return k
	}
	a, again, other := keys(1), keys(1), keys(2)
	if !slices.Equal(a, again) {
		t.Fatal("the same seed drew other subsets")
	}
	if slices.Equal(a, other) {
		t.Fatal("another seed drew the very same subsets of every task")
	}
}

// syntheticTask builds a task of runs with these rewards (1 = success).
func syntheticTask(id string, rewards ...float64) *replay.Task {
	t := &replay.Task{ID: id, Text: "do " + id}
	for i, r := range rewards {
		r := r
		t.Episodes = append(t.Episodes, &replay.Episode{ID: fmt.Sprintf("%s-%02d", id, i), TaskID: id, Task: t.Text, Reward: &r})
	}
	return t
}

func TestSampleSynthetic(t *testing.T) {
	// 10 runs, 2 of them successes: 5 distinct subsets that all mix outcomes, spread
	// over the runs.
	task := syntheticTask("t", 1, 0, 0, 0, 0, 0, 0, 0, 0, 1)
	p := Sample([]*replay.Task{task}, SampleOptions{Subsets: 5, SubsetSize: 3, Seed: 3})
	if len(p.Jobs) != 5 {
		t.Fatalf("%d jobs", len(p.Jobs))
	}
	seen := map[string]bool{}
	used := map[string]int{}
	for _, j := range p.Jobs {
		if seen[j.Key] {
			t.Fatalf("subset twice: %v", j.Episodes())
		}
		seen[j.Key] = true
		ok, fail := false, false
		for _, ep := range j.Runs {
			used[ep.ID]++
			if *ep.Reward == 1 {
				ok = true
			} else {
				fail = true
			}
		}
		if !ok || !fail {
			t.Fatalf("subset %v does not mix outcomes", j.Rewards())
		}
	}
	if len(used) < 9 {
		t.Errorf("5 subsets of 3 use only %d of the 10 runs: %v", len(used), used)
	}

	// Too many subsets to list (C(40,10)): drawn, still distinct and mixed, and the
	// same for the same seed.
	big := syntheticTask("big", append(make([]float64, 39), 1)...)
	draw := func() []string {
		var k []string
		for _, j := range Sample([]*replay.Task{big}, SampleOptions{Subsets: 20, SubsetSize: 10, Seed: 9}).Jobs {
			if subsetScore(j.Runs, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) != 2 {
				t.Fatalf("drawn subset %v does not hold the one success", j.Rewards())
			}
			k = append(k, j.Key)
		}
		return k
	}
	k1, k2 := draw(), draw()
	if len(k1) != 20 || !slices.Equal(k1, k2) {
		t.Fatalf("drawn subsets: %d, deterministic %v", len(k1), slices.Equal(k1, k2))
	}
	if len(uniq(k1)) != 20 {
		t.Fatal("drawn subsets repeat")
	}

	// Fewer runs than the subset size: one subset of them all. One rewarded run is
	// too few; runs without a reward do not count; a task without text is left out.
	two := syntheticTask("two", 0, 1)
	one := syntheticTask("one", 1)
	one.Episodes = append(one.Episodes, &replay.Episode{ID: "one-x", TaskID: "one"})
	mute := syntheticTask("mute", 0, 1)
	mute.Text = ""
	allOK := syntheticTask("allok", 1, 1, 1)
	p = Sample([]*replay.Task{allOK, mute, one, two}, SampleOptions{Subsets: 3})
	if p.TooFew != 1 || p.NoText != 1 || p.Eligible != 2 || p.Mixed != 1 {
		t.Fatalf("plan %+v", p)
	}
	if len(p.Jobs) != 2 || p.Jobs[0].TaskID != "two" || len(p.Jobs[0].Runs) != 2 || p.Jobs[1].TaskID != "allok" {
		t.Fatalf("jobs %v", jobIDs(p.Jobs))
	}
	if p = Sample([]*replay.Task{allOK, two}, SampleOptions{MixedOnly: true}); len(p.Jobs) != 1 || p.Uniform != 1 {
		t.Fatalf("mixed only: %v, %d uniform", jobIDs(p.Jobs), p.Uniform)
	}
	if p = Sample([]*replay.Task{two}, SampleOptions{MinRuns: 3}); len(p.Jobs) != 0 || p.TooFew != 1 {
		t.Fatalf("min runs 3: %v", jobIDs(p.Jobs))
	}
}

func uniq(s []string) map[string]bool {
	m := map[string]bool{}
	for _, v := range s {
		m[v] = true
	}
	return m
}

func jobIDs(jobs []*Job) []string {
	var s []string
	for _, j := range jobs {
		s = append(s, fmt.Sprintf("%s%v", j.TaskID, j.Episodes()))
	}
	return s
}

func TestJobKeyIgnoresOrder(t *testing.T) {
	if JobKey("t", []string{"b", "a"}) != JobKey("t", []string{"a", "b"}) || JobKey("t", []string{"a"}) == JobKey("u", []string{"a"}) {
		t.Fatal("job key")
	}
}

func TestCompareNatural(t *testing.T) {
	names := []string{"run_10.md", "run_2.md", "run_1.md", "task.md", "run_9.md"}
	slices.SortFunc(names, compareNatural)
	if fmt.Sprint(names) != "[run_1.md run_2.md run_9.md run_10.md task.md]" {
		t.Fatal(names)
	}
}
