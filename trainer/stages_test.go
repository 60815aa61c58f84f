package trainer

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/replay"
)

// fixedPrompt is a Prompter with a system prompt and a template, as augment.CAM.
type fixedPrompt struct{ system string }

func (p fixedPrompt) Prompt(task string) (string, string) {
	return p.system, "Task:\n" + task + "\nGuidance?"
}

func TestSplitByTask(t *testing.T) {
	ids := make([]string, 50)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%02d", i)
	}
	for _, c := range []struct {
		ids  []string
		frac float64
		want int
	}{
		{ids, 0.2, 10}, {ids, 0, 0}, {ids, 0.999, 49}, {ids[:3], 0.1, 1}, {ids[:1], 0.5, 0}, {ids[:2], 0.5, 1},
		{append(append([]string{}, ids[:5]...), ids[:5]...), 0.4, 2}, // duplicates count once
	} {
		val := SplitByTask(c.ids, c.frac, 7)
		if len(val) != c.want {
			t.Errorf("%d ids, frac %g: %d validation tasks, want %d", len(c.ids), c.frac, len(val), c.want)
		}
	}
	a, b := SplitByTask(ids, 0.2, 1), SplitByTask(ids, 0.2, 1)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two splits")
	}
	// Order of the input does not change the split: SFT (records) and GRPO (tasks) agree.
	rev := make([]string, len(ids))
	for i, id := range ids {
		rev[len(ids)-1-i] = id
	}
	if !reflect.DeepEqual(a, SplitByTask(rev, 0.2, 1)) {
		t.Fatal("the split depends on the order of the ids")
	}
	if reflect.DeepEqual(a, SplitByTask(ids, 0.2, 2)) {
		t.Fatal("seeds 1 and 2 gave the same split")
	}
}

func TestYAMLFloat(t *testing.T) {
	for in, want := range map[float64]string{1e-5: "1.0e-05", 5: "5.0", 0.05: "0.05", 1.5e-7: "1.5e-07", 2e+20: "2.0e+20"} {
		if got := yamlFloat(in); got != want {
			t.Errorf("yamlFloat(%g) = %s, want %s", in, got, want)
		}
	}
}

func sftExamples() []Example {
	var exs []Example
	for i := range 20 {
		for j := range 1 + i%3 { // tasks with 1 to 3 guidance texts
			exs = append(exs, Example{TaskID: fmt.Sprintf("task-%d", i), Task: fmt.Sprintf("Book flight %d <for> \"Ann\" & co", i),
				Guidance: fmt.Sprintf("- check the fare of flight %d (variant %d)", i, j)})
		}
	}
	return exs
}

func TestWriteSFTFollowsLlamaFactory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sft")
	exs := sftExamples()
	r := DefaultSFTRecipe()
	w, err := WriteSFT(exs, LFOptions{Out: dir, Prompter: fixedPrompt{"You write guidance."}, Val: 0.2, Seed: 3, Recipe: r})
	if err != nil {
		t.Fatal(err)
	}
	if w.TrainTasks != 16 || w.ValTasks != 4 || w.Train+w.Val != len(exs) {
		t.Fatalf("split: %+v", w)
	}
	cfg, err := testkit.CheckLlamaFactory(dir, "sft.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"model_name_or_path": "Qwen/Qwen3-32B", "stage": "sft", "finetuning_type": "full", "bf16": true,
		"num_train_epochs": 5.0, "warmup_ratio": 0.05, "template": "qwen3", "learning_rate": 1e-5,
		"output_dir": filepath.Join(dir, "saves", "cam-sft")} {
		if cfg.Raw[k] != want {
			t.Errorf("sft.yaml %s = %v (%T), want %v", k, cfg.Raw[k], cfg.Raw[k], want)
		}
	}
	if cfg.DeepSpeedStage != 3 {
		t.Errorf("DeepSpeed stage %d, want ZeRO-3", cfg.DeepSpeedStage)
	}
	// Every example is a record with the CAM's prompt, the task text unescaped, on one side only.
	side := map[string]string{}
	n := 0
	for _, sets := range [][]testkit.LFDataset{cfg.Train, cfg.Eval} {
		for _, s := range sets {
			for _, rec := range s.Records {
				n++
				if rec.System != "You write guidance." || !strings.HasPrefix(rec.Prompt, "Task:\nBook flight ") || !strings.Contains(rec.Prompt, `<for> "Ann" & co`) {
					t.Fatalf("record %+v", rec)
				}
				if prev, ok := side[rec.Prompt]; ok && prev != s.Name {
					t.Fatalf("task %q in both %s and %s", rec.Prompt, prev, s.Name)
				}
				side[rec.Prompt] = s.Name
			}
		}
	}
	if n != len(exs) {
		t.Fatalf("%d records, want %d", n, len(exs))
	}
	// The Job strict-decodes, carries run.sh's files and asks for the GPUs (kube_test.go).
	if c := checkJob(t, dir, "run.sh").job.Spec.Template.Spec.Containers[0]; c.Resources.Limits.Name("nvidia.com/gpu", "").Value() != 8 {
		t.Fatalf("job: %+v", c)
	}
	if st, err := os.Stat(filepath.Join(dir, "run.sh")); err != nil || st.Mode()&0o100 == 0 {
		t.Fatalf("run.sh not executable: %v", err)
	}
	// No system prompt: no system column.
	dir2 := t.TempDir()
	if _, err := WriteSFT(exs, LFOptions{Out: dir2, Prompter: fixedPrompt{}, Val: 0, Recipe: r}); err != nil {
		t.Fatal(err)
	}
	cfg, err = testkit.CheckLlamaFactory(dir2, "sft.yaml")
	if err != nil || len(cfg.Eval) != 0 || cfg.Raw["eval_dataset"] != nil || cfg.Train[0].Records[0].System != "" {
		t.Fatalf("--val 0 without a system prompt: %v %+v", err, cfg)
	}
	if data, _ := os.ReadFile(filepath.Join(dir2, "data", "dataset_info.json")); strings.Contains(string(data), "system") {
		t.Fatalf("dataset_info maps a system column the records lack: %s", data)
	}
}

func TestLlamaFactoryCheckCatches(t *testing.T) {
	// The validator must fail on what LLaMA-Factory would reject.
	for name, edit := range map[string]func(dir string){
		"float as string": func(dir string) { replaceIn(t, dir, "sft.yaml", "learning_rate: 1.0e-05", "learning_rate: 1e-05") },
		"unknown dataset": func(dir string) {
			replaceIn(t, dir, "sft.yaml", "dataset: \"camproxy_sft_train\"", "dataset: \"nope\"")
		},
		"column missing": func(dir string) { replaceIn(t, dir, "data/camproxy_sft_train.json", `"output":`, `"outptu":`) },
		"bad column key": func(dir string) { replaceIn(t, dir, "data/dataset_info.json", `"response":`, `"answer":`) },
	} {
		dir := t.TempDir()
		if _, err := WriteSFT(sftExamples(), LFOptions{Out: dir, Prompter: fixedPrompt{"s"}, Val: 0.2, Recipe: DefaultSFTRecipe()}); err != nil {
			t.Fatal(err)
		}
		edit(dir)
		if _, err := testkit.CheckLlamaFactory(dir, "sft.yaml"); err == nil {
			t.Errorf("%s: the check passed", name)
		}
	}
}

func replaceIn(t *testing.T, dir, name, old, new string) {
	t.Helper()
	p := filepath.Join(dir, name)
	b, err := os.ReadFile(p)
	if err != nil || !strings.Contains(string(b), old) {
		t.Fatalf("%s lacks %q (%v)", name, old, err)
	}
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(b), old, new)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func run(id, task, arm, ctx string, reward *float64) *replay.Episode {
	return &replay.Episode{ID: id, TaskID: task, Task: "text of " + task, Arm: arm, Context: ctx, ContextSource: arm, Reward: reward}
}

func f(v float64) *float64 { return &v }

// TestPairsExact: the pairs of a buffer with known contexts and rewards.
func TestPairsExact(t *testing.T) {
	tasks := []*replay.Task{
		{ID: "a", Text: "text of a", Episodes: []*replay.Episode{
			run("a1", "a", "cam", "ctx A good", f(1)),
			run("a2", "a", "cam", " ctx A good\n", f(0)), // same context once trimmed: mean 0.5
			run("a3", "a", "rag", "ctx A bad", f(0)),
			run("a4", "a", "baseline", "", f(1)), // no context: left out
			run("a5", "a", "cam", "ctx A mid", f(0.25)),
			run("a6", "a", "cam", "ctx A unrewarded", nil),
		}},
		{ID: "b", Text: "text of b", Episodes: []*replay.Episode{ // all equal: no pair
			run("b1", "b", "cam", "ctx B1", f(1)), run("b2", "b", "rag", "ctx B2", f(1)),
		}},
		{ID: "c", Text: "text of c", Episodes: []*replay.Episode{ // one context: no pair
			run("c1", "c", "cam", "ctx C", f(1)), run("c2", "c", "cam", "ctx C", f(0)),
		}},
	}
	pairs, st := Pairs(tasks, PairOptions{})
	type pr struct {
		chosen, rejected string
		cr, rr           float64
	}
	var got []pr
	for _, p := range pairs {
		got = append(got, pr{p.Chosen, p.Rejected, p.ChosenReward, p.RejectedReward})
	}
	want := []pr{
		{"ctx A good", "ctx A bad", 0.5, 0},    // margin 0.5
		{"ctx A good", "ctx A mid", 0.5, 0.25}, // 0.25: ties ordered by chosen text
		{"ctx A mid", "ctx A bad", 0.25, 0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("pairs:\n got %v\nwant %v", got, want)
	}
	if !reflect.DeepEqual(pairs[0].ChosenEpisodes, []string{"a1", "a2"}) || pairs[0].Task != "text of a" {
		t.Fatalf("provenance: %+v", pairs[0])
	}
	if st.Tasks != 3 || st.TasksWithPairs != 1 || st.NoContext != 1 || st.Unrewarded != 1 || st.Ties != 1 || st.Contexts != 6 {
		t.Fatalf("stats %+v", st)
	}
	// Options: a margin, a cap, the baseline as rejected, a minimum of runs.
	if p, _ := Pairs(tasks, PairOptions{MinMargin: 0.3}); len(p) != 1 || p[0].Rejected != "ctx A bad" {
		t.Fatalf("--min-margin 0.3: %+v", p)
	}
	if p, st := Pairs(tasks, PairOptions{MaxPerTask: 2}); len(p) != 2 || st.Capped != 1 || p[1].Rejected != "ctx A mid" {
		t.Fatalf("--max-pairs-per-task 2: %+v %+v", p, st)
	}
	p, _ := Pairs(tasks, PairOptions{IncludeNone: true})
	n := 0
	for _, x := range p {
		if x.Rejected == "" {
			t.Fatalf("the baseline (reward 1) beats every context; it can never be rejected here: %+v", x)
		}
		if x.Chosen == "" {
			t.Fatalf("an empty context was chosen: %+v", x)
		}
		n++
	}
	if n != 3 {
		t.Fatalf("--include-baseline: %d pairs", n)
	}
	if p, _ := Pairs(tasks, PairOptions{MinRuns: 2}); len(p) != 0 {
		t.Fatalf("--min-runs 2: only one context of a has two runs: %+v", p)
	}
}

func TestWriteDPO(t *testing.T) {
	var pairs []Pair
	for i := range 10 {
		pairs = append(pairs, Pair{TaskID: fmt.Sprint("t", i), Task: fmt.Sprint("task ", i), Chosen: "good", Rejected: "bad"},
			Pair{TaskID: fmt.Sprint("t", i), Task: fmt.Sprint("task ", i), Chosen: "good", Rejected: "worse"})
	}
	dir := t.TempDir()
	r := DefaultDPORecipe()
	r.Model = checkpointDir(t)
	w, err := WriteDPO(pairs, LFOptions{Out: dir, Prompter: fixedPrompt{"sys"}, Val: 0.2, Recipe: r})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := testkit.CheckLlamaFactory(dir, "dpo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Raw["model_name_or_path"] != r.Model || cfg.Raw["stage"] != "dpo" || cfg.Raw["pref_beta"] != 0.1 || cfg.Raw["pref_loss"] != "sigmoid" || !cfg.Train[0].Ranking {
		t.Fatalf("dpo.yaml: %+v", cfg.Raw)
	}
	if w.Train != 16 || w.Val != 4 || w.ValTasks != 2 || len(cfg.Eval[0].Records) != 4 {
		t.Fatalf("split: %+v", w)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "pairs.jsonl")); strings.Count(string(b), "\n") != 20 {
		t.Fatalf("pairs.jsonl: %s", b)
	}
}

// TestTaskExamples: GRPO's tasks from a buffer are those with an id and a text.
func TestTaskExamples(t *testing.T) {
	got := TaskExamples([]*replay.Task{{ID: "t1", Text: "Rebook."}, {ID: "", Text: "no id"}, {ID: "t2", Text: " \n"}, {ID: "t3", Text: "Refund."}})
	want := []Example{{TaskID: "t1", Task: "Rebook."}, {TaskID: "t3", Task: "Refund."}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("TaskExamples = %+v, want %+v", got, want)
	}
}
