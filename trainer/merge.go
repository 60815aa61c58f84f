package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// veRL saves GRPO's actor as sharded FSDP state (model_world_size_W_rank_R.pt, one
// per GPU) with its Hugging Face config and tokenizer in actor/huggingface, under
// trainer.default_local_dir/global_step_N (verl/trainer/ppo/ray_trainer.py,
// _save_checkpoint, 0.6.1 and 0.7.0 alike). vLLM cannot load that: veRL's model
// merger writes a Hugging Face model from it first (verl/model_merger,
// `python -m verl.model_merger merge --backend fsdp --local_dir … --target_dir …`,
// the same CLI in 0.6.1 and 0.7.0; older releases had scripts/model_merger.py).

// Checkpoint is one saved step of a veRL run.
type Checkpoint struct {
	Root  string // trainer.default_local_dir
	Step  int
	Actor string // Root/global_step_N/actor
}

var stepDir = regexp.MustCompile(`^global_step_([0-9]+)$`)

// checkpointRoot is where a GRPO directory's run saves: the default_local_dir
// grpo.sh passes, else the directory itself when it holds global_step_N.
func checkpointRoot(dir string) (string, error) {
	if steps, _ := savedSteps(dir); len(steps) > 0 {
		return dir, nil
	}
	v, ok, err := scriptArg(filepath.Join(dir, "grpo.sh"), "trainer.default_local_dir=")
	if err != nil {
		return "", fmt.Errorf("%s holds neither global_step_N directories nor the grpo.sh of camproxy train grpo", dir)
	}
	if ok {
		if !filepath.IsAbs(v) {
			v = filepath.Join(dir, v)
		}
		return v, nil
	}
	// grpo.sh of an older camproxy: veRL's default, relative to grpo.sh's directory.
	return filepath.Join(dir, "checkpoints"), nil
}

func savedSteps(root string) ([]int, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var steps []int
	for _, e := range ents {
		if m := stepDir.FindStringSubmatch(e.Name()); m != nil && e.IsDir() {
			n, _ := strconv.Atoi(m[1])
			steps = append(steps, n)
		}
	}
	slices.Sort(steps)
	return steps, nil
}

// FindCheckpoint finds the actor of step (0 = the latest saved) under dir: the
// --out of camproxy train grpo, or veRL's checkpoint directory itself. The latest
// is what latest_checkpointed_iteration.txt names, which veRL writes once a step
// is saved whole, else the highest step.
func FindCheckpoint(dir string, step int) (Checkpoint, error) {
	root, err := checkpointRoot(dir)
	if err != nil {
		return Checkpoint{}, err
	}
	steps, err := savedSteps(root)
	if errors.Is(err, os.ErrNotExist) || err == nil && len(steps) == 0 {
		return Checkpoint{}, fmt.Errorf("no checkpoint in %s: has GRPO saved a step (trainer.save_freq)?", root)
	}
	if err != nil {
		return Checkpoint{}, err
	}
	if step == 0 {
		step = steps[len(steps)-1]
		if b, err := os.ReadFile(filepath.Join(root, "latest_checkpointed_iteration.txt")); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && slices.Contains(steps, n) {
				step = n
			}
		}
	} else if !slices.Contains(steps, step) {
		return Checkpoint{}, fmt.Errorf("no global_step_%d in %s (saved: %s)", step, root, joinInts(steps))
	}
	c := Checkpoint{Root: root, Step: step, Actor: filepath.Join(root, fmt.Sprintf("global_step_%d", step), "actor")}
	return c, CheckActor(c.Actor)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// CheckActor checks what the FSDP merger reads (fsdp_model_merger.py): the world
// size in fsdp_config.json, every rank's shard, and huggingface/config.json.
func CheckActor(actor string) error {
	b, err := os.ReadFile(filepath.Join(actor, "fsdp_config.json"))
	if err != nil {
		return fmt.Errorf("%s is not an FSDP actor checkpoint: %w", actor, err)
	}
	var cfg struct {
		WorldSize int `json:"world_size"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil || cfg.WorldSize < 1 {
		return fmt.Errorf("%s/fsdp_config.json: no world_size (%v)", actor, err)
	}
	var missing []string
	for r := range cfg.WorldSize {
		name := fmt.Sprintf("model_world_size_%d_rank_%d.pt", cfg.WorldSize, r)
		if _, err := os.Stat(filepath.Join(actor, name)); err != nil {
			missing = append(missing, name)
		}
	}
	if _, err := os.Stat(filepath.Join(actor, "huggingface", "config.json")); err != nil {
		missing = append(missing, "huggingface/config.json")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s is incomplete (a step still being saved?): missing %s", actor, strings.Join(missing, ", "))
	}
	return nil
}

// MergeCommand is veRL's model merger writing actor as a Hugging Face model in out.
func MergeCommand(python, actor, out string) []string {
	return []string{python, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", actor, "--target_dir", out}
}

// TrainedFile, in a merged model's directory, says where it came from and the
// chat template arguments it was trained with: serve-config reads it.
const TrainedFile = "camproxy-train.json"

// Trained is TrainedFile's content.
type Trained struct {
	Stage        string             `json:"stage"` // grpo
	From         string             `json:"from"`  // the checkpoint's actor directory
	Step         int                `json:"step"`
	ChatTemplate ChatTemplateKwargs `json:"chat_template_kwargs,omitempty"`
}

// WriteTrained records a merged model's origin next to its weights.
func WriteTrained(dir string, t Trained) error {
	b, err := marshalJSON(t)
	if err != nil {
		return err
	}
	return writeFile(dir, TrainedFile, b, 0o644)
}

// Merge is how a GRPO checkpoint becomes a Hugging Face model vLLM can serve: the
// step to merge, the merger's command line, and the chat template arguments the
// run trained with (written beside the model by Finish, for serve-config).
type Merge struct {
	Checkpoint
	Out          string   // the model directory, absolute
	Command      []string // veRL's model merger (MergeCommand), run in Out's parent
	ChatTemplate ChatTemplateKwargs
	TemplateFrom string // the grpo.sh ChatTemplate was read from
}

// PlanMerge plans the merge of step (0 = the latest saved) of the GRPO run in from
// (the --out of camproxy train grpo, or veRL's checkpoint directory) into out, with
// python's veRL.
func PlanMerge(from string, step int, out, python string) (*Merge, error) {
	ckpt, err := FindCheckpoint(from, step)
	if err != nil {
		return nil, err
	}
	kw, src, err := grpoTemplateFor(from, ckpt.Root)
	if err != nil {
		return nil, err
	}
	if out, err = filepath.Abs(out); err != nil {
		return nil, err
	}
	return &Merge{Checkpoint: ckpt, Out: out, Command: MergeCommand(python, ckpt.Actor, out), ChatTemplate: kw, TemplateFrom: src}, nil
}

// Finish checks that the merger wrote a model and records its origin next to it
// (TrainedFile).
func (m *Merge) Finish() error {
	if _, err := os.Stat(filepath.Join(m.Out, "config.json")); err != nil {
		return fmt.Errorf("the model merger wrote no %s: %w", filepath.Join(m.Out, "config.json"), err)
	}
	return WriteTrained(m.Out, Trained{Stage: "grpo", From: m.Actor, Step: m.Step, ChatTemplate: m.ChatTemplate})
}

// grpoTemplateFor reads the chat template arguments of the GRPO run: from the
// grpo.sh of from, or of a directory above the checkpoints (root).
func grpoTemplateFor(from, root string) (ChatTemplateKwargs, string, error) {
	for _, dir := range []string{from, root, filepath.Dir(root), filepath.Dir(filepath.Dir(root)), filepath.Dir(filepath.Dir(filepath.Dir(root)))} {
		p := filepath.Join(dir, "grpo.sh")
		if _, err := os.Stat(p); err != nil {
			continue
		}
		kw, err := GRPOTemplate(dir)
		return kw, p, err
	}
	return nil, "", fmt.Errorf("no grpo.sh of camproxy train grpo above %s: cannot tell the chat template arguments the model was trained with", root)
}
