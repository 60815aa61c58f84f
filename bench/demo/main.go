// Command demo shows camproxy's learning loop close in seconds, with no model
// and no GPU: camproxy runs in this process in front of a scripted agent (40 tasks,
// each needing one of 8 hidden rules, solved only when the context states the rule),
// the online learner reflects on the champion's episodes with scripted reflector and
// mutator models, writes playbook versions, tries each as a candidate arm, promotes
// the better ones and stops a harmful one. It prints reward by playbook version as it
// goes and ends with one line, `demo: {json}`, whose figures `camproxy report --format
// json --from file://DIR/replay` reproduces. It proves the plumbing, not model
// quality: every model here is a script.
//
//	go run ./bench/demo [-dir DIR] [-rounds 14] [-concurrency 8] [-harmful=true] [-v]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/camproxy/camproxy/internal/demo"
	"github.com/camproxy/camproxy/internal/demo/demoapp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// options are the demo's flags.
type options struct {
	dir         string
	rounds      int
	concurrency int
	harmful     bool
	verbose     bool
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.dir, "dir", "", "where camproxy's replay buffer and playbook versions go (default: a new directory under the system temp dir)")
	fs.IntVar(&o.rounds, "rounds", 14, "rounds of traffic; each runs the 40 tasks once")
	fs.IntVar(&o.concurrency, "concurrency", 8, "episodes in flight at once")
	fs.BoolVar(&o.harmful, "harmful", true, "make one step of the mutator harmful after the first promotion, to show the learner stopping a worse candidate")
	fs.BoolVar(&o.verbose, "v", false, "camproxy's own logs on stderr")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.rounds < 1 || o.concurrency < 1 {
		return o, errors.New("-rounds and -concurrency must be ≥ 1")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	if o.dir == "" {
		if o.dir, err = os.MkdirTemp("", "camproxy-demo-"); err != nil {
			return err
		}
	}
	if o.dir, err = filepath.Abs(o.dir); err != nil {
		return err
	}
	if entries, _ := os.ReadDir(o.dir); len(entries) > 0 {
		return fmt.Errorf("-dir %s is not empty: the demo's report must cover this run only", o.dir)
	}
	var log *slog.Logger
	if o.verbose {
		log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	line, _, err := demoapp.Run(ctx, demoapp.Options{Dir: o.dir, Rounds: o.rounds, Concurrency: o.concurrency, Harmful: o.harmful,
		Learning: demo.DefaultLearning(), Out: stdout, Logger: log})
	if err != nil {
		return err
	}
	line.WriteTable(stdout)
	fmt.Fprintf(stdout, "reproduce: go run ./cmd/camproxy report --format json --from %s\n", line.Replay)
	fmt.Fprintln(stdout, line.String())
	return nil
}
