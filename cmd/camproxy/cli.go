package main

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/camproxy/camproxy/internal/buildinfo"
	cobracli "github.com/camproxy/camproxy/internal/cli" // "cli" is this command's own type
	"github.com/camproxy/camproxy/internal/when"
)

// cli is what every command takes from the process: its streams and environment.
// Commands read flags into variables their constructor closes over.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) (string, bool)

	runner cobracli.Runner // the command line being run: its flag problems
}

// run builds the command tree and runs args on it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) (string, bool)) error {
	c := &cli{stdin: os.Stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	return c.execute(ctx, args)
}

// execute runs args on the command tree with c's streams.
func (c *cli) execute(ctx context.Context, args []string) error {
	root := c.root()
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetIn(c.stdin)
	return c.runner.Execute(ctx, root, args)
}

func (c *cli) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "camproxy",
		Short: "A gateway that makes LLM agents better without touching their code",
		Long: `camproxy sits between an agent and its model provider. It finds the agent's task,
adds task-specific context (from a Context Augmentation Model, a playbook or
retrieval), keeps it the same for every turn of the episode, records the
trajectory and the reward the harness reports, and splits traffic between arms so
the lift is measured. Offline it trains the CAM from what it recorded.`,
		Example: `  camproxy serve --config camproxy.yaml
  camproxy replay stats
  camproxy report --format html --out report.html`,
		Version:       buildinfo.Current(version, commit).Line(),
		SilenceErrors: true, // main prints the error once, with its exit status
		SilenceUsage:  true,
	}
	root.AddCommand(
		c.serveCmd(),
		c.replayCmd(),
		c.reportCmd(),
		c.trainCmd(),
		c.injectCmd(),
		c.configCmd(),
		c.taskCmd(),
		c.keyCmd(),
		c.devCmd(),
		c.completionCmd(),
		c.versionCmd(),
	)
	c.runner.Setup(root, cobracli.PathFlags{Files: fileFlags, Dirs: dirFlags})
	return root
}

// Flags whose value is a path: the shell completes files (or directories) for them.
var (
	fileFlags = []string{"config", "out", "data", "system-prompt", "user-prompt", "tls-cert", "tls-key", "seed"}
	dirFlags  = []string{"work-dir", "spill-dir"}
)

// The names the commands' files use for internal/cli's checks, errors and flags
// (replay.go and buffer.go among them).

// problems are what is wrong with a command line (cobracli.Problems).
type problems cobracli.Problems

func (p *problems) add(format string, a ...any) { (*cobracli.Problems)(p).Add(format, a...) }
func (p *problems) noArgs(args []string)        { (*cobracli.Problems)(p).NoArgs(args) }
func (p *problems) dir(flag, path string)       { (*cobracli.Problems)(p).Dir(flag, path) }
func (p *problems) atLeast(flag string, v, least int, want string) {
	(*cobracli.Problems)(p).AtLeast(flag, v, least, want)
}

// within is a problem for each integer flag of bounds below its least value.
func (p *problems) within(bounds cobracli.Bounds) { bounds.Check((*cobracli.Problems)(p)) }

// checks makes a command's Args from its checks (cobracli.Runner.Checks).
func (c *cli) checks(check func(p *problems, args []string)) cobra.PositionalArgs {
	return c.runner.Checks(func(p *cobracli.Problems, args []string) {
		if check != nil {
			check((*problems)(p), args)
		}
	})
}

// group is a command that only holds others.
func (c *cli) group(use, short, example string, subs ...*cobra.Command) *cobra.Command {
	return c.runner.Group(use, short, example, subs...)
}

type usageError = cobracli.UsageError

func usagef(format string, a ...any) error { return cobracli.Usagef(format, a...) }

// exitStatus is a launched tool's failure: camproxy exits with its status.
func exitStatus(code int, msg string) error { return &cobracli.ExitStatus{Code: code, Msg: msg} }

func exitCode(err error, stderr io.Writer) int { return cobracli.ExitCode(err, stderr) }

func choiceVar(f *pflag.FlagSet, p *string, name, def, usage string, options ...string) {
	cobracli.ChoiceVar(f, p, name, def, usage, options...)
}

func isDir(p string) bool { return cobracli.IsDir(p) }

// parseWhen reads a --since/--until value (when.Parse).
func parseWhen(s string, now time.Time) (time.Time, error) { return when.Parse(s, now) }
