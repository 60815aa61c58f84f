package main

import (
	"context"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/camproxy/camproxy/internal/buildinfo"
	cobracli "github.com/camproxy/camproxy/internal/cli" // "cli" is this command's own type
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
