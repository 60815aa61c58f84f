package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/trainer"
)

func trainCmd(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) (string, bool)) error {
	if len(args) == 0 {
		return usagef("train: want a subcommand: reflect, sft, grpo, dpo, playbook, merge or serve-config")
	}
	var err error
	switch args[0] {
	case "reflect":
		err = trainReflect(ctx, args[1:], stdout, stderr, getenv)
	case "sft":
		err = trainSFT(ctx, args[1:], stdout, stderr, getenv)
	case "grpo":
		err = trainGRPO(ctx, args[1:], stdout, stderr, getenv)
	case "dpo":
		err = trainDPO(ctx, args[1:], stdout, stderr, getenv)
	case "playbook":
		err = trainPlaybook(ctx, args[1:], stdout, stderr, getenv)
	case "merge":
		err = trainMerge(ctx, args[1:], stdout, stderr)
	case "serve-config":
		err = trainServeConfig(ctx, args[1:], stdout, stderr, getenv)
	default:
		return usagef("train: unknown subcommand %q: want reflect, sft, grpo, dpo, playbook, merge or serve-config", args[0])
	}
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

type reflectArgs struct {
	from, out, model, baseURL, apiKeyEnv, region string
	minRuns, subsets, subsetSize, limit          int
	seed                                         int64
	mixedOnly, dryRun                            bool
	maxSteps, maxToolBytes, maxTokens            int
	temperature                                  float64
	concurrency, retries                         int
	backoff, timeout                             time.Duration
	systemPrompt, userPrompt, workDir, progress  string
}

func parseReflectArgs(args []string, stderr io.Writer) (reflectArgs, error) {
	var a reflectArgs
	f := newFlagSet("train reflect", stderr)
	f.StringVar(&a.from, "from", defaultReplayURI, "replay URI to read (file://, redis://, s3://)")
	f.StringVar(&a.out, "out", "", "JSON Lines file the guidance is appended to; jobs already in it are skipped (required)")
	f.StringVar(&a.model, "model", "", "reflection model: openai/NAME or bedrock/MODEL_ID (required unless --dry-run)")
	f.StringVar(&a.baseURL, "base-url", "", "OpenAI-compatible base URL (default https://api.openai.com/v1; vLLM: http://host:8000/v1), or the Bedrock endpoint")
	f.StringVar(&a.apiKeyEnv, "api-key-env", "OPENAI_API_KEY", "environment variable holding the OpenAI API key (openai/ only)")
	f.StringVar(&a.region, "region", "", "AWS region for bedrock/ (default the AWS config's, else us-east-1)")
	f.IntVar(&a.minRuns, "min-runs", 2, "keep tasks with at least this many rewarded runs")
	f.IntVar(&a.subsets, "subsets", 1, "distinct subsets of runs reflected on per task, at most")
	f.IntVar(&a.subsetSize, "subset-size", 3, "runs per subset (all of a task's runs when it has fewer)")
	f.Int64Var(&a.seed, "seed", 0, "seed of the subset draw: the same seed gives the same jobs")
	f.BoolVar(&a.mixedOnly, "mixed-only", false, "only tasks whose runs both succeeded and failed")
	f.IntVar(&a.limit, "limit", 0, "only the first N jobs of the plan (mixed tasks come first); 0 = all")
	f.IntVar(&a.maxSteps, "max-steps", trainer.DefaultMaxSteps, "model turns per job; the last one must answer")
	f.IntVar(&a.maxToolBytes, "max-tool-bytes", trainer.DefaultMaxToolBytes, "a tool result is cut at this many bytes")
	f.IntVar(&a.maxTokens, "max-tokens", 4096, "most tokens per model answer; 0 = the server's default")
	f.Float64Var(&a.temperature, "temperature", -1, "sampling temperature; -1 = the server's default")
	f.IntVar(&a.concurrency, "concurrency", trainer.DefaultConcurrency, "jobs run at once")
	f.IntVar(&a.retries, "retries", 5, "retries of a model call on 408/409/429/5xx, timeouts and connection errors")
	f.DurationVar(&a.backoff, "backoff", time.Second, "first retry wait, doubled each retry (a retry-after header wins)")
	f.DurationVar(&a.timeout, "timeout", 5*time.Minute, "deadline of one model call")
	f.StringVar(&a.systemPrompt, "system-prompt", "", "file replacing the built-in system prompt")
	f.StringVar(&a.userPrompt, "user-prompt", "", "file replacing the built-in user prompt ({{task}}, {{runs}}, {{max_steps}} are filled in)")
	f.StringVar(&a.workDir, "work-dir", "", "where the per-job sandboxes are made (default the system temp dir)")
	f.StringVar(&a.progress, "progress", "auto", "auto (a bar on a terminal, else lines), bar, lines or off")
	f.BoolVar(&a.dryRun, "dry-run", false, "print the jobs and a token estimate; call no model")
	pos, err := parseInterleaved(f, args)
	if err != nil {
		return a, err
	}
	if len(pos) > 0 {
		return a, usagef("train reflect: unexpected argument %q", pos[0])
	}
	switch {
	case a.out == "" && !a.dryRun:
		return a, usagef("train reflect: --out is required")
	case a.model == "" && !a.dryRun:
		return a, usagef("train reflect: --model is required: openai/NAME or bedrock/MODEL_ID")
	case a.minRuns < 1:
		return a, usagef("train reflect: --min-runs %d: want 1 or more", a.minRuns)
	case a.subsets < 1:
		return a, usagef("train reflect: --subsets %d: want 1 or more", a.subsets)
	case a.subsetSize < 1:
		return a, usagef("train reflect: --subset-size %d: want 1 or more", a.subsetSize)
	case a.limit < 0:
		return a, usagef("train reflect: --limit %d: want 0 (all) or more", a.limit)
	case a.maxSteps < 1:
		return a, usagef("train reflect: --max-steps %d: want 1 or more", a.maxSteps)
	case a.maxToolBytes < 1024:
		return a, usagef("train reflect: --max-tool-bytes %d: want 1024 or more", a.maxToolBytes)
	case a.maxTokens < 0:
		return a, usagef("train reflect: --max-tokens %d: want 0 (the server's default) or more", a.maxTokens)
	case a.temperature != -1 && (a.temperature < 0 || a.temperature > 2):
		return a, usagef("train reflect: --temperature %g: want -1 (the server's default) or 0 to 2", a.temperature)
	case a.concurrency < 1:
		return a, usagef("train reflect: --concurrency %d: want 1 or more", a.concurrency)
	case a.retries < 0:
		return a, usagef("train reflect: --retries %d: want 0 or more", a.retries)
	case a.backoff <= 0 || a.timeout <= 0:
		return a, usagef("train reflect: --backoff and --timeout must be positive durations")
	case a.progress != "auto" && a.progress != trainer.ProgressBar && a.progress != trainer.ProgressLines && a.progress != trainer.ProgressOff:
		return a, usagef("train reflect: --progress %q: want auto, bar, lines or off", a.progress)
	}
	if a.model != "" {
		if _, _, err := trainer.ParseModel(a.model); err != nil {
			return a, usagef("train reflect: --model: %v", err)
		}
	}
	if a.out == "-" {
		return a, usagef("train reflect: --out must be a file: a rerun reads it to skip the jobs done")
	}
	if a.out != "" {
		if dir := filepath.Dir(a.out); !isDir(dir) {
			return a, usagef("train reflect: --out %s: directory %s does not exist", a.out, dir)
		}
		if st, err := os.Stat(a.out); err == nil && st.IsDir() {
			return a, usagef("train reflect: --out %s is a directory", a.out)
		}
	}
	if a.workDir != "" && !isDir(a.workDir) {
		return a, usagef("train reflect: --work-dir %s is not a directory", a.workDir)
	}
	return a, nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
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
			return p, usagef("train reflect: %s: %v", o.flag, err)
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
			return mo, usagef("%s: $%s is not set: the OpenAI API needs a key (or give --base-url of a server that does not)", cmd, apiKeyEnv)
		}
	}
	return mo, nil
}

func trainReflect(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) (string, bool)) error {
	a, err := parseReflectArgs(args, stderr)
	if err != nil {
		return err
	}
	prompts, err := a.prompts()
	if err != nil {
		return err
	}
	mo, err := modelOptions("train reflect", a.baseURL, a.region, a.apiKeyEnv, getenv, a.dryRun, a.model)
	if err != nil {
		return err
	}
	b, err := readBuffer(ctx, "train reflect", a.from)
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
		return fmt.Errorf("train reflect: no job: no task of %s has %d rewarded runs and a task text (%s)", replay.Redact(a.from), a.minRuns, planCounts(plan))
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
		Retry: trainer.RetryPolicy{Retries: a.retries, Base: a.backoff, Timeout: a.timeout},
	}
	if a.retries == 0 {
		o.Retry.Retries = -1 // RetryPolicy's zero means the default
	}
	if a.temperature >= 0 {
		o.Temperature = &a.temperature
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

func planCounts(p *trainer.Plan) string {
	return fmt.Sprintf("%d tasks in the buffer; left out: %d with too few rewarded runs, %d without a task text, %d by --mixed-only", p.Tasks, p.TooFew, p.NoText, p.Uniform)
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
	tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "job\ttask\tmixed\truns (reward)\test. input\t")
	var files, input int64
	pending := 0
	for i, j := range jobs {
		var runs []string
		for _, ep := range j.Runs {
			runs = append(runs, fmt.Sprintf("%s (%g)", ep.ID, *ep.Reward))
		}
		f, in := trainer.Estimate(j, prompts, a.maxSteps, a.maxToolBytes)
		state := ""
		if done[j.Key] {
			state = "done"
		} else {
			pending++
			files += f
			input += in
		}
		mixed := "no"
		if j.Mixed {
			mixed = "yes"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t~%s\t%s\n", i+1, j.TaskID, mixed, strings.Join(runs, " "), trainer.FormatTokens(in), state)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\n%d jobs over %d tasks (%d with mixed outcomes); %d already in --out, %d to run\n",
		len(jobs), plan.Eligible, plan.Mixed, len(jobs)-pending, pending)
	fmt.Fprintf(stdout, "%s\n", planCounts(plan))
	fmt.Fprintf(stdout, "the runs to reflect on hold ~%s tokens; estimated model input ~%s tokens (each job reading every run once in %d-byte pieces, re-sending its conversation each turn, at most %d turns), plus a few hundred output tokens a turn\n",
		trainer.FormatTokens(files), trainer.FormatTokens(input), a.maxToolBytes, a.maxSteps)
	fmt.Fprintf(stdout, "prompt version %s\n", prompts.Version())
	return nil
}
