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

	"github.com/spf13/cobra"

	cobracli "github.com/camproxy/camproxy/internal/cli"
	"github.com/camproxy/camproxy/trainer"
)

func (c *cli) trainMergeCmd() *cobra.Command {
	var from, stepFlag, out, python string
	var step int
	cmd := &cobra.Command{
		Use:   "merge --from GRPO_DIR --out DIR",
		Short: "veRL's model merger: a GRPO checkpoint (FSDP shards) → a Hugging Face model",
		Long: `Merge a GRPO checkpoint (veRL's sharded FSDP state) into a Hugging Face model vLLM
can serve, with veRL's model merger (python -m verl.model_merger merge). --step
latest takes the step latest_checkpointed_iteration.txt names. The chat template
arguments of the training are written beside the model for train serve-config.`,
		Example: `  camproxy train merge --from grpo --out cam-grpo
  camproxy train merge --from grpo --step 40 --out cam-grpo-40`,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) {
			p.NoArgs(args)
			if stepFlag != "latest" {
				var err error
				if step, err = strconv.Atoi(stepFlag); err != nil || step < 1 {
					p.Add("--step %q: want a global step (1 or more) or latest", stepFlag)
				}
			}
			if ents, err := os.ReadDir(out); err == nil && len(ents) > 0 {
				p.Add("--out %s is not empty: give a new directory", out)
			} else if err != nil && out != "" && !errors.Is(err, os.ErrNotExist) {
				p.Add("--out %s: %v", out, err)
			}
		}),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return trainMerge(cmd.Context(), from, step, out, python, c.stdout, c.stderr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the --out of camproxy train grpo, or veRL's checkpoint directory (required)")
	f.StringVar(&stepFlag, "step", "latest", "the global step to merge: N, or latest")
	f.StringVar(&out, "out", "", "directory the Hugging Face model is written to (required; must be empty or absent)")
	f.StringVar(&python, "python", "python3", "the Python with veRL installed")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

// trainMerge turns a GRPO checkpoint (sharded FSDP state) into a Hugging Face
// model vLLM can serve, with veRL's model merger (trainer.PlanMerge).
func trainMerge(ctx context.Context, from string, step int, out, python string, stdout, stderr io.Writer) error {
	m, err := trainer.PlanMerge(from, step, out, python)
	if err != nil {
		return fmt.Errorf("train merge: %w", err)
	}
	if _, err := exec.LookPath(python); err != nil {
		return fmt.Errorf("train merge: %s is not installed here; run `%s` where veRL is", python, trainer.ShellJoin(m.Command))
	}
	fmt.Fprintf(stderr, "train merge: step %d of %s: running %s\n", m.Step, m.Root, trainer.ShellJoin(m.Command))
	if err := trainer.Launch(ctx, filepath.Dir(m.Out), m.Command, stdout, stderr); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return &cobracli.ExitStatus{Code: ee.ExitCode(), Msg: fmt.Sprintf("train merge: the model merger failed: %v", ee)}
		}
		return fmt.Errorf("train merge: %w", err)
	}
	if err := m.Finish(); err != nil {
		return fmt.Errorf("train merge: %w", err)
	}
	fmt.Fprintf(stdout, "merge: step %d of %s → %s (chat_template_kwargs %s, from %s)\nto serve it: camproxy train serve-config --model %s\n",
		m.Step, m.Root, m.Out, m.ChatTemplate, m.TemplateFrom, m.Out)
	return nil
}

func (c *cli) trainServeConfigCmd() *cobra.Command {
	o := trainer.ServeOptions{Port: 8000, Weight: 1}
	var sf serveConfigFlags
	cmd := &cobra.Command{
		Use:   "serve-config --model DIR",
		Short: "The vllm serve command and the cam augmenter + arm for a trained model",
		Long: `Print how to serve a trained CAM with vLLM and the camproxy config (a cam augmenter
and an arm) that uses it, with the chat template arguments it was trained with
(read from the training files; --config's cam augmenter must send the same).`,
		Example: `  camproxy train serve-config --model cam-grpo
  camproxy train serve-config --model cam-grpo --name cam-v2 --port 8001 --out cam-v2.yaml`,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) {
			p.NoArgs(args)
			if o.Port < 1 || o.Port > 65535 {
				p.Add("--port %d: want 1 to 65535", o.Port)
			}
			if o.Weight < 0 {
				p.Add("--weight %g: want 0 or more", o.Weight)
			}
			p.AtLeast("--tp", o.TP, 0, "0 (vLLM's default) or more")
		}),
		RunE: func(*cobra.Command, []string) error { return trainServeConfig(o, sf, c.stdout, c.getenv) },
	}
	f := cmd.Flags()
	f.StringVar(&o.Model, "model", "", "the trained model: a merged GRPO model (train merge --out) or an SFT/DPO save (required)")
	f.StringVar(&o.Name, "name", "", "served model name, augmenter and arm name (default cam-<the model directory's name>)")
	f.IntVar(&o.Port, "port", o.Port, "vLLM's port")
	f.StringVar(&o.BaseURL, "base-url", "", "vLLM's OpenAI base URL as camproxy reaches it (default http://127.0.0.1:PORT/v1)")
	f.IntVar(&o.TP, "tp", 0, "vLLM --tensor-parallel-size (0 = vLLM's default)")
	f.StringVar(&o.Arm, "arm", "", "the arm's name (default --name)")
	f.Float64Var(&o.Weight, "weight", o.Weight, "the arm's weight")
	f.StringVar(&sf.configPath, "config", "", "camproxy config whose cam augmenter's prompt the model was trained on (as given to train sft/grpo)")
	f.StringVar(&sf.camName, "cam", "", "the cam augmenter of --config (default the only one)")
	f.StringVar(&sf.kwargs, "chat-template-kwargs", "", "JSON object: the chat template arguments, when no training file says them")
	f.StringVar(&sf.out, "out", "", "also write the camproxy config fragment to this file")
	_ = cmd.MarkFlagRequired("model")
	return cmd
}

type serveConfigFlags struct{ configPath, camName, kwargs, out string }

// trainServeConfig prints how to serve a trained model with vLLM and the camproxy
// config that makes it an arm, with the chat template arguments of its training.
func trainServeConfig(o trainer.ServeOptions, sf serveConfigFlags, stdout io.Writer, getenv func(string) (string, bool)) error {
	configPath, camName, kwFlag, out := sf.configPath, sf.camName, sf.kwargs, sf.out
	var err error
	if o.Model, err = trainer.ResolveModel(o.Model); err != nil {
		return cobracli.Usagef("train serve-config: --model: %v", err)
	}
	kw, src, found, err := trainer.TrainedTemplate(o.Model)
	if err != nil {
		return fmt.Errorf("train serve-config: %w", err)
	}
	if kwFlag != "" {
		var given trainer.ChatTemplateKwargs
		if err := json.Unmarshal([]byte(kwFlag), &given); err != nil {
			return cobracli.Usagef("train serve-config: --chat-template-kwargs: want a JSON object: %v", err)
		}
		if found && given.String() != kw.String() {
			return cobracli.Usagef("train serve-config: --chat-template-kwargs %s differs from the %s the model was trained with (%s)", given, kw, src)
		}
		kw, src, found = given, "--chat-template-kwargs", true
	}
	if !found {
		return cobracli.Usagef("train serve-config: no training file of camproxy names %s (%s of train merge, or the sft.yaml/dpo.yaml whose output_dir it is): give --chat-template-kwargs as it was trained", o.Model, trainer.TrainedFile)
	}
	o.ChatTemplate = kw
	if configPath != "" || camName != "" {
		sc, err := camPrompter(configPath, camName, getenv)
		if err != nil {
			return cobracli.Usagef("train serve-config: %v", err)
		}
		if sc.Kwargs.String() != kw.String() {
			return cobracli.Usagef("train serve-config: the cam augmenter %q of --config sends chat_template_kwargs %s, but the model was trained with %s (%s)", sc.Name, sc.Kwargs, kw, src)
		}
		cfg, err := loadConfig(configPath, getenv)
		if err != nil {
			return err
		}
		if a, ok := cfg.Augmenters[sc.Name]; ok {
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
		o.Model, kw, src, trainer.ShellJoin(argv), frag)
	return nil
}
