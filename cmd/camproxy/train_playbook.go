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
	"time"

	"github.com/camproxy/camproxy/learn"
	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/trainer"
)

type playbookArgs struct {
	from, out, model, reflectorModel, mutatorModel, baseURL, apiKeyEnv, region string
	seed, rolloutURL, rolloutTokenEnv, workDir, progress                       string
	iterations, batchSize, group, rolloutConcurrency                           int
	sampleSeed                                                                 uint64
	val                                                                        float64
	prune, maxEntries, maxContent, graduate, evict                             int
	maxTurns, maxToolBytes, maxTokens, retries                                 int
	temperature                                                                float64
	backoff, timeout, rolloutTimeout                                           time.Duration
	dryRun                                                                     bool
}

func parsePlaybookArgs(args []string, stderr io.Writer) (playbookArgs, error) {
	var a playbookArgs
	const cmd = "train playbook"
	f := newFlagSet(cmd, stderr)
	f.StringVar(&a.from, "from", defaultReplayURI, "replay URI to read (file://, redis://, s3://)")
	f.StringVar(&a.out, "out", "", "directory of the versions, manifest.json, playbook.json and journal.jsonl (required)")
	f.StringVar(&a.model, "model", "", "optimiser model: openai/NAME or bedrock/MODEL_ID (required unless --dry-run)")
	f.StringVar(&a.reflectorModel, "reflector-model", "", "the reflector's model (default --model)")
	f.StringVar(&a.mutatorModel, "mutator-model", "", "the mutator's model (default --model)")
	f.StringVar(&a.baseURL, "base-url", "", "OpenAI-compatible base URL (default https://api.openai.com/v1), or the Bedrock endpoint")
	f.StringVar(&a.apiKeyEnv, "api-key-env", "OPENAI_API_KEY", "environment variable holding the OpenAI API key (openai/ only)")
	f.StringVar(&a.region, "region", "", "AWS region for bedrock/ (default the AWS config's, else us-east-1)")
	f.StringVar(&a.seed, "seed", "", "the seed playbook, v1: RCL JSON or ACE text (default an empty playbook)")
	f.IntVar(&a.iterations, "iterations", learn.DefaultIterations, "reflect → mutate iterations")
	f.IntVar(&a.batchSize, "batch-size", learn.DefaultBatchSize, "items (a task's failure, paired with a success) per batch")
	f.Uint64Var(&a.sampleSeed, "sample-seed", 0, "seed of the batch draw and the validation split")
	f.StringVar(&a.rolloutURL, "rollout-url", "", "camproxy's admin base URL: score each version through POST /v1/rollouts")
	f.StringVar(&a.rolloutTokenEnv, "rollout-token-env", "CAMPROXY_ADMIN_TOKEN", "environment variable holding the admin token for --rollout-url (unset = none)")
	f.DurationVar(&a.rolloutTimeout, "rollout-timeout", 10*time.Minute, "timeout_s of one rollout")
	f.IntVar(&a.rolloutConcurrency, "rollout-concurrency", 4, "rollouts at once")
	f.Float64Var(&a.val, "val", learn.DefaultVal, "fraction of the tasks held out to score versions (with --rollout-url)")
	f.IntVar(&a.group, "group", learn.DefaultGroup, "rollouts per task (with --rollout-url)")
	f.IntVar(&a.prune, "prune", playbook.DefaultPrune, "remove entries whose harmful − helpful reaches this; 0 = never")
	f.IntVar(&a.maxEntries, "max-entries", playbook.DefaultMaxEntries, "at most this many entries (the lowest helpful − harmful go, oldest first); 0 = no bound")
	f.IntVar(&a.maxContent, "max-content", playbook.DefaultMaxContent, "longest entry content in characters")
	f.IntVar(&a.graduate, "graduate", learn.DefaultGraduate, "failure replay: a failed task leaves the queue after passing this many rollouts")
	f.IntVar(&a.evict, "evict", learn.DefaultEvict, "failure replay: … or after failing this many times (reflections without --rollout-url)")
	f.IntVar(&a.maxTurns, "max-turns", learn.DefaultMaxTurns, "model turns per role and iteration; the last one is asked to finish")
	f.IntVar(&a.maxToolBytes, "max-tool-bytes", trainer.DefaultMaxToolBytes, "a sandbox tool result is cut at this many bytes")
	f.IntVar(&a.maxTokens, "max-tokens", 4096, "most tokens per model answer; 0 = the server's default")
	f.Float64Var(&a.temperature, "temperature", -1, "sampling temperature; -1 = the server's default")
	f.IntVar(&a.retries, "retries", 5, "retries of a model call on 408/409/429/5xx, timeouts and connection errors")
	f.DurationVar(&a.backoff, "backoff", time.Second, "first retry wait, doubled each retry (a retry-after header wins)")
	f.DurationVar(&a.timeout, "timeout", 5*time.Minute, "deadline of one model call")
	f.StringVar(&a.workDir, "work-dir", "", "where the per-step sandboxes are made (default the system temp dir)")
	f.StringVar(&a.progress, "progress", "auto", "auto or lines (a line per iteration on stderr), or off")
	f.BoolVar(&a.dryRun, "dry-run", false, "print the plan and a token estimate; call nothing")
	pos, err := parseInterleaved(f, args)
	if err != nil {
		return a, err
	}
	if len(pos) > 0 {
		return a, usagef("%s: unexpected argument %q", cmd, pos[0])
	}
	set := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	switch {
	case a.out == "" && !a.dryRun:
		return a, usagef("%s: --out is required", cmd)
	case a.model == "" && !a.dryRun && (a.reflectorModel == "" || a.mutatorModel == ""):
		return a, usagef("%s: --model is required: openai/NAME or bedrock/MODEL_ID", cmd)
	case a.iterations < 1:
		return a, usagef("%s: --iterations %d: want 1 or more", cmd, a.iterations)
	case a.batchSize < 1:
		return a, usagef("%s: --batch-size %d: want 1 or more", cmd, a.batchSize)
	case a.rolloutURL == "" && (set["val"] || set["group"] || set["rollout-timeout"] || set["rollout-concurrency"]):
		for _, name := range []string{"val", "group", "rollout-timeout", "rollout-concurrency"} {
			if set[name] {
				return a, usagef("%s: --%s needs --rollout-url: versions are scored through POST /v1/rollouts", cmd, name)
			}
		}
	case a.val <= 0 || a.val >= 1:
		return a, usagef("%s: --val %g: want a fraction between 0 and 1", cmd, a.val)
	case a.group < 1:
		return a, usagef("%s: --group %d: want 1 or more", cmd, a.group)
	case a.rolloutConcurrency < 1:
		return a, usagef("%s: --rollout-concurrency %d: want 1 or more", cmd, a.rolloutConcurrency)
	case a.rolloutTimeout <= 0:
		return a, usagef("%s: --rollout-timeout must be a positive duration", cmd)
	case a.prune < 0:
		return a, usagef("%s: --prune %d: want 0 (never) or more", cmd, a.prune)
	case a.maxEntries < 0:
		return a, usagef("%s: --max-entries %d: want 0 (no bound) or more", cmd, a.maxEntries)
	case a.maxContent < 1:
		return a, usagef("%s: --max-content %d: want 1 or more", cmd, a.maxContent)
	case a.graduate < 1:
		return a, usagef("%s: --graduate %d: want 1 or more", cmd, a.graduate)
	case a.evict < 1:
		return a, usagef("%s: --evict %d: want 1 or more", cmd, a.evict)
	case a.maxTurns < 1:
		return a, usagef("%s: --max-turns %d: want 1 or more", cmd, a.maxTurns)
	case a.maxToolBytes < 1024:
		return a, usagef("%s: --max-tool-bytes %d: want 1024 or more", cmd, a.maxToolBytes)
	case a.maxTokens < 0:
		return a, usagef("%s: --max-tokens %d: want 0 (the server's default) or more", cmd, a.maxTokens)
	case a.temperature != -1 && (a.temperature < 0 || a.temperature > 2):
		return a, usagef("%s: --temperature %g: want -1 (the server's default) or 0 to 2", cmd, a.temperature)
	case a.retries < 0:
		return a, usagef("%s: --retries %d: want 0 or more", cmd, a.retries)
	case a.backoff <= 0 || a.timeout <= 0:
		return a, usagef("%s: --backoff and --timeout must be positive durations", cmd)
	case a.progress != "auto" && a.progress != trainer.ProgressLines && a.progress != trainer.ProgressOff:
		return a, usagef("%s: --progress %q: want auto, lines or off", cmd, a.progress)
	}
	if a.reflectorModel == "" {
		a.reflectorModel = a.model
	}
	if a.mutatorModel == "" {
		a.mutatorModel = a.model
	}
	for _, m := range []struct{ flag, spec string }{{"--model", a.model}, {"--reflector-model", a.reflectorModel}, {"--mutator-model", a.mutatorModel}} {
		if m.spec == "" {
			continue
		}
		if _, _, err := trainer.ParseModel(m.spec); err != nil {
			return a, usagef("%s: %s: %v", cmd, m.flag, err)
		}
	}
	if a.rolloutURL != "" && !strings.HasPrefix(a.rolloutURL, "http://") && !strings.HasPrefix(a.rolloutURL, "https://") {
		return a, usagef("%s: --rollout-url %q: want camproxy's admin base URL, http://HOST:PORT", cmd, a.rolloutURL)
	}
	if a.out != "" {
		if st, err := os.Stat(a.out); err == nil && !st.IsDir() {
			return a, usagef("%s: --out %s is not a directory", cmd, a.out)
		}
		if dir := filepath.Dir(filepath.Clean(a.out)); !isDir(dir) {
			return a, usagef("%s: --out %s: directory %s does not exist", cmd, a.out, dir)
		}
	}
	if a.workDir != "" && !isDir(a.workDir) {
		return a, usagef("%s: --work-dir %s is not a directory", cmd, a.workDir)
	}
	return a, nil
}

func (a playbookArgs) seedPlaybook() (*playbook.Playbook, error) {
	if a.seed == "" {
		return &playbook.Playbook{}, nil
	}
	data, err := os.ReadFile(a.seed)
	if err != nil {
		return nil, usagef("train playbook: --seed: %v", err)
	}
	pb, err := playbook.Parse(data)
	if err != nil {
		return nil, usagef("train playbook: --seed %s: %v", a.seed, err)
	}
	return pb, nil
}

func (a playbookArgs) options(episodes []*replay.Episode, seed *playbook.Playbook) learn.TrainOptions {
	o := learn.TrainOptions{
		Episodes: episodes, Seed: seed,
		Iterations: a.iterations, BatchSize: a.batchSize, SampleSeed: a.sampleSeed,
		Graduate: a.graduate, Evict: a.evict,
		Label: "reflector=" + a.reflectorModel + " mutator=" + a.mutatorModel,
		Step: learn.StepOptions{
			Limits:   playbook.Limits{Prune: a.prune, MaxEntries: a.maxEntries, MaxContent: a.maxContent},
			MaxTurns: a.maxTurns, MaxToolBytes: a.maxToolBytes, MaxTokens: a.maxTokens, WorkDir: a.workDir,
			Retry: trainer.RetryPolicy{Retries: a.retries, Base: a.backoff, Timeout: a.timeout},
		},
	}
	if a.retries == 0 {
		o.Step.Retry.Retries = -1 // RetryPolicy's zero means the default
	}
	if a.temperature >= 0 {
		t := a.temperature
		o.Step.Temperature = &t
	}
	if a.rolloutURL != "" {
		o.Val, o.Group, o.RolloutConcurrency = a.val, a.group, a.rolloutConcurrency
	}
	return o
}

func trainPlaybook(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) (string, bool)) error {
	a, err := parsePlaybookArgs(args, stderr)
	if err != nil {
		return err
	}
	seed, err := a.seedPlaybook()
	if err != nil {
		return err
	}
	mo, err := modelOptions("train playbook", a.baseURL, a.region, a.apiKeyEnv, getenv, a.dryRun, a.reflectorModel, a.mutatorModel)
	if err != nil {
		return err
	}
	b, err := readBuffer(ctx, "train playbook", a.from)
	if err != nil {
		return err
	}
	o := a.options(b.Episodes, seed)
	if a.rolloutURL != "" {
		token, _ := getenv(a.rolloutTokenEnv)
		o.Rollouts = &learn.HTTPRollouts{Base: a.rolloutURL, Token: token, Timeout: a.rolloutTimeout, Retries: 2}
	}
	plan := learn.MakePlan(o)
	if plan.Episodes == 0 {
		return fmt.Errorf("train playbook: %s holds no rewarded episode to learn from", replay.Redact(a.from))
	}
	if a.rolloutURL != "" && len(plan.Val) == 0 {
		return usagef("train playbook: --val %g leaves no validation task (the buffer has %d tasks)", a.val, len(plan.Train))
	}
	if a.dryRun {
		return playbookDryRun(stdout, a, o, plan)
	}

	store, err := playbook.NewDirStore(a.out)
	if err != nil {
		return fmt.Errorf("train playbook: --out: %w", err)
	}
	journal, err := learn.OpenJournal(filepath.Join(a.out, learn.JournalName), learn.Fingerprint(o))
	if errors.Is(err, learn.ErrJournalMismatch) {
		return usagef("train playbook: --out %s: %v", a.out, err)
	}
	if err != nil {
		return fmt.Errorf("train playbook: %w", err)
	}
	defer journal.Close()
	progress := io.Discard
	if a.progress != trainer.ProgressOff {
		progress = stderr
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if journal.Torn() > 0 {
		log.Warn("cut a torn last line left by an interrupted run", "journal", filepath.Join(a.out, learn.JournalName), "bytes", journal.Torn())
	}
	refl, err := trainer.NewModel(ctx, a.reflectorModel, mo)
	if err != nil {
		return fmt.Errorf("train playbook: %w", err)
	}
	mut := refl
	if a.mutatorModel != a.reflectorModel {
		if mut, err = trainer.NewModel(ctx, a.mutatorModel, mo); err != nil {
			return fmt.Errorf("train playbook: %w", err)
		}
	}
	o.Models = learn.Models{Reflector: refl, Mutator: mut}
	o.Store, o.Journal, o.Progress = store, journal, progress
	o.Step.Logger = log
	start := time.Now()
	res, err := learn.Train(ctx, o)
	if res != nil {
		fmt.Fprintln(stdout, playbookSummary(a, res, time.Since(start)))
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, learn.ErrJournalMismatch):
		return usagef("train playbook: --out %s: %v", a.out, err)
	case ctx.Err() != nil:
		return fmt.Errorf("train playbook: interrupted; run the same command again to resume (answers received are in %s)", filepath.Join(a.out, learn.JournalName))
	}
	return fmt.Errorf("train playbook: %w (the answers received are kept: once that is fixed, the same command resumes)", err)
}

func playbookSummary(a playbookArgs, r *learn.TrainResult, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "train playbook: %d iterations, %d versions in %s", r.Iterations, len(r.Versions), a.out)
	if r.Best > 0 {
		if r.Scored {
			for _, v := range r.Versions {
				if v.Version == r.Best && v.Score != nil {
					fmt.Fprintf(&b, "; playbook.json is v%d (best mean reward %.4f over %d runs)", r.Best, *v.Score, v.Runs)
				}
			}
		} else {
			fmt.Fprintf(&b, "; playbook.json is v%d (the last; unscored)", r.Best)
		}
	}
	fmt.Fprintf(&b, "; %d model calls (%d answered from the journal), tokens %s in, %s out",
		r.Calls, r.Replayed, trainer.FormatTokens(r.Usage.Input), trainer.FormatTokens(r.Usage.Output))
	if r.Scored {
		fmt.Fprintf(&b, "; %d rollouts (%d from the journal); replay: %d graduated, %d evicted", r.Rollouts, r.RolloutsReplayed, r.Graduated, r.Evicted)
	}
	fmt.Fprintf(&b, "; %s", took.Round(time.Millisecond))
	return b.String()
}

// playbookDryRun prints the plan and a token estimate, and calls nothing.
func playbookDryRun(stdout io.Writer, a playbookArgs, o learn.TrainOptions, plan *learn.Plan) error {
	fmt.Fprintf(stdout, "plan: %d iterations of up to %d items; %d training tasks (%d rewarded episodes, %d failures)",
		a.iterations, a.batchSize, len(plan.Train), plan.Episodes, plan.Failures)
	if a.rolloutURL != "" {
		fmt.Fprintf(stdout, "; %d validation tasks (--val %g) scored with %d run(s) each per version: %s",
			len(plan.Val), a.val, a.group, strings.Join(plan.Val, " "))
	} else {
		fmt.Fprint(stdout, "; no scoring (no --rollout-url): every version is kept, the last becomes playbook.json")
	}
	fmt.Fprintln(stdout)
	var total int64
	for _, it := range plan.Iterations {
		var parts []string
		for i, item := range it.Items {
			s := ""
			switch {
			case item.Failure != nil && item.Success != nil:
				s = fmt.Sprintf("%s (failure %s, success %s)", item.Failure.TaskID, item.Failure.ID, item.Success.ID)
			case item.Failure != nil:
				s = fmt.Sprintf("%s (failure %s)", item.Failure.TaskID, item.Failure.ID)
			default:
				s = fmt.Sprintf("%s (success %s)", item.Success.TaskID, item.Success.ID)
			}
			if i < it.Replayed {
				s = "replay " + s
			}
			parts = append(parts, s)
		}
		_, in := learn.EstimateTokens(it.Items, o.Seed, o.Step)
		total += in
		fmt.Fprintf(stdout, "iteration %d: %d items (%d replayed), ~%s input tokens: %s\n", it.Iteration, len(it.Items), it.Replayed, trainer.FormatTokens(in), strings.Join(parts, "; "))
	}
	fmt.Fprintf(stdout, "estimated model input ~%s tokens over %d iterations (reflector and mutator each reading every run once in %d-byte pieces, re-sending the conversation each turn, at most %d turns), plus a few hundred output tokens a turn\n",
		trainer.FormatTokens(total), a.iterations, a.maxToolBytes, a.maxTurns)
	if a.rolloutURL != "" {
		fmt.Fprintf(stdout, "rollouts: at most %d to score versions (v1 and one per iteration, %d tasks × %d), plus %d runs per replayed or failed task per iteration; replays depend on their outcomes (the plan above assumes none graduates)\n",
			(a.iterations+1)*len(plan.Val)*a.group, len(plan.Val), a.group, a.group)
	}
	fmt.Fprintln(stdout, "dry run: no model and no rollout was called")
	return nil
}
