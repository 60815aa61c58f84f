package main

import (
	"fmt"

	"github.com/spf13/cobra"

	cobracli "github.com/camproxy/camproxy/internal/cli"
)

func (c *cli) configCmd() *cobra.Command {
	var quiet bool
	check := &cobra.Command{
		Use:   "check [FILE]",
		Short: "Validate a config as serve would and print the effective config",
		Long: `Validate FILE (default $CAMPROXY_CONFIG, else the built-in defaults) as serve
would, and print the effective config: every key with its value after ${ENV}
expansion and defaults, secrets masked. Exit status 2 names every bad key, with
its line and column, and the key probably meant.`,
		Example: `  camproxy config check camproxy.yaml
  CAMPROXY_CONFIG=camproxy.yaml camproxy config check --quiet`,
		ValidArgsFunction: cobracli.CompleteFiles,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) {
			if len(args) > 1 {
				p.Add("want at most one FILE, got %d", len(args))
			}
		}),
		RunE: func(_ *cobra.Command, args []string) error {
			path := ""
			if len(args) == 1 {
				path = args[0]
			}
			return c.configCheck(path, quiet)
		},
	}
	check.Flags().BoolVar(&quiet, "quiet", false, "print nothing but problems and warnings")
	return c.runner.Group("config", "Check a config file", "  camproxy config check camproxy.yaml", check)
}

// configCheck is `camproxy config check`.
func (c *cli) configCheck(path string, quiet bool) error {
	if path == "" {
		path, _ = c.getenv("CAMPROXY_CONFIG")
	}
	name := path
	if name == "" {
		name = "the built-in defaults"
	}
	cfg, err := loadConfig(path, c.getenv)
	if err != nil {
		return err
	}
	for _, w := range cfg.MissingFiles() {
		fmt.Fprintln(c.stderr, "camproxy: warning:", w)
	}
	if quiet {
		return nil
	}
	out, err := cfg.EffectiveYAML()
	if err != nil {
		return fmt.Errorf("config check: %w", err)
	}
	fmt.Fprintf(c.stdout, "# %s: valid. The effective config: defaults filled in, ${ENV} expanded, secrets masked.\n", name)
	_, err = c.stdout.Write(out)
	return err
}
