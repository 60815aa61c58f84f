package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	cobracli "github.com/camproxy/camproxy/internal/cli"
	"github.com/camproxy/camproxy/replay/location"
	"github.com/camproxy/camproxy/trainer"
)

func (c *cli) trainCmd() *cobra.Command {
	return c.runner.Group("train", "Train the CAM (CLEAR: reflect → SFT → DPO/GRPO) or a playbook (RCL) from a replay buffer",
		`  camproxy train reflect --model openai/gpt-4o --out reflect.jsonl
  camproxy train sft --data reflect.jsonl --out sft --model hub:Qwen/Qwen3-8B
  camproxy train playbook --model openai/gpt-4o --out playbooks`,
		c.trainReflectCmd(), c.trainSFTCmd(), c.trainGRPOCmd(), c.trainDPOCmd(),
		c.trainPlaybookCmd(), c.trainMergeCmd(), c.trainServeConfigCmd())
}

type reflectArgs struct {
	in bufferFlags
	callFlags
	out, model                                  string
	minRuns, subsets, subsetSize, limit         int
	seed                                        int64
	mixedOnly, dryRun                           bool
	maxSteps, maxToolBytes                      int
	concurrency                                 int
	systemPrompt, userPrompt, workDir, progress string

	bounds cobracli.Bounds // the least values of the integer flags
}

// callFlags are the flags of a command that calls a reflection model: where it is,
// its key, and how each call is made and retried.
type callFlags struct {
	baseURL, apiKeyEnv, region string
	maxTokens, retries         int
	temperature                float64
	backoff, timeout           time.Duration
}

func (m *callFlags) define(f *pflag.FlagSet) {
	f.StringVar(&m.baseURL, "base-url", "", "OpenAI-compatible base URL (default https://api.openai.com/v1; vLLM: http://host:8000/v1), or the Bedrock endpoint")
	f.StringVar(&m.apiKeyEnv, "api-key-env", "OPENAI_API_KEY", "environment variable holding the OpenAI API key (openai/ only)")
	f.StringVar(&m.region, "region", "", "AWS region for bedrock/ (default the AWS config's, else us-east-1)")
	f.IntVar(&m.maxTokens, "max-tokens", 4096, "most tokens per model answer; 0 = the server's default")
	f.Float64Var(&m.temperature, "temperature", -1, "sampling temperature; -1 = the server's default")
	f.IntVar(&m.retries, "retries", 5, "retries of a model call on 408/409/429/5xx, timeouts and connection errors")
	f.DurationVar(&m.backoff, "backoff", time.Second, "first retry wait, doubled each retry (a retry-after header wins)")
	f.DurationVar(&m.timeout, "timeout", 5*time.Minute, "deadline of one model call")
}

func (m *callFlags) check(p *cobracli.Problems) {
	p.AtLeast("--max-tokens", m.maxTokens, 0, "0 (the server's default) or more")
	p.AtLeast("--retries", m.retries, 0, "0 or more")
	if m.temperature != -1 && (m.temperature < 0 || m.temperature > 2) {
		p.Add("--temperature %g: want -1 (the server's default) or 0 to 2", m.temperature)
	}
	if m.backoff <= 0 {
		p.Add("--backoff %v: want a positive duration", m.backoff)
	}
	if m.timeout <= 0 {
		p.Add("--timeout %v: want a positive duration", m.timeout)
	}
}

// retry is the retry policy the flags ask for.
func (m *callFlags) retry() trainer.RetryPolicy {
	r := trainer.RetryPolicy{Retries: m.retries, Base: m.backoff, Timeout: m.timeout}
	if m.retries == 0 {
		r.Retries = -1 // RetryPolicy's zero means the default
	}
	return r
}

// temperatureOrDefault is the temperature to send, nil for the server's default.
func (m *callFlags) temperatureOrDefault() *float64 {
	if m.temperature < 0 {
		return nil
	}
	t := m.temperature
	return &t
}

func (c *cli) trainReflectCmd() *cobra.Command {
	var a reflectArgs
	cmd := &cobra.Command{
		Use:   "reflect --model openai/NAME|bedrock/MODEL_ID --out FILE",
		Short: "Contrastive reflection: guidance for a new run of each task, as JSON Lines",
		Long: `Contrastive reflection (CLEAR's first stage): for each task with several rewarded
runs, a reflection model reads a subset of them side by side — tools to open each
run's files — and writes the guidance that would have helped a new run. Jobs
already in --out are skipped, so an interrupted run resumes. --dry-run prints the
jobs and a token estimate without calling a model.`,
		Example: `  camproxy train reflect --model openai/gpt-4o --out reflect.jsonl
  camproxy train reflect --model openai/Qwen3-32B --base-url http://127.0.0.1:8000/v1 --out reflect.jsonl --subsets 3
  camproxy train reflect --dry-run`,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) {
			p.NoArgs(args)
			a.check(p)
		}),
		RunE: func(cmd *cobra.Command, _ []string) error { return c.trainReflect(cmd.Context(), a) },
	}
	f := cmd.Flags()
	a.callFlags.define(f)
	f.StringVar(&a.out, "out", "", "JSON Lines file the guidance is appended to; jobs already in it are skipped (required)")
	f.StringVar(&a.model, "model", "", "reflection model: openai/NAME or bedrock/MODEL_ID (required unless --dry-run)")
	a.bounds.IntVar(f, &a.minRuns, "min-runs", 2, 1, "1 or more", "keep tasks with at least this many rewarded runs")
	a.bounds.IntVar(f, &a.subsets, "subsets", 1, 1, "1 or more", "distinct subsets of runs reflected on per task, at most")
	a.bounds.IntVar(f, &a.subsetSize, "subset-size", 3, 1, "1 or more", "runs per subset (all of a task's runs when it has fewer)")
	f.Int64Var(&a.seed, "seed", 0, "seed of the subset draw: the same seed gives the same jobs")
	f.BoolVar(&a.mixedOnly, "mixed-only", false, "only tasks whose runs both succeeded and failed")
	a.bounds.IntVar(f, &a.limit, "limit", 0, 0, "0 (all) or more", "only the first N jobs of the plan (mixed tasks come first); 0 = all")
	a.bounds.IntVar(f, &a.maxSteps, "max-steps", trainer.DefaultMaxSteps, 1, "1 or more", "model turns per job; the last one must answer")
	a.bounds.IntVar(f, &a.maxToolBytes, "max-tool-bytes", trainer.DefaultMaxToolBytes, 1024, "1024 or more", "a tool result is cut at this many bytes")
	a.bounds.IntVar(f, &a.concurrency, "concurrency", trainer.DefaultConcurrency, 1, "1 or more", "jobs run at once")
	f.StringVar(&a.systemPrompt, "system-prompt", "", "file replacing the built-in system prompt")
	f.StringVar(&a.userPrompt, "user-prompt", "", "file replacing the built-in user prompt ({{task}}, {{runs}}, {{max_steps}} are filled in)")
	f.StringVar(&a.workDir, "work-dir", "", "where the per-job sandboxes are made (default the system temp dir)")
	cobracli.ChoiceVar(f, &a.progress, "progress", "auto", "auto (a bar on a terminal, else lines), bar, lines or off", "auto", trainer.ProgressBar, trainer.ProgressLines, trainer.ProgressOff)
	f.BoolVar(&a.dryRun, "dry-run", false, "print the jobs and a token estimate; call no model")
	a.in.define(f) // after --progress: the read reports through it
	return cmd
}

// check lists every problem of the flags.
func (a *reflectArgs) check(p *cobracli.Problems) {
	a.in.progress = a.progress
	a.in.check(p)
	if a.out == "" && !a.dryRun {
		p.Add("--out is required")
	}
	if a.model == "" && !a.dryRun {
		p.Add("--model is required: openai/NAME or bedrock/MODEL_ID")
	}
	a.bounds.Check(p)
	a.callFlags.check(p)
	checkModel(p, "--model", a.model)
	switch {
	case a.out == "-":
		p.Add("--out must be a file: a rerun reads it to skip the jobs done")
	case a.out != "" && cobracli.IsDir(a.out):
		p.Add("--out %s is a directory", a.out)
	default:
		p.OutDir("--out", a.out)
	}
	p.Dir("--work-dir", a.workDir)
}

// checkModel is a problem when a model flag is set but does not name a provider's model.
func checkModel(p *cobracli.Problems, flag, spec string) {
	if spec == "" {
		return
	}
	if _, _, err := trainer.ParseModel(spec); err != nil {
		p.Add("%s: %v", flag, err)
	}
}

// prompts reads the overrides.
func (a reflectArgs) prompts() (trainer.Prompts, error) {
	p := trainer.DefaultPrompts()
	for _, o := range []struct {
		flag, path string
		dst        *string
	}{{"--system-prompt", a.systemPrompt, &p.System}, {"--user-prompt", a.userPrompt, &p.User}} {
		if o.path == "" {
			continue
		}
		text, err := trainer.ReadPromptFile(o.path)
		if err != nil {
			return p, cobracli.Usagef("train reflect: %s: %v", o.flag, err)
		}
		*o.dst = text
	}
	return p, nil
}

// modelOptions are the model client options of a train command: an openai/ model
// needs the key in $apiKeyEnv unless --base-url names a server that does not (a
// dry run calls nothing and needs none).
func modelOptions(cmd, baseURL, region, apiKeyEnv string, getenv func(string) (string, bool), dryRun bool, specs ...string) (trainer.ModelOptions, error) {
	mo := trainer.ModelOptions{BaseURL: baseURL, Region: region}
	for _, spec := range specs {
		if provider, _, _ := trainer.ParseModel(spec); provider != "openai" || dryRun {
			continue
		}
		mo.APIKey, _ = getenv(apiKeyEnv)
		if mo.APIKey == "" && baseURL == "" {
			return mo, cobracli.Usagef("%s: $%s is not set: the OpenAI API needs a key (or give --base-url of a server that does not)", cmd, apiKeyEnv)
		}
	}
	return mo, nil
}

func (c *cli) trainReflect(ctx context.Context, a reflectArgs) error {
	stdout, stderr, getenv := c.stdout, c.stderr, c.getenv
	prompts, err := a.prompts()
	if err != nil {
		return err
	}
	mo, err := modelOptions("train reflect", a.baseURL, a.region, a.apiKeyEnv, getenv, a.dryRun, a.model)
	if err != nil {
		return err
	}
	b, err := a.in.read(ctx, "train reflect", stderr)
	if err != nil {
		return err
	}
	plan := trainer.Sample(b.Tasks(), trainer.SampleOptions{
		MinRuns: a.minRuns, Subsets: a.subsets, SubsetSize: a.subsetSize, Seed: a.seed, MixedOnly: a.mixedOnly,
	})
	jobs := plan.Jobs
	if a.limit > 0 && len(jobs) > a.limit {
		jobs = jobs[:a.limit]
	}
	if a.dryRun {
		return dryRun(stdout, a, plan, jobs, prompts)
	}
	if len(jobs) == 0 {
		return fmt.Errorf("train reflect: no job: no task of %s has %d rewarded runs and a task text (%s)", location.Redact(a.in.from), a.minRuns, plan.Counts())
	}

	progress := trainer.NewProgress(stderr, a.progress)
	log := slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: slog.LevelInfo}))
	model, err := trainer.NewModel(ctx, a.model, mo)
	if err != nil {
		return fmt.Errorf("train reflect: %w", err)
	}
	o := trainer.Options{
		Model: model, ModelName: a.model, Out: a.out, Prompts: prompts,
		MaxSteps: a.maxSteps, MaxToolBytes: a.maxToolBytes, MaxTokens: a.maxTokens,
		Concurrency: a.concurrency, WorkDir: a.workDir, Logger: log,
		Retry: a.retry(), Temperature: a.temperatureOrDefault(),
	}
	if progress.Mode() != trainer.ProgressOff {
		o.Progress = progress
	}
	log.Info("reflecting", "jobs", len(jobs), "tasks", plan.Eligible, "mixed", plan.Mixed, "model", a.model,
		"prompt_version", prompts.Version(), "out", a.out)
	s, err := trainer.Reflect(ctx, jobs, o)
	if s.Started.IsZero() { // nothing ran: --out could not be opened
		return err // "reflect: output …"
	}
	fmt.Fprintf(stdout, "reflect: %d jobs: %d written, %d already in %s, %d failed; %d model calls, %d retries; tokens %s in, %s out; %s\n",
		s.Jobs, s.Done, s.Resumed, a.out, s.Failed, s.Calls, s.Retries,
		trainer.FormatTokens(s.Tokens.Input), trainer.FormatTokens(s.Tokens.Output), s.Finished.Sub(s.Started).Round(time.Millisecond))
	switch {
	case errors.Is(err, trainer.ErrAborted):
		return err // "reflect: stopped: the first 5 jobs all failed, …"
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("train reflect: interrupted after %d jobs; run the same command again to resume", s.Resumed+s.Done)
	case err != nil:
		return fmt.Errorf("train reflect: %w", err)
	case s.Failed > 0:
		return fmt.Errorf("train reflect: %d of %d jobs failed (logged above); run the same command again to retry them", s.Failed, s.Jobs-s.Resumed)
	}
	return nil
}

// dryRun prints the jobs, which of them --out already holds, and what they would
// cost.
func dryRun(stdout io.Writer, a reflectArgs, plan *trainer.Plan, jobs []*trainer.Job, prompts trainer.Prompts) error {
	done := map[string]bool{}
	if a.out != "" {
		var err error
		if done, err = trainer.DoneKeys(a.out); err != nil {
			return fmt.Errorf("train reflect: --out: %w", err)
		}
	}
	return trainer.WritePlan(stdout, plan, jobs, done, prompts, a.maxSteps, a.maxToolBytes)
}
