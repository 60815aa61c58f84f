package main

import (
	"encoding/json"
	"io"

	"github.com/spf13/cobra"

	"github.com/camproxy/camproxy/internal/buildinfo"
	cobracli "github.com/camproxy/camproxy/internal/cli"
)

// version is stamped at build time: -ldflags "-X main.version=v1.2.3". commit may be
// stamped too (-X main.commit=…) where the build has no VCS information (a Docker
// build without .git, -buildvcs=false); else it comes from the Go build info.
var (
	version = "dev"
	commit  = ""
)

func (c *cli) versionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "version",
		Short:   "The version, commit, Go version and platform",
		Long:    "The version, commit, Go version and platform of this build (camproxy --version prints one line).",
		Example: "  camproxy version --json",
		Args:    c.runner.Checks(func(p *cobracli.Problems, args []string) { p.NoArgs(args) }),
		RunE: func(*cobra.Command, []string) error {
			b := buildinfo.Current(version, commit)
			if asJSON {
				enc := json.NewEncoder(c.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(b)
			}
			_, err := io.WriteString(c.stdout, b.Text())
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the build information as JSON")
	return cmd
}
