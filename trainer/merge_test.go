package trainer

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// saveStep writes global_step_N/actor as veRL's FSDP checkpoint manager does.
func saveStep(t *testing.T, root string, step, world int, skip string) {
	t.Helper()
	actor := filepath.Join(root, fmt.Sprintf("global_step_%d", step), "actor")
	files := map[string]string{"fsdp_config.json": fmt.Sprintf(`{"FSDP_version": 1, "world_size": %d}`, world), "huggingface/config.json": `{"model_type":"qwen3"}`}
	for r := range world {
		files[fmt.Sprintf("model_world_size_%d_rank_%d.pt", world, r)] = "shard"
	}
	for name, body := range files {
		if name == skip {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(actor, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(actor, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFindCheckpoint(t *testing.T) {
	grpo := t.TempDir()
	root := filepath.Join(t.TempDir(), "ckpt") // trainer.default_local_dir, elsewhere than --out
	script := "exec python3 -m verl.trainer.main_ppo \\\n  trainer.default_local_dir=" + root + " \\\n  trainer.save_freq=20 \\\n"
	if err := os.WriteFile(filepath.Join(grpo, "grpo.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := FindCheckpoint(grpo, 0); err == nil || !strings.Contains(err.Error(), "no checkpoint in "+root) {
		t.Fatalf("before any save: %v", err)
	}
	saveStep(t, root, 20, 4, "")
	saveStep(t, root, 40, 4, "")
	saveStep(t, root, 60, 4, "model_world_size_4_rank_3.pt") // being saved
	if err := os.WriteFile(filepath.Join(root, "latest_checkpointed_iteration.txt"), []byte("40"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		from string
		step int
		want int
		err  string
	}{
		{grpo, 0, 40, ""}, // latest_checkpointed_iteration.txt: 60 is not whole yet
		{root, 0, 40, ""}, // the checkpoint directory itself
		{grpo, 20, 20, ""},
		{grpo, 30, 0, "no global_step_30 in " + root + " (saved: 20, 40, 60)"},
		{grpo, 60, 0, "missing model_world_size_4_rank_3.pt"},
		{t.TempDir(), 0, 0, "neither global_step_N directories nor the grpo.sh"},
	} {
		got, err := FindCheckpoint(c.from, c.step)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s step %d: %v, want %q", c.from, c.step, err, c.err)
			}
			continue
		}
		want := Checkpoint{Root: root, Step: c.want, Actor: filepath.Join(root, fmt.Sprintf("global_step_%d", c.want), "actor")}
		if err != nil || got != want {
			t.Errorf("%s step %d: %+v %v, want %+v", c.from, c.step, got, err, want)
		}
	}
	// Without the tracker file, the highest step.
	os.Remove(filepath.Join(root, "latest_checkpointed_iteration.txt"))
	saveStep(t, root, 60, 4, "")
	if got, err := FindCheckpoint(grpo, 0); err != nil || got.Step != 60 {
		t.Fatalf("latest without the tracker: %+v %v", got, err)
	}
	if got := MergeCommand("python3", "/a/actor", "/m"); !reflect.DeepEqual(got, []string{"python3", "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", "/a/actor", "--target_dir", "/m"}) {
		t.Fatalf("merge command %q", got)
	}
}

// TestPlanMerge: the merge of a GRPO run's latest step, with the chat template its
// grpo.sh trained with (found above the checkpoints), run into an absolute out;
// Finish records it beside a written model, and refuses a model the merger did not
// write.
func TestPlanMerge(t *testing.T) {
	grpo := t.TempDir()
	root := filepath.Join(grpo, "checkpoints", "camproxy", "cam-grpo")
	script := "exec python3 -m verl.trainer.main_ppo \\\n  trainer.default_local_dir=" + root + " \\\n  'data.apply_chat_template_kwargs={enable_thinking:false}' \\\n"
	if err := os.WriteFile(filepath.Join(grpo, "grpo.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	saveStep(t, root, 2, 1, "")
	// From the checkpoint directory itself: grpo.sh is three directories up.
	m, err := PlanMerge(root, 0, "merged", "python3")
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	out := filepath.Join(wd, "merged")
	actor := filepath.Join(root, "global_step_2", "actor")
	if m.Step != 2 || m.Out != out || m.TemplateFrom != filepath.Join(grpo, "grpo.sh") || m.ChatTemplate["enable_thinking"] != false ||
		!reflect.DeepEqual(m.Command, MergeCommand("python3", actor, out)) {
		t.Fatalf("plan %+v", m)
	}
	m.Out = t.TempDir()
	if err := m.Finish(); err == nil || !strings.Contains(err.Error(), "the model merger wrote no "+filepath.Join(m.Out, "config.json")) {
		t.Fatalf("Finish without a model: %v", err)
	}
	if err := os.WriteFile(filepath.Join(m.Out, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.Finish(); err != nil {
		t.Fatal(err)
	}
	if kw, _, found, err := TrainedTemplate(m.Out); err != nil || !found || kw.String() != `{"enable_thinking":false}` {
		t.Fatalf("%s records %v %v %v", TrainedFile, kw, found, err)
	}

	bare := t.TempDir()
	saveStep(t, bare, 1, 1, "")
	if _, err := PlanMerge(bare, 0, "x", "python3"); err == nil || !strings.Contains(err.Error(), "no grpo.sh of camproxy train grpo above "+bare) {
		t.Fatalf("no grpo.sh: %v", err)
	}
}

func TestChatTemplateKwargsString(t *testing.T) {
	for _, c := range []struct {
		kw   ChatTemplateKwargs
		want string
	}{{nil, "none"}, {ChatTemplateKwargs{}, "none"}, {ChatTemplateKwargs{"enable_thinking": false, "a": "x"}, `{"a":"x","enable_thinking":false}`}} {
		if got := c.kw.String(); got != c.want {
			t.Errorf("%#v.String() = %q, want %q", c.kw, got, c.want)
		}
	}
}
