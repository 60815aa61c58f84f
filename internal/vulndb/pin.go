package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/mod/module"
)

// modulePath is the database's source: the reports and their OSV records.
const modulePath = "golang.org/x/vulndb"

// pin is the one snapshot of the database the build uses.
type pin struct {
	Version string    // a pseudo-version: vulndb has no tags
	Sum     string    // the module zip's go.sum hash, h1:…
	Time    time.Time // the commit's time, from the pseudo-version
}

// parsePin reads a go.sum-style line, "golang.org/x/vulndb VERSION h1:HASH"; blank
// lines and # comments are allowed around it.
func parsePin(s string) (pin, error) {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		return pin{}, fmt.Errorf("want one line %q, got %d", modulePath+" VERSION h1:HASH", len(lines))
	}
	f := strings.Fields(lines[0])
	if len(f) != 3 || f[0] != modulePath {
		return pin{}, fmt.Errorf("want %q, got %q", modulePath+" VERSION h1:HASH", lines[0])
	}
	if err := module.Check(f[0], f[1]); err != nil {
		return pin{}, fmt.Errorf("version: %w", err)
	}
	if !module.IsPseudoVersion(f[1]) {
		return pin{}, fmt.Errorf("version %s: want a pseudo-version, whose time stamps the records", f[1])
	}
	t, err := module.PseudoVersionTime(f[1])
	if err != nil {
		return pin{}, fmt.Errorf("version %s: %w", f[1], err)
	}
	if !strings.HasPrefix(f[2], "h1:") || len(f[2]) <= len("h1:") {
		return pin{}, errors.New("the hash must be go.sum's h1:… of the module zip")
	}
	return pin{Version: f[1], Sum: f[2], Time: t.UTC()}, nil
}
