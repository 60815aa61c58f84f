package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/playbook/storage"
)

// Lab is everything camproxy talks to in the demo, on loopback: the scripted agent
// upstream and the scripted optimiser models, with a directory for camproxy's data.
type Lab struct {
	Env       *Env
	Agent     *testkit.Upstream // the OpenAI-compatible upstream that plays the agent
	Optimiser *Optimiser        // the learner's reflector and mutator
	Dir       string            // replay buffer, spool, playbook versions, seed playbook
	// Store is learn.store, where the versions go; "" = StoreDir().
	Store string
}

// NewLab starts the fakes for env; camproxy's data goes under dir.
func NewLab(env *Env, dir string) *Lab {
	agent := testkit.NewUpstream()
	agent.Configure(func(u *testkit.Upstream) { u.Reply = env.AgentReply })
	return &Lab{Env: env, Agent: agent, Optimiser: NewOptimiser(), Dir: dir}
}

// Close stops the fakes.
func (l *Lab) Close() {
	l.Agent.Close()
	l.Optimiser.Close()
}

// Arms of the demo experiment.
const (
	BaselineArm = "baseline" // no context: the control
	ChampionArm = "champion" // the seed playbook, where learning starts
)

// SeedRule is the one entry of the seed playbook: sound advice that states no rule,
// so the champion starts where the baseline is.
const SeedRule = "Read the customer's request to the end before you call a tool."

// Learning tunes the learner of the demo experiment.
type Learning struct {
	Every         int           // learn.every
	BatchSize     int           // learn.batch_size: items per step (a failure, its task's success)
	MinEpisodes   int           // learn.min_episodes
	MaxCandidates int           // learn.max_candidates
	PromoteAlpha  float64       // learn.promote_alpha
	CheckEvery    time.Duration // learn.check_every; experiment.adaptive.update_period is 4× it, a round's Pace
}

// DefaultLearning learns a few rules a step, so the champion climbs over several
// versions, and judges a candidate on 12 rewarded episodes.
func DefaultLearning() Learning {
	return Learning{Every: 16, BatchSize: 3, MinEpisodes: 12, MaxCandidates: 1, PromoteAlpha: 0.05, CheckEvery: 25 * time.Millisecond}
}

// ReplayDir is where camproxy's replay buffer goes: file://ReplayDir() is what
// `camproxy report --from` reads.
func (l *Lab) ReplayDir() string { return filepath.Join(l.Dir, "replay") }

// StoreDir holds the playbook versions and their manifest unless Store says otherwise.
func (l *Lab) StoreDir() string { return filepath.Join(l.Dir, "playbook") }

func (l *Lab) store() string {
	if l.Store != "" {
		return l.Store
	}
	return l.StoreDir()
}

// Config is camproxy on loopback in front of the lab: a baseline arm without
// context and a champion arm serving the seed playbook, the learner on with the
// scripted optimiser models, the replay buffer in ReplayDir.
func (l *Lab) Config(lc Learning) (*config.Config, error) {
	if err := os.MkdirAll(l.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	seed := &playbook.Playbook{Entries: []playbook.Entry{{ID: "seed0001", Section: "general", Content: SeedRule}}}
	seedFile := filepath.Join(l.Dir, "seed-playbook.json")
	if err := os.WriteFile(seedFile, seed.JSON(), 0o644); err != nil {
		return nil, fmt.Errorf("demo: seed playbook: %w", err)
	}
	c := config.Default()
	c.Server.Listen, c.Server.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	c.Upstreams["openai"].BaseURL = l.Agent.URL
	pb := config.DefaultAugmenter()
	pb.Type, pb.File = config.AugmenterPlaybook, seedFile
	c.Augmenters = map[string]config.Augmenter{"seed": pb}
	c.Experiment.Name = "demo"
	c.Experiment.Arms = []config.Arm{{Name: BaselineArm, Weight: 1, Augmenter: config.AugmenterNone}, {Name: ChampionArm, Weight: 1, Augmenter: "seed"}}
	// Shares recomputed once a round (Plan.Pace is 4 × CheckEvery), not at every
	// check: each recompute is thousands of posterior draws per arm, and at every
	// 25 ms check they were about a third of the demo's CPU (under -race) for shares
	// that only moved within a round.
	c.Experiment.Adaptive = config.Adaptive{Enabled: true, UpdatePeriod: 4 * lc.CheckEvery, MinShare: 0.1, Alpha: 0.05, MinEpisodes: lc.MinEpisodes, Control: BaselineArm}
	c.Replay.Sinks = []string{"file://" + l.ReplayDir()}
	c.Replay.SpoolDir = filepath.Join(l.Dir, "spool")
	c.Learn.Enabled = true
	c.Learn.Champion = ChampionArm
	c.Learn.Store = l.store()
	c.Learn.Model = "openai/demo-optimiser"
	c.Learn.BaseURL = l.Optimiser.BaseURL()
	c.Learn.Every, c.Learn.BatchSize, c.Learn.MinEpisodes = lc.Every, lc.BatchSize, lc.MinEpisodes
	c.Learn.MaxCandidates, c.Learn.PromoteAlpha, c.Learn.CheckEvery = lc.MaxCandidates, lc.PromoteAlpha, lc.CheckEvery
	c.Learn.StepTimeout = time.Minute
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("demo: config: %w", err)
	}
	return c, nil
}

// Version loads playbook version n from the learner's store.
func (l *Lab) Version(ctx context.Context, n int) (*playbook.Playbook, error) {
	store, err := storage.OpenStore(ctx, l.store())
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	defer store.Close()
	pb, err := (&storage.Versions{Store: store}).Load(ctx, n)
	if err != nil {
		return nil, fmt.Errorf("demo: version %d: %w", n, err)
	}
	return pb, nil
}
