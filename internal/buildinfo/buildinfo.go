// Package buildinfo says which camproxy a binary is: the version and commit stamped
// at build time (-X main.version, -X main.commit) or, where nothing is stamped, what
// the Go build info knows (the module's version, the VCS revision), and how it was
// built.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Info is what `camproxy version` reports; its JSON keys are a contract.
type Info struct {
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

// Read assembles the version from the stamped values and the Go build info (bi may
// be nil when the binary carries none).
func Read(bi *debug.BuildInfo, stampedVersion, stampedCommit string) Info {
	b := Info{Version: stampedVersion, Commit: stampedCommit, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
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

// Current is Read of this binary's build info.
func Current(stampedVersion, stampedCommit string) Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return Read(bi, stampedVersion, stampedCommit)
}

// Line is the one line of `camproxy --version`.
func (b Info) Line() string {
	c := b.Commit
	if b.Modified {
		c += ", modified"
	}
	return fmt.Sprintf("camproxy %s (commit %s, %s, %s)", b.Version, c, b.Go, b.Platform)
}

// Text is the multi-line `camproxy version`.
func (b Info) Text() string {
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
