package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	cobracli "github.com/camproxy/camproxy/internal/cli"
	"github.com/camproxy/camproxy/learn"
	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/playbook/storage"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/replay/location"
	"github.com/camproxy/camproxy/trainer"
)

type playbookArgs struct {
	in bufferFlags
	callFlags
	out, model, reflectorModel, mutatorModel             string
	seed, rolloutURL, rolloutTokenEnv, workDir, progress string
	iterations, batchSize, group, rolloutConcurrency     int
	sampleSeed                                           uint64
	val                                                  float64
	prune, maxEntries, maxContent, graduate, evict       int
	maxTurns, maxToolBytes                               int
	rolloutTimeout                                       time.Duration
	dryRun                                               bool

	changed func(flag string) bool // whether the command line set a flag
	bounds  cobracli.Bounds        // the least values of the playbook's, the replay's and the loop's integer flags
}

func (c *cli) trainPlaybookCmd() *cobra.Command {
	var a playbookArgs
	cmd := &cobra.Command{
		Use:   "playbook --model openai/NAME|bedrock/MODEL_ID --out DIR",
		Short: "RCL's reflect → mutate loop: versioned playbooks learned from the replay buffer",
		Long: `Learn a playbook offline (RCL): each iteration a reflector reads a batch of failed
runs (each paired with a success of the same task) and a mutator edits the
playbook; every version is written (playbook.vN.json, manifest.json) and the best
becomes playbook.json. With --rollout-url each version is scored by agent runs
through camproxy on held-out tasks. Model answers are journaled, so an
interrupted run resumes where it stopped.`,
		Example: `  camproxy train playbook --model openai/gpt-4o --out playbooks
  camproxy train playbook --model openai/gpt-4o --out playbooks --rollout-url http://127.0.0.1:9090 --val 0.2 --group 3
  camproxy train playbook --dry-run`,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) {
			p.NoArgs(args)
			a.check(p, args)
		}),
		RunE: func(cmd *cobra.Command, _ []string) error { return c.trainPlaybook(cmd.Context(), a) },
	}
	f := cmd.Flags()
	a.callFlags.define(f)
	f.StringVar(&a.out, "out", "", "directory of the versions, manifest.json, playbook.json and journal.jsonl (required)")
	f.StringVar(&a.model, "model", "", "optimiser model: openai/NAME or bedrock/MODEL_ID (required unless --dry-run)")
	f.StringVar(&a.reflectorModel, "reflector-model", "", "the reflector's model (default --model)")
	f.StringVar(&a.mutatorModel, "mutator-model", "", "the mutator's model (default --model)")
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
	a.bounds.IntVar(f, &a.prune, "prune", playbook.DefaultPrune, 0, "0 (never) or more", "remove entries whose harmful − helpful reaches this; 0 = never")
	a.bounds.IntVar(f, &a.maxEntries, "max-entries", playbook.DefaultMaxEntries, 0, "0 (no bound) or more", "at most this many entries (the lowest helpful − harmful go, oldest first); 0 = no bound")
	a.bounds.IntVar(f, &a.maxContent, "max-content", playbook.DefaultMaxContent, 1, "1 or more", "longest entry content in characters")
	a.bounds.IntVar(f, &a.graduate, "graduate", learn.DefaultGraduate, 1, "1 or more", "failure replay: a failed task leaves the queue after passing this many rollouts")
	a.bounds.IntVar(f, &a.evict, "evict", learn.DefaultEvict, 1, "1 or more", "failure replay: a failed task leaves the queue after failing this many times (reflections without --rollout-url)")
	a.bounds.IntVar(f, &a.maxTurns, "max-turns", learn.DefaultMaxTurns, 1, "1 or more", "model turns per role and iteration; the last one is asked to finish")
	a.bounds.IntVar(f, &a.maxToolBytes, "max-tool-bytes", trainer.DefaultMaxToolBytes, 1024, "1024 or more", "a sandbox tool result is cut at this many bytes")
	f.StringVar(&a.workDir, "work-dir", "", "where the per-step sandboxes are made (default the system temp dir)")
	cobracli.ChoiceVar(f, &a.progress, "progress", "auto", "auto or lines (a line per iteration on stderr), or off", "auto", trainer.ProgressLines, trainer.ProgressOff)
	f.BoolVar(&a.dryRun, "dry-run", false, "print the plan and a token estimate; call nothing")
	a.changed = func(name string) bool { return f.Changed(name) }
	a.in.define(f) // after --progress: the read reports through it
	return cmd
}

// check lists every problem of the flags.
func (a *playbookArgs) check(p *cobracli.Problems, _ []string) {
	a.in.progress = a.progress
	a.in.check(p)
	a.callFlags.check(p)
	if a.out == "" && !a.dryRun {
		p.Add("--out is required")
	}
	if a.model == "" && !a.dryRun && (a.reflectorModel == "" || a.mutatorModel == "") {
		p.Add("--model is required: openai/NAME or bedrock/MODEL_ID")
	}
	p.AtLeast("--iterations", a.iterations, 1, "1 or more")
	p.AtLeast("--batch-size", a.batchSize, 1, "1 or more")
	if a.rolloutURL == "" {
		for _, name := range []string{"val", "group", "rollout-timeout", "rollout-concurrency"} {
			if a.changed(name) {
				p.Add("--%s needs --rollout-url: versions are scored through POST /v1/rollouts", name)
			}
		}
	} else if !strings.HasPrefix(a.rolloutURL, "http://") && !strings.HasPrefix(a.rolloutURL, "https://") {
		p.Add("--rollout-url %q: want camproxy's admin base URL, http://HOST:PORT", a.rolloutURL)
	}
	if a.val <= 0 || a.val >= 1 {
		p.Add("--val %g: want a fraction between 0 and 1", a.val)
	}
	p.AtLeast("--group", a.group, 1, "1 or more")
	p.AtLeast("--rollout-concurrency", a.rolloutConcurrency, 1, "1 or more")
	if a.rolloutTimeout <= 0 {
		p.Add("--rollout-timeout %v: want a positive duration", a.rolloutTimeout)
	}
	a.bounds.Check(p) // --prune … --max-tool-bytes
	if a.reflectorModel == "" {
		a.reflectorModel = a.model
	}
	if a.mutatorModel == "" {
		a.mutatorModel = a.model
	}
	checkModel(p, "--model", a.model)
	if a.reflectorModel != a.model {
		checkModel(p, "--reflector-model", a.reflectorModel)
	}
	if a.mutatorModel != a.model {
		checkModel(p, "--mutator-model", a.mutatorModel)
	}
	if a.out != "" {
		if st, err := os.Stat(a.out); err == nil && !st.IsDir() {
			p.Add("--out %s is not a directory", a.out)
		} else {
			p.OutDir("--out", filepath.Clean(a.out))
		}
	}
	p.Dir("--work-dir", a.workDir)
}

func (a playbookArgs) seedPlaybook() (*playbook.Playbook, error) {
	if a.seed == "" {
		return &playbook.Playbook{}, nil
	}
	data, err := os.ReadFile(a.seed)
	if err != nil {
		return nil, cobracli.Usagef("train playbook: --seed: %v", err)
	}
	pb, err := playbook.Parse(data)
	if err != nil {
		return nil, cobracli.Usagef("train playbook: --seed %s: %v", a.seed, err)
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
			Retry: a.retry(), Temperature: a.temperatureOrDefault(),
		},
	}
	if a.rolloutURL != "" {
		o.Val, o.Group, o.RolloutConcurrency = a.val, a.group, a.rolloutConcurrency
	}
	return o
}

func (c *cli) trainPlaybook(ctx context.Context, a playbookArgs) error {
	stdout, stderr, getenv := c.stdout, c.stderr, c.getenv
	seed, err := a.seedPlaybook()
	if err != nil {
		return err
	}
	mo, err := modelOptions("train playbook", a.baseURL, a.region, a.apiKeyEnv, getenv, a.dryRun, a.reflectorModel, a.mutatorModel)
	if err != nil {
		return err
	}
	b, err := a.in.read(ctx, "train playbook", stderr)
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
		return fmt.Errorf("train playbook: %s holds no rewarded episode to learn from", location.Redact(a.in.from))
	}
	if a.rolloutURL != "" && len(plan.Val) == 0 {
		return cobracli.Usagef("train playbook: --val %g leaves no validation task (the buffer has %d tasks)", a.val, len(plan.Train))
	}
	if a.dryRun {
		return learn.WritePlan(stdout, o, plan)
	}

	store, err := storage.NewDirStore(a.out)
	if err != nil {
		return fmt.Errorf("train playbook: --out: %w", err)
	}
	journal, err := learn.OpenJournal(filepath.Join(a.out, learn.JournalName), learn.Fingerprint(o))
	if errors.Is(err, learn.ErrJournalMismatch) {
		return cobracli.Usagef("train playbook: --out %s: %v", a.out, err)
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
		fmt.Fprintln(stdout, res.Summary(a.out, time.Since(start)))
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, learn.ErrJournalMismatch):
		return cobracli.Usagef("train playbook: --out %s: %v", a.out, err)
	case ctx.Err() != nil:
		return fmt.Errorf("train playbook: interrupted; run the same command again to resume (answers received are in %s)", filepath.Join(a.out, learn.JournalName))
	}
	return fmt.Errorf("train playbook: %w (the answers received are kept: once that is fixed, the same command resumes)", err)
}
