package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/camproxy/camproxy/app"
	cobracli "github.com/camproxy/camproxy/internal/cli"
	"github.com/camproxy/camproxy/replay/location"
	"github.com/camproxy/camproxy/trainer"
)

// stageArgs are the flags every training stage shares.
type stageArgs struct {
	cmd        string // "train sft"
	out        string
	configPath string
	cam        string
	val        float64
	seed       int64
	launch     string
}

func (s *stageArgs) register(f *pflag.FlagSet, launches ...string) {
	f.StringVar(&s.out, "out", "", "directory the training files are written to (required)")
	f.StringVar(&s.configPath, "config", "", "camproxy config whose cam augmenter gives the CAM prompt (default $CAMPROXY_CONFIG, else built-in defaults)")
	f.StringVar(&s.cam, "cam", "", "the cam augmenter of --config to train (default the only one)")
	f.Float64Var(&s.val, "val", 0.2, "share of tasks held out for validation (whole tasks; 0 = none)")
	f.Int64Var(&s.seed, "seed", 0, "seed of the train/validation split: the same seed gives the same split")
	cobracli.ChoiceVar(f, &s.launch, "launch", "", "run the training here once written, streaming its output (default: print the command)", launches...)
}

// check lists what is wrong with the flags every stage has, and loads the served
// CAM the stage trains (its problems are the command line's too: --config, --cam).
func (s *stageArgs) check(p *cobracli.Problems, args []string, getenv func(string) (string, bool)) app.ServedCAM {
	p.NoArgs(args)
	if s.out == "" {
		p.Add("--out is required")
	}
	if s.val < 0 || s.val >= 1 {
		p.Add("--val %g: want 0 (no validation) up to below 1", s.val)
	}
	sc, err := camPrompter(s.configPath, s.cam, getenv)
	if err != nil {
		p.Add("%v", err)
	}
	return sc
}

// camPrompter loads --config (default $CAMPROXY_CONFIG, else the built-in defaults)
// and the cam augmenter --cam the stage trains (app.ServedCAMOf); every problem is
// the command line's.
func camPrompter(path, name string, getenv func(string) (string, bool)) (app.ServedCAM, error) {
	cfg, err := loadConfig(path, getenv)
	if err != nil {
		return app.ServedCAM{}, err
	}
	sc, err := app.ServedCAMOf(cfg, name)
	if err != nil {
		return app.ServedCAM{}, cobracli.Usagef("%v", err)
	}
	return sc, nil
}

// recipeFlags registers the LLaMA-Factory recipe, defaults from r.
func recipeFlags(f *pflag.FlagSet, r *trainer.Recipe, stage string) {
	f.StringVar(&r.Model, "model", r.Model, "the model to train: a checkpoint directory (with its config.json), or hub:ORG/NAME for a Hugging Face id")
	f.StringVar(&r.Template, "template", r.Template, "LLaMA-Factory chat template (its enable_thinking follows the cam augmenter's chat_template_kwargs)")
	cobracli.ChoiceVar(f, &r.Finetuning, "finetuning", r.Finetuning, "which weights train", "full", "lora", "freeze")
	f.Float64Var(&r.Epochs, "epochs", r.Epochs, "training epochs")
	f.Float64Var(&r.LR, "lr", r.LR, "learning rate")
	f.Float64Var(&r.Warmup, "warmup-ratio", r.Warmup, "share of steps warming the learning rate up")
	f.IntVar(&r.CutoffLen, "cutoff-len", r.CutoffLen, "tokens per example (longer ones are cut)")
	f.IntVar(&r.BatchSize, "batch-size", r.BatchSize, "examples per GPU per step")
	f.IntVar(&r.GradAccum, "grad-accum", r.GradAccum, "gradient accumulation steps")
	cobracli.ChoiceVar(f, &r.DeepSpeed, "deepspeed", r.DeepSpeed, "DeepSpeed ZeRO stage", "z3", "z2", "none")
	f.StringVar(&r.OutputDir, "output-dir", r.OutputDir, "checkpoint directory (relative to --out; written absolute)")
	cobracli.ChoiceVar(f, &r.ReportTo, "report-to", r.ReportTo, "where training metrics go", "none", "wandb", "tensorboard")
	f.IntVar(&r.GPUs, "gpus", r.GPUs, "GPUs per node (the Job requests them)")
	f.StringVar(&r.Image, "image", r.Image, "the Job's container image, with LLaMA-Factory")
	f.StringVar(&r.PVC, "pvc", r.PVC, "the PersistentVolumeClaim holding --out in the Job (default an emptyDir: copy --out in first)")
	f.StringVar(&r.Namespace, "namespace", r.Namespace, "the Job's namespace")
	f.StringVar(&r.RunName, "job-name", r.RunName, "the Job's name")
	if stage == "dpo" {
		f.Float64Var(&r.PrefBeta, "pref-beta", r.PrefBeta, "DPO beta")
		cobracli.ChoiceVar(f, &r.PrefLoss, "pref-loss", r.PrefLoss, "preference loss (sigmoid is DPO)", "sigmoid", "orpo", "simpo", "hinge", "ipo")
	}
}

func (c *cli) trainSFTCmd() *cobra.Command {
	s := stageArgs{cmd: "train sft"}
	r := trainer.DefaultSFTRecipe()
	var data, jobPath string
	var kube trainer.KubeOptions
	var sc app.ServedCAM
	cmd := &cobra.Command{
		Use:   "sft --data REFLECT.jsonl --out DIR",
		Short: "LLaMA-Factory SFT files from the guidance of train reflect",
		Long: `Write LLaMA-Factory supervised fine-tuning files: the guidance of train reflect as
alpaca data (the prompt is the one camproxy sends the CAM, rendered with the
served chat template), sft.yaml, run.sh and a Kubernetes job.yaml. Tasks are
split whole between training and validation (--val, --seed). --launch local
runs the training here.`,
		Example: `  camproxy train sft --data reflect.jsonl --out sft --model hub:Qwen/Qwen3-8B
  camproxy train sft --data reflect.jsonl --out sft --model /models/qwen3-8b --finetuning lora --launch local`,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) {
			sc = s.check(p, args, c.getenv)
			if data == "" {
				p.Add("--data is required: the output of camproxy train reflect")
			}
			r.Thinking = sc.Kwargs.Thinking()
			checkRecipe(p, r, "sft")
		}),
		RunE: func(cmd *cobra.Command, _ []string) error {
			recs, skipped, err := trainer.ReadRecords(data)
			if err != nil {
				return cobracli.Usagef("train sft: --data: %v", err)
			}
			if len(recs) == 0 {
				return fmt.Errorf("train sft: --data %s holds no guidance record (%d lines skipped): run camproxy train reflect first", data, skipped)
			}
			w, err := trainer.WriteSFT(trainer.RecordExamples(recs), trainer.LFOptions{Out: s.out, Prompter: sc.CAM, Val: s.val, Seed: s.seed, Recipe: r, JobPath: jobPath, Kube: kube})
			if err != nil {
				return stageError(s.cmd, err)
			}
			fmt.Fprintf(c.stdout, "sft: %d records over %d tasks to train on, %d over %d tasks to validate on (--val %g, --seed %d); %d lines of %s skipped\n",
				w.Train, w.TrainTasks, w.Val, w.ValTasks, s.val, s.seed, skipped, data)
			return finishStage(cmd.Context(), s, w, "sft", sc, c.stdout, c.stderr)
		},
	}
	f := cmd.Flags()
	s.register(f, "local")
	f.StringVar(&data, "data", "", "the guidance written by train reflect (JSON Lines; required)")
	f.StringVar(&jobPath, "job-path", "", "--out's path inside the --pvc claim (default its root)")
	recipeFlags(f, &r, "sft")
	kubeFlags(f, &kube, false)
	return cmd
}

// checkRecipe adds the recipe's problems (its template is judged against the served
// CAM's chat template when the config loaded: r.Thinking).
func checkRecipe(p *cobracli.Problems, r trainer.Recipe, stage string) {
	if err := r.Validate(stage); err != nil {
		p.Add("%v", err)
	}
	if _, err := trainer.ResolveModel(r.Model); err != nil { // before any data is read: the writer resolves it again
		p.Add("--%v", err)
	}
}

func (c *cli) trainGRPOCmd() *cobra.Command {
	s := stageArgs{cmd: "train grpo"}
	o := trainer.DefaultGRPOOptions()
	var data string
	var from bufferFlags
	var sc app.ServedCAM
	cmd := &cobra.Command{
		Use:   "grpo --data REFLECT.jsonl|--from URI --out DIR --model SFT_DIR",
		Short: "veRL GRPO files: the CAM optimised on the rewards of agent runs through camproxy",
		Long: `Write veRL GRPO files: the tasks as Parquet, reward.py (each generated context is
scored by an agent run through camproxy: POST /v1/rollouts on the admin plane) and
grpo.sh (plus grpo-ray.sh and a Kubernetes job.yaml or RayJob). The actor starts
from the SFT checkpoint. --launch local runs grpo.sh here, --launch ray submits
it to a Ray cluster.`,
		Example: `  camproxy train grpo --data reflect.jsonl --out grpo --model sft/saves/cam-sft
  camproxy train grpo --from file://./camproxy-data/replay --out grpo --model hub:Qwen/Qwen3-8B --launch local`,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) {
			sc = s.check(p, args, c.getenv)
			if (data == "") == (from.from == "") {
				p.Add("give the tasks with exactly one of --data REFLECT.jsonl or --from URI")
			}
			if from.from != "" {
				from.check(p)
			}
			if o.Model == "" {
				p.Add("--model is required: the SFT checkpoint (e.g. DIR/saves/cam-sft of train sft)")
			}
			o.ChatTemplate = sc.Kwargs
			if err := o.Validate(); err != nil {
				p.Add("%v", err)
			}
			if _, err := trainer.ResolveModel(o.Model); o.Model != "" && err != nil {
				p.Add("--%v", err)
			}
		}),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var exs []trainer.Example
			source := data
			if data != "" {
				recs, _, err := trainer.ReadRecords(data)
				if err != nil {
					return cobracli.Usagef("train grpo: --data: %v", err)
				}
				exs = trainer.RecordExamples(recs)
			} else {
				source = location.Redact(from.from)
				b, err := from.read(ctx, s.cmd, c.stderr)
				if err != nil {
					return err
				}
				exs = trainer.TaskExamples(b.Tasks())
			}
			if len(exs) == 0 {
				return fmt.Errorf("train grpo: %s holds no task with an id and a text", source)
			}
			o.Out, o.Prompter, o.Val, o.Seed = s.out, sc.CAM, s.val, s.seed
			w, err := trainer.WriteGRPO(exs, o)
			if err != nil {
				return stageError(s.cmd, err)
			}
			fmt.Fprintf(c.stdout, "grpo: %d tasks to train on in batches of %d, %d to validate on (--val %g, --seed %d), from %s\n", w.TrainTasks, w.BatchSize, w.ValTasks, s.val, s.seed, source)
			fmt.Fprintf(c.stdout, "  rewards: reward.py posts each generated context to %s/v1/rollouts (set rollouts.runner in camproxy's config)\n", o.RolloutURL)
			return finishStage(ctx, s, w, "grpo", sc, c.stdout, c.stderr)
		},
	}
	f := cmd.Flags()
	s.register(f, "local", "ray")
	f.StringVar(&data, "data", "", "the guidance written by train reflect (JSON Lines): its tasks")
	f.StringVar(&from.from, "from", "", "a replay buffer instead of --data: every task of the buffer with a task text")
	f.StringVar(&o.Model, "model", trainer.DefaultSFTModel, "the actor to optimise: the SFT checkpoint directory (that of train sft --out sft), or hub:ORG/NAME")
	f.StringVar(&o.RolloutURL, "rollout-url", o.RolloutURL, "camproxy's admin plane as the trainer reaches it (reward.py posts /v1/rollouts there)")
	f.DurationVar(&o.RolloutTimeout, "rollout-timeout", o.RolloutTimeout, "how long one agent run may take once it runs")
	f.DurationVar(&o.QueueTimeout, "queue-timeout", o.QueueTimeout, "how long a rollout may wait for one of camproxy's rollouts.max_in_flight slots (0 = camproxy's rollouts.queue_timeout)")
	f.Float64Var(&o.EmptyReward, "empty-reward", o.EmptyReward, "the reward of a response with no context left (a <think> cut off by --max-response-length): the minimum reward")
	f.StringVar(&o.CheckpointDir, "checkpoint-dir", "", "trainer.default_local_dir (default --out/checkpoints/PROJECT/EXPERIMENT; written absolute)")
	cobracli.ChoiceVar(f, &o.RewardManager, "reward-manager", o.RewardManager, "reward wiring: auto (by the installed veRL: loop from 0.7, batch before), loop or batch", "auto", "loop", "batch")
	f.IntVar(&o.N, "n", o.N, "contexts sampled per task (rollout.n)")
	f.IntVar(&o.Epochs, "epochs", o.Epochs, "training epochs")
	f.IntVar(&o.BatchSize, "batch-size", o.BatchSize, "tasks per step; 0 = min(32, training tasks)")
	f.Float64Var(&o.LR, "lr", o.LR, "actor learning rate")
	f.IntVar(&o.GPUs, "gpus", o.GPUs, "GPUs per node")
	f.IntVar(&o.Nodes, "nodes", o.Nodes, "nodes")
	f.IntVar(&o.TP, "tp", o.TP, "vLLM tensor parallel size of the rollouts")
	f.IntVar(&o.MaxPromptLen, "max-prompt-length", o.MaxPromptLen, "prompt tokens; longer prompts are filtered out")
	f.IntVar(&o.MaxResponseLen, "max-response-length", o.MaxResponseLen, "tokens of a generated context")
	f.StringVar(&o.DataSource, "data-source", o.DataSource, "data_source of every row")
	f.StringVar(&o.Project, "project", o.Project, "trainer.project_name")
	f.StringVar(&o.Experiment, "experiment", o.Experiment, "trainer.experiment_name")
	f.StringVar(&o.RayAddress, "ray-address", o.RayAddress, "the Ray dashboard address grpo-ray.sh submits to")
	kubeFlags(f, &o.Kube, true)
	return cmd
}

func (c *cli) trainDPOCmd() *cobra.Command {
	s := stageArgs{cmd: "train dpo"}
	r := trainer.DefaultDPORecipe()
	var in bufferFlags
	var jobPath string
	var po trainer.PairOptions
	var kube trainer.KubeOptions
	var sc app.ServedCAM
	cmd := &cobra.Command{
		Use:   "dpo --out DIR",
		Short: "LLaMA-Factory DPO files: preference pairs of contexts that earned different rewards",
		Long: `Write LLaMA-Factory DPO files from the replay buffer: for each task, pairs of
contexts whose runs earned different mean rewards (the better one chosen), with
the prompt camproxy sends the CAM. --launch local runs the training here.`,
		Example: `  camproxy train dpo --out dpo --model sft/saves/cam-sft
  camproxy train dpo --from s3://my-bucket/replay --out dpo --min-margin 0.2 --max-pairs-per-task 4`,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) {
			sc = s.check(p, args, c.getenv)
			in.check(p)
			if po.MinMargin < 0 {
				p.Add("--min-margin %g: want 0 or more", po.MinMargin)
			}
			if po.MaxPerTask < 0 {
				p.Add("--max-pairs-per-task %d: want 0 (all) or more", po.MaxPerTask)
			}
			if po.MinRuns < 1 {
				p.Add("--min-runs %d: want 1 or more", po.MinRuns)
			}
			r.Thinking = sc.Kwargs.Thinking()
			checkRecipe(p, r, "dpo")
		}),
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := in.read(cmd.Context(), s.cmd, c.stderr)
			if err != nil {
				return err
			}
			pairs, st := trainer.Pairs(b.Tasks(), po)
			counts := st.String()
			if len(pairs) == 0 {
				return fmt.Errorf("train dpo: no preference pair in %s: no task has two contexts with different rewards (%s)", location.Redact(in.from), counts)
			}
			w, err := trainer.WriteDPO(pairs, trainer.LFOptions{Out: s.out, Prompter: sc.CAM, Val: s.val, Seed: s.seed, Recipe: r, JobPath: jobPath, Kube: kube})
			if err != nil {
				return stageError(s.cmd, err)
			}
			fmt.Fprintf(c.stdout, "dpo: %d pairs over %d tasks to train on, %d over %d tasks to validate on (--val %g, --seed %d)\n  %s\n",
				w.Train, w.TrainTasks, w.Val, w.ValTasks, s.val, s.seed, counts)
			return finishStage(cmd.Context(), s, w, "dpo", sc, c.stdout, c.stderr)
		},
	}
	f := cmd.Flags()
	s.register(f, "local")
	in.define(f)
	f.Float64Var(&po.MinMargin, "min-margin", 0, "a pair needs mean rewards further apart than this")
	f.IntVar(&po.MaxPerTask, "max-pairs-per-task", 0, "most pairs per task, widest margins first; 0 = all")
	f.IntVar(&po.MinRuns, "min-runs", 1, "rewarded runs a context needs before its mean reward counts")
	f.BoolVar(&po.IncludeNone, "include-baseline", false, "let a run without a context (the baseline arm) be the rejected side")
	f.StringVar(&jobPath, "job-path", "", "--out's path inside the --pvc claim (default its root)")
	recipeFlags(f, &r, "dpo")
	kubeFlags(f, &kube, false)
	return cmd
}

func stageError(cmd string, err error) error {
	if errors.Is(err, trainer.ErrOutNotDir) {
		return cobracli.Usagef("%s: --out %v", cmd, err)
	}
	if errors.Is(err, trainer.ErrModel) {
		return cobracli.Usagef("%s: --%v", cmd, err)
	}
	return fmt.Errorf("%s: %w", cmd, err)
}

// finishStage lists what was written and either prints how to run it or, with
// --launch, runs it and exits with its status.
func finishStage(ctx context.Context, s stageArgs, w *trainer.Written, stage string, sc app.ServedCAM, stdout, stderr io.Writer) error {
	fmt.Fprintf(stdout, "  CAM prompt: augmenter %q, version %s (the prompt camproxy serves with)\n", sc.Name, sc.CAM.Version())
	if len(sc.Kwargs) > 0 {
		fmt.Fprintf(stdout, "  chat template: chat_template_kwargs %s of augmenter %q, as served\n", sc.Kwargs, sc.Name)
	}
	for _, warn := range w.Warnings {
		fmt.Fprintf(stderr, "%s: warning: %s\n", s.cmd, warn)
	}
	fmt.Fprintf(stdout, "  wrote %s: %s\n", w.Dir, strings.Join(w.Files, ", "))
	argv, tool := w.Command, stage
	if s.launch == "ray" {
		argv, tool = w.RayCommand, "grpo-ray"
	}
	if s.launch == "" {
		fmt.Fprintf(stdout, "to train: cd %s && %s", w.Dir, strings.Join(w.Command, " "))
		if slices.Contains(w.Files, "job.yaml") {
			fmt.Fprintf(stdout, "   (on Kubernetes: kubectl apply -f %s)", filepath.Join(w.Dir, "job.yaml"))
		}
		if w.RayCommand != nil {
			fmt.Fprintf(stdout, "   (on a Ray cluster: %s)", strings.Join(w.RayCommand, " "))
		}
		fmt.Fprintln(stdout, "; or add --launch local")
		return nil
	}
	if err := trainer.CheckTool(ctx, tool); err != nil {
		return fmt.Errorf("%s --launch %s: %w; the files are written: run `cd %s && %s` where it is installed", s.cmd, s.launch, err, w.Dir, strings.Join(argv, " "))
	}
	if tool == "grpo" { // grpo.sh decides the same way again; this says it before the long start
		if v, err := trainer.VerlVersion(ctx); err == nil {
			if mode, err := trainer.VerlRewardMode(v); err == nil {
				fmt.Fprintf(stderr, "%s: veRL %s installed: reward wiring %s\n", s.cmd, v, mode)
			}
		}
	}
	fmt.Fprintf(stderr, "%s: running %s in %s\n", s.cmd, strings.Join(argv, " "), w.Dir)
	start := time.Now()
	err := trainer.Launch(ctx, w.Dir, argv, stdout, stderr)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &cobracli.ExitStatus{Code: ee.ExitCode(), Msg: fmt.Sprintf("%s: %s failed after %s: %v", s.cmd, strings.Join(argv, " "), time.Since(start).Round(time.Second), ee)}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", s.cmd, err)
	}
	fmt.Fprintf(stderr, "%s: %s finished in %s\n", s.cmd, strings.Join(argv, " "), time.Since(start).Round(time.Second))
	return nil
}
