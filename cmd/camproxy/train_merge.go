package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/camproxy/camproxy/trainer"
)

// trainMerge turns a GRPO checkpoint (sharded FSDP state) into a Hugging Face
// model vLLM can serve, with veRL's model merger.
func trainMerge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var from, stepFlag, out, python string
	f := newFlagSet("train merge", stderr)
	f.StringVar(&from, "from", "", "the --out of camproxy train grpo, or veRL's checkpoint directory (required)")
	f.StringVar(&stepFlag, "step", "latest", "the global step to merge: N, or latest")
	f.StringVar(&out, "out", "", "directory the Hugging Face model is written to (required; must be empty or absent)")
	f.StringVar(&python, "python", "python3", "the Python with veRL installed")
	pos, err := parseInterleaved(f, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usagef("train merge: unexpected argument %q", pos[0])
	case from == "" || out == "":
		return usagef("train merge: --from GRPO_DIR and --out DIR are required")
	}
	step := 0
	if stepFlag != "latest" {
		if step, err = strconv.Atoi(stepFlag); err != nil || step < 1 {
			return usagef("train merge: --step %q: want a global step (1 or more) or latest", stepFlag)
		}
	}
	if ents, err := os.ReadDir(out); err == nil && len(ents) > 0 {
		return usagef("train merge: --out %s is not empty: give a new directory", out)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return usagef("train merge: --out %s: %v", out, err)
	}
	ckpt, err := trainer.FindCheckpoint(from, step)
	if err != nil {
		return fmt.Errorf("train merge: %w", err)
	}
	kw, tsrc, err := grpoTemplateFor(from, ckpt.Root)
	if err != nil {
		return fmt.Errorf("train merge: %w", err)
	}
	if out, err = filepath.Abs(out); err != nil {
		return err
	}
	argv := trainer.MergeCommand(python, ckpt.Actor, out)
	if _, err := exec.LookPath(python); err != nil {
		return fmt.Errorf("train merge: %s is not installed here; run `%s` where veRL is", python, trainer.ShellJoin(argv))
	}
	fmt.Fprintf(stderr, "train merge: step %d of %s: running %s\n", ckpt.Step, ckpt.Root, trainer.ShellJoin(argv))
	if err := trainer.Launch(ctx, filepath.Dir(out), argv, stdout, stderr); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return &exitStatus{code: ee.ExitCode(), msg: fmt.Sprintf("train merge: the model merger failed: %v", ee)}
		}
		return fmt.Errorf("train merge: %w", err)
	}
	if _, err := os.Stat(filepath.Join(out, "config.json")); err != nil {
		return fmt.Errorf("train merge: the model merger wrote no %s: %w", filepath.Join(out, "config.json"), err)
	}
	if err := trainer.WriteTrained(out, trainer.Trained{Stage: "grpo", From: ckpt.Actor, Step: ckpt.Step, ChatTemplate: kw}); err != nil {
		return fmt.Errorf("train merge: %w", err)
	}
	fmt.Fprintf(stdout, "merge: step %d of %s → %s (chat_template_kwargs %s, from %s)\nto serve it: camproxy train serve-config --model %s\n",
		ckpt.Step, ckpt.Root, out, kwargsText(kw), tsrc, out)
	return nil
}

// grpoTemplateFor reads the chat template arguments of the GRPO run: from the
// grpo.sh of --from, or of a directory above the checkpoints.
func grpoTemplateFor(from, root string) (trainer.ChatTemplateKwargs, string, error) {
	for _, dir := range []string{from, root, filepath.Dir(root), filepath.Dir(filepath.Dir(root)), filepath.Dir(filepath.Dir(filepath.Dir(root)))} {
		p := filepath.Join(dir, "grpo.sh")
		if _, err := os.Stat(p); err != nil {
			continue
		}
		kw, err := trainer.GRPOTemplate(dir)
		return kw, p, err
	}
	return nil, "", fmt.Errorf("no grpo.sh of camproxy train grpo above %s: cannot tell the chat template arguments the model was trained with", root)
}

func kwargsText(kw trainer.ChatTemplateKwargs) string {
	if len(kw) == 0 {
		return "none"
	}
	b, _ := json.Marshal(kw)
	return string(b)
}

// trainServeConfig prints how to serve a trained model with vLLM and the camproxy
// config that makes it an arm, with the chat template arguments of its training.
func trainServeConfig(_ context.Context, args []string, stdout, stderr io.Writer, getenv func(string) (string, bool)) error {
	o := trainer.ServeOptions{Port: 8000, Weight: 1}
	var configPath, camName, kwFlag, out string
	f := newFlagSet("train serve-config", stderr)
	f.StringVar(&o.Model, "model", "", "the trained model: a merged GRPO model (train merge --out) or an SFT/DPO save (required)")
	f.StringVar(&o.Name, "name", "", "served model name, augmenter and arm name (default cam-<the model directory's name>)")
	f.IntVar(&o.Port, "port", o.Port, "vLLM's port")
	f.StringVar(&o.BaseURL, "base-url", "", "vLLM's OpenAI base URL as camproxy reaches it (default http://127.0.0.1:PORT/v1)")
	f.IntVar(&o.TP, "tp", 0, "vLLM --tensor-parallel-size (0 = vLLM's default)")
	f.StringVar(&o.Arm, "arm", "", "the arm's name (default --name)")
	f.Float64Var(&o.Weight, "weight", o.Weight, "the arm's weight")
	f.StringVar(&configPath, "config", "", "camproxy config whose cam augmenter's prompt the model was trained on (as given to train sft/grpo)")
	f.StringVar(&camName, "cam", "", "the cam augmenter of --config (default the only one)")
	f.StringVar(&kwFlag, "chat-template-kwargs", "", "JSON object: the chat template arguments, when no training file says them")
	f.StringVar(&out, "out", "", "also write the camproxy config fragment to this file")
	pos, err := parseInterleaved(f, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usagef("train serve-config: unexpected argument %q", pos[0])
	case o.Model == "":
		return usagef("train serve-config: --model DIR is required")
	case o.Port < 1 || o.Port > 65535:
		return usagef("train serve-config: --port %d", o.Port)
	case o.Weight < 0 || o.TP < 0:
		return usagef("train serve-config: --weight and --tp must be 0 or more")
	}
	if o.Model, err = trainer.ResolveModel(o.Model); err != nil {
		return usagef("train serve-config: --model: %v", err)
	}
	if o.Name == "" {
		o.Name = "cam-" + strings.ToLower(filepath.Base(o.Model))
	}
	kw, src, found, err := trainer.TrainedTemplate(o.Model)
	if err != nil {
		return fmt.Errorf("train serve-config: %w", err)
	}
	if kwFlag != "" {
		var given trainer.ChatTemplateKwargs
		if err := json.Unmarshal([]byte(kwFlag), &given); err != nil {
			return usagef("train serve-config: --chat-template-kwargs: want a JSON object: %v", err)
		}
		if found && kwargsText(given) != kwargsText(kw) {
			return usagef("train serve-config: --chat-template-kwargs %s differs from the %s the model was trained with (%s)", kwargsText(given), kwargsText(kw), src)
		}
		kw, src, found = given, "--chat-template-kwargs", true
	}
	if !found {
		return usagef("train serve-config: no training file of camproxy names %s (%s of train merge, or the sft.yaml/dpo.yaml whose output_dir it is): give --chat-template-kwargs as it was trained", o.Model, trainer.TrainedFile)
	}
	o.ChatTemplate = kw
	if configPath != "" || camName != "" {
		sc, err := camPrompter("train serve-config", configPath, camName, getenv)
		if err != nil {
			return err
		}
		if kwargsText(sc.kwargs) != kwargsText(kw) {
			return usagef("train serve-config: the cam augmenter %q of --config sends chat_template_kwargs %s, but the model was trained with %s (%s)", sc.name, kwargsText(sc.kwargs), kwargsText(kw), src)
		}
		cfg, err := loadConfig(configPath, getenv)
		if err != nil {
			return err
		}
		if a, ok := cfg.Augmenters[sc.name]; ok {
			o.SystemPrompt, o.UserTemplate, o.MaxTokens = a.SystemPrompt, a.UserTemplate, a.MaxTokens
		}
	}
	argv, err := o.VLLMCommand()
	if err != nil {
		return fmt.Errorf("train serve-config: %w", err)
	}
	frag, err := o.AugmenterConfig()
	if err != nil {
		return fmt.Errorf("train serve-config: %w", err)
	}
	if out != "" {
		if err := os.WriteFile(out, frag, 0o644); err != nil {
			return fmt.Errorf("train serve-config: --out: %w", err)
		}
	}
	fmt.Fprintf(stdout, "# %s, trained with chat_template_kwargs %s (%s)\n# 1. serve it:\n%s\n# 2. add to camproxy's config (augmenters: and experiment.arms:):\n%s",
		o.Model, kwargsText(kw), src, trainer.ShellJoin(argv), frag)
	return nil
}
