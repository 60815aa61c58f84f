// Package demoapp runs the whole demo in one process: camproxy (package app) with
// its learner in front of the demo environment's scripted agent and optimiser
// models, the traffic, and the summary line. It is apart from package demo so that
// camproxy's own tests may use the environment without an import cycle.
package demoapp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/camproxy/camproxy/app"
	"github.com/camproxy/camproxy/internal/demo"
)

// Options tune a run.
type Options struct {
	Dir         string // an empty directory for the replay buffer and the playbook versions
	Rounds      int    // rounds of traffic; each runs every task once
	Concurrency int    // episodes in flight at once
	Harmful     bool   // one harmful mutator step after the first promotion
	Learning    demo.Learning
	Out         io.Writer    // progress; nil = none
	Logger      *slog.Logger // camproxy's logs; nil = none
}

// Run starts the fakes and camproxy, drives Rounds rounds of traffic, shuts
// camproxy down (which flushes the replay buffer) and summarises the buffer.
func Run(ctx context.Context, o Options) (*demo.Line, *demo.Story, error) {
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	env := demo.Default()
	lab := demo.NewLab(env, o.Dir)
	defer lab.Close()
	cfg, err := lab.Config(o.Learning)
	if err != nil {
		return nil, nil, err
	}
	a, err := app.New(cfg, app.Options{Logger: log})
	if err != nil {
		return nil, nil, err
	}
	if err := a.Start(); err != nil {
		return nil, nil, err
	}
	stopped := false
	shutdown := func() error {
		if stopped {
			return nil
		}
		stopped = true
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return a.Shutdown(sctx)
	}
	defer shutdown()

	fmt.Fprintf(out, "camproxy demo: %d tasks over %d hidden rules; %s.\n", len(env.Tasks), len(env.Rules), demo.Note)
	fmt.Fprintf(out, "camproxy %s (data plane), %s (admin); replay buffer and playbook versions in %s\n", a.Addr(), a.AdminAddr(), o.Dir)
	fmt.Fprintf(out, "arms: %s (no context, the control), %s (the seed playbook, v1); the learner adds learn-vN; * marks the champion\n\n",
		demo.BaselineArm, demo.ChampionArm)
	h := demo.NewHarness(env, demo.HarnessOptions{DataURL: "http://" + a.Addr(), AdminURL: "http://" + a.AdminAddr()})
	story, err := demo.Drive(ctx, h, lab, demo.Plan{MaxRounds: o.Rounds, MinRounds: o.Rounds, Concurrency: o.Concurrency,
		Harmful: o.Harmful, Pace: 4 * o.Learning.CheckEvery, Out: out})
	if err != nil {
		return nil, story, err
	}
	if err := shutdown(); err != nil {
		return nil, story, fmt.Errorf("camproxy shutdown: %w", err)
	}
	line, err := demo.Summarize(ctx, "file://"+lab.ReplayDir())
	return line, story, err
}
