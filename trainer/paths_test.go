package trainer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// checkpointDir is a Hugging Face checkpoint directory: a config.json in it.
func checkpointDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "saves", "cam-sft")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"qwen3"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestResolveModel(t *testing.T) {
	ckpt := checkpointDir(t)
	adapter := t.TempDir()
	os.WriteFile(filepath.Join(adapter, "adapter_config.json"), []byte("{}"), 0o644)
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	t.Chdir(filepath.Dir(filepath.Dir(ckpt)))
	for _, c := range []struct{ in, want, err string }{
		{"hub:Qwen/Qwen3-32B", "Qwen/Qwen3-32B", ""},
		{"saves/cam-sft", ckpt, ""}, // relative to the working directory, written absolute
		{ckpt, ckpt, ""},
		{"Qwen/Qwen3-32B", "", "no such directory (a Hugging Face id is written hub:Qwen/Qwen3-32B)"},
		{"hub:Qwen3", "", "a hub id is ORG/NAME"},
		{"hub:a/b/c", "", "a hub id is ORG/NAME"},
		{"", "", "empty"},
		{adapter, "", "holds a LoRA adapter"},
		{filepath.Dir(ckpt), "", "has no config.json"},
		{file, "", "not a directory"},
	} {
		got, err := ResolveModel(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: %q %v, want %q", c.in, got, err, c.want)
		}
	}
}

func grpoTasks(n int) []Example {
	var exs []Example
	for i := range n {
		exs = append(exs, Example{TaskID: fmt.Sprintf("t%02d", i), Task: fmt.Sprintf("task %d", i)})
	}
	return exs
}

// TestWriteGRPOPaths: grpo.sh changes into its directory and Ray runs in a copy of
// it, so the model, data, reward and checkpoint paths are absolute whatever the
// working directory was, and a model that is not there is refused.
func TestWriteGRPOPaths(t *testing.T) {
	ckpt := checkpointDir(t)
	base := t.TempDir()
	t.Chdir(base)
	o := DefaultGRPOOptions()
	o.Out, o.Prompter, o.Model = "grpo", fixedPrompt{"sys"}, ckpt
	if _, err := WriteGRPO(grpoTasks(10), o); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(base, "grpo")
	script, _ := os.ReadFile(filepath.Join(out, "grpo.sh"))
	for _, frag := range []string{
		"actor_rollout_ref.model.path=" + ckpt,
		"GRPO_DIR=${CAMPROXY_GRPO_DIR:-" + out + "}",
		`data.train_files="$GRPO_DIR/train.parquet"`,
		`custom_reward_function.path="$GRPO_DIR/reward.py"`,
		"trainer.default_local_dir=" + filepath.Join(out, "checkpoints", "camproxy", "cam-grpo"),
	} {
		if !strings.Contains(string(script), frag) {
			t.Errorf("grpo.sh lacks %s", frag)
		}
	}
	ray, _ := os.ReadFile(filepath.Join(out, "grpo-ray.sh"))
	if !strings.Contains(string(ray), `\"CAMPROXY_GRPO_DIR\": \".\"`) || !strings.Contains(string(ray), "-- bash grpo.sh") {
		t.Errorf("grpo-ray.sh:\n%s", ray)
	}
	// The README's relative model, as given on the command line.
	o.Model, o.CheckpointDir = "sft/saves/cam-sft", "/shared/ckpt"
	_, err := WriteGRPO(grpoTasks(10), o)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(base, "sft", "saves", "cam-sft")+": no such directory") {
		t.Fatalf("a missing model: %v", err)
	}
	o.Model = "hub:Qwen/Qwen3-8B"
	if _, err := WriteGRPO(grpoTasks(10), o); err != nil {
		t.Fatal(err)
	}
	script, _ = os.ReadFile(filepath.Join(out, "grpo.sh"))
	if !strings.Contains(string(script), "actor_rollout_ref.model.path=Qwen/Qwen3-8B ") || !strings.Contains(string(script), "trainer.default_local_dir=/shared/ckpt ") {
		t.Errorf("hub model, checkpoint dir:\n%s", script)
	}
}

// TestWriteLlamaFactoryPaths: DPO's default model is the checkpoint train sft
// --out sft writes, found from the same working directory.
func TestWriteLlamaFactoryPaths(t *testing.T) {
	base := t.TempDir()
	t.Chdir(base)
	sft, err := WriteSFT(sftExamples(), LFOptions{Out: "sft", Prompter: fixedPrompt{"s"}, Recipe: DefaultSFTRecipe()})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := os.ReadFile(filepath.Join(sft.Dir, "sft.yaml"))
	saved := filepath.Join(base, "sft", "saves", "cam-sft")
	if !strings.Contains(string(cfg), `output_dir: "`+saved+`"`) || !strings.Contains(string(cfg), `model_name_or_path: "Qwen/Qwen3-32B"`) {
		t.Fatalf("sft.yaml:\n%s", cfg)
	}
	pairs := []Pair{{TaskID: "a", Task: "a", Chosen: "x", Rejected: "y"}}
	_, err = WriteDPO(pairs, LFOptions{Out: "dpo", Prompter: fixedPrompt{"s"}, Recipe: DefaultDPORecipe()})
	if err == nil || !strings.Contains(err.Error(), saved+": no such directory") {
		t.Fatalf("before SFT trained: %v", err)
	}
	os.MkdirAll(saved, 0o755) // what LLaMA-Factory leaves there
	os.WriteFile(filepath.Join(saved, "config.json"), []byte("{}"), 0o644)
	if _, err := WriteDPO(pairs, LFOptions{Out: "dpo", Prompter: fixedPrompt{"s"}, Recipe: DefaultDPORecipe()}); err != nil {
		t.Fatal(err)
	}
	cfg, _ = os.ReadFile(filepath.Join(base, "dpo", "dpo.yaml"))
	if !strings.Contains(string(cfg), `model_name_or_path: "`+saved+`"`) || !strings.Contains(string(cfg), `output_dir: "`+filepath.Join(base, "dpo", "saves", "cam-dpo")+`"`) {
		t.Fatalf("dpo.yaml:\n%s", cfg)
	}
}

func TestBatchSizeDividesTrain(t *testing.T) {
	for _, c := range []struct{ train, want int }{{40, 20}, {64, 32}, {50, 25}, {10, 10}, {37, 32}, {20, 20}, {33, 32}, {96, 32}, {48, 24}} {
		if got := batchSize(c.train); got != c.want {
			t.Errorf("batchSize(%d) = %d, want %d", c.train, got, c.want)
		}
	}
	// 50 tasks, --val 0.2: 40 to train on. The default drops none; a batch of 32 is warned about.
	o := DefaultGRPOOptions()
	o.Out, o.Prompter, o.Model, o.Val = t.TempDir(), fixedPrompt{""}, "hub:Qwen/Qwen3-8B", 0.2
	w, err := WriteGRPO(grpoTasks(50), o)
	if err != nil {
		t.Fatal(err)
	}
	script, _ := os.ReadFile(filepath.Join(o.Out, "grpo.sh"))
	if w.TrainTasks != 40 || w.BatchSize != 20 || len(drops(w.Warnings)) != 0 || !strings.Contains(string(script), "data.train_batch_size=20 ") {
		t.Fatalf("default batch: %+v", w)
	}
	o.BatchSize = 32
	w, err = WriteGRPO(grpoTasks(50), o)
	if err != nil {
		t.Fatal(err)
	}
	if d := drops(w.Warnings); len(d) != 1 || !strings.Contains(d[0], "40 training tasks in batches of 32: veRL drops the last 8 every epoch (1 steps an epoch)") {
		t.Fatalf("warnings: %q", w.Warnings)
	}
}

// TestVerlRewardMode: the Go choice (camproxy train grpo --launch local) and
// grpo.sh's agree on every version shape.
func TestVerlRewardMode(t *testing.T) {
	for v, want := range map[string]string{"0.6.1": "batch", "0.5.0": "batch", "0.7.0": "loop", "0.7.0.dev": "loop", "0.7.1rc2": "loop",
		"0.10.0": "loop", "1.0.0": "loop", "0.6.2.dev0": "batch", "0.7": "loop", "garbage": "", "": "", "x.7.0": ""} {
		got, err := VerlRewardMode(v)
		if (err != nil) != (want == "") || got != want {
			t.Errorf("VerlRewardMode(%q) = %q, %v; want %q", v, got, err, want)
		}
		out, err := exec.Command("bash", "-c", verlModeFunc+`verl_reward_mode "$1"`, "bash", v).Output()
		if bash := strings.TrimSpace(string(out)); bash != want || (err != nil) != (want == "") {
			t.Errorf("grpo.sh's verl_reward_mode %q = %q, %v; want %q", v, bash, err, want)
		}
	}
}

func drops(warnings []string) []string {
	var d []string
	for _, w := range warnings {
		if strings.Contains(w, "veRL drops") {
			d = append(d, w)
		}
	}
	return d
}
