package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version is stamped at build time: -ldflags "-X main.version=v1.2.3". commit may be
// stamped too (-X main.commit=…) where the build has no VCS information (a Docker
// build without .git, -buildvcs=false); else it comes from the Go build info.
var (
	version = "dev"
	commit  = ""
)

// buildInfo is what `camproxy version` reports.
type buildInfo struct {
	Version    string            `json:"version"`
	Commit     string            `json:"commit"`
	CommitTime string            `json:"commit_time,omitempty"`
	Modified   bool              `json:"modified"` // built from a tree with uncommitted changes
	Go         string            `json:"go"`
	Platform   string            `json:"platform"`
	Module     string            `json:"module,omitempty"`
	Build      map[string]string `json:"build,omitempty"` // the build settings that shape the binary
}

// shownSettings are the build settings worth a line: how the binary was built.
var shownSettings = []string{"-trimpath", "-race", "-tags", "CGO_ENABLED", "GOOS", "GOARCH", "GOAMD64", "GOARM64", "-buildmode"}

// readBuildInfo assembles the version from the stamped variables and the Go build
// info (bi may be nil when the binary carries none).
func readBuildInfo(bi *debug.BuildInfo, stampedVersion, stampedCommit string) buildInfo {
	b := buildInfo{Version: stampedVersion, Commit: stampedCommit, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		if b.Commit == "" {
			b.Commit = "unknown"
		}
		return b
	}
	if bi.GoVersion != "" {
		b.Go = bi.GoVersion
	}
	b.Module = bi.Main.Path
	// `go install github.com/camproxy/camproxy/cmd/camproxy@v1.2.3` stamps nothing but
	// knows the module's version.
	if (b.Version == "" || b.Version == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		b.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if b.Commit == "" {
				b.Commit = s.Value
			}
		case "vcs.time":
			b.CommitTime = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
		for _, k := range shownSettings {
			if s.Key == k && s.Value != "" {
				if b.Build == nil {
					b.Build = map[string]string{}
				}
				b.Build[k] = s.Value
			}
		}
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

func currentBuild() buildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return readBuildInfo(bi, version, commit)
}

// versionString is the one line of `camproxy --version`.
func versionString() string {
	b := currentBuild()
	c := b.Commit
	if b.Modified {
		c += ", modified"
	}
	return fmt.Sprintf("camproxy %s (commit %s, %s, %s)", b.Version, c, b.Go, b.Platform)
}

// text is the multi-line `camproxy version`.
func (b buildInfo) text() string {
	var s strings.Builder
	fmt.Fprintf(&s, "camproxy %s\n", b.Version)
	c := b.Commit
	switch {
	case b.CommitTime != "" && b.Modified:
		c += " (" + b.CommitTime + ", with uncommitted changes)"
	case b.CommitTime != "":
		c += " (" + b.CommitTime + ")"
	case b.Modified:
		c += " (with uncommitted changes)"
	}
	fmt.Fprintf(&s, "  commit:   %s\n", c)
	fmt.Fprintf(&s, "  go:       %s %s\n", b.Go, b.Platform)
	if b.Module != "" {
		fmt.Fprintf(&s, "  module:   %s\n", b.Module)
	}
	if len(b.Build) > 0 {
		var parts []string
		for _, k := range shownSettings {
			if v, ok := b.Build[k]; ok {
				if strings.HasPrefix(k, "-") && v == "true" {
					parts = append(parts, k)
				} else {
					parts = append(parts, k+"="+v)
				}
			}
		}
		fmt.Fprintf(&s, "  build:    %s\n", strings.Join(parts, " "))
	}
	return s.String()
}

func (c *cli) versionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "version",
		Short:   "The version, commit, Go version and platform",
		Long:    "The version, commit, Go version and platform of this build (camproxy --version prints one line).",
		Example: "  camproxy version --json",
		Args:    c.checks(func(p *problems, args []string) { p.noArgs(args) }),
		RunE: func(*cobra.Command, []string) error {
			b := currentBuild()
			if asJSON {
				enc := json.NewEncoder(c.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(b)
			}
			_, err := io.WriteString(c.stdout, b.text())
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the build information as JSON")
	return cmd
}
