package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	cobracli "github.com/camproxy/camproxy/internal/cli"
)

// TestHelpEverywhere: every command, at every level, answers --help, -h and
// `camproxy help …` with exit 0 on stdout: what it does, an example, and its flags
// written with two dashes.
func TestHelpEverywhere(t *testing.T) {
	c := &cli{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: noEnv}
	var paths [][]string
	cobracli.Walk(c.root(), func(cmd *cobra.Command) {
		if cmd.Hidden || cmd.Name() == "help" {
			return
		}
		paths = append(paths, strings.Fields(cobracli.CommandName(cmd)))
	})
	if len(paths) < 20 {
		t.Fatalf("the tree has %d commands, want the whole CLI", len(paths))
	}
	for _, path := range paths {
		for _, args := range [][]string{append(path, "--help"), append(path, "-h"), append([]string{"help"}, path...)} {
			name := strings.Join(args, " ")
			t.Run(name, func(t *testing.T) {
				var out, errb bytes.Buffer
				err := run(context.Background(), args, &out, &errb, noEnv)
				if err != nil || errb.Len() > 0 {
					t.Fatalf("%s: %v\nstderr: %s", name, err, errb.String())
				}
				help := out.String()
				for _, want := range []string{"Usage:", "Examples:", "  camproxy "} {
					if !strings.Contains(help, want) {
						t.Errorf("%s lacks %q:\n%s", name, want, help)
					}
				}
				if strings.Contains(help, "\n  -") && !strings.Contains(help, "--help") {
					t.Errorf("%s lists flags without --help:\n%s", name, help)
				}
				for _, line := range strings.Split(help, "\n") {
					// A long flag shown with one dash ("  -from string") is the flag
					// package's style, which the tree does not accept.
					if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "-") && !strings.HasPrefix(f[0], "--") && len(strings.TrimRight(f[0], ",")) > 2 {
						t.Errorf("%s: single-dash long flag %q", name, line)
					}
				}
			})
		}
	}
}

// TestEveryLeafDescribed: each command says what it does and shows an example of
// itself, and each flag has a description.
func TestEveryLeafDescribed(t *testing.T) {
	c := &cli{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: noEnv}
	cobracli.Walk(c.root(), func(cmd *cobra.Command) {
		if cmd.Hidden || cmd.Name() == "help" {
			return
		}
		name := cobracli.CommandName(cmd)
		if cmd.Short == "" {
			t.Errorf("%s: no description", name)
		}
		if !strings.Contains(cmd.Example, "camproxy "+name+" ") && cmd.HasParent() {
			t.Errorf("%s: the example does not show it:\n%s", name, cmd.Example)
		}
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Usage == "" {
				t.Errorf("%s --%s: no description", name, f.Name)
			}
		})
	})
}

// TestCommandLineProblemsAtOnce: unknown flags (with the one probably meant), values
// a flag refuses and the command's own checks come in one message, exit 2; a long
// flag written with one dash still works.
func TestCommandLineProblemsAtOnce(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "all.parquet")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string // the whole stderr
	}{
		{[]string{"replay", "stats", "--frm", "x", "--format", "yaml", "extra"},
			"camproxy: replay stats: 3 problems:\n  unknown flag --frm; did you mean --from?\n  --format \"yaml\": want text or json\n  unexpected argument \"extra\"\n"},
		{[]string{"report", "--form=json", "--out", dir + "/no/r.html"},
			"camproxy: report: 2 problems:\n  unknown flag --form; did you mean --format?\n  --out " + dir + "/no/r.html: directory " + dir + "/no does not exist\n"},
		{[]string{"train", "reflect", "--dry-run", "--subsets", "0", "--concurrency", "many", "--timeout", "soon"},
			"camproxy: train reflect: 3 problems:\n  --concurrency \"many\": want an integer\n  --timeout \"soon\": want a duration (90s, 5m, 1h30m)\n  --subsets 0: want 1 or more\n"},
		{[]string{"serve", "-config"}, "camproxy: serve: flag needs an argument: --config\n"},
		{[]string{"reprot"}, "camproxy: unknown command \"reprot\": want completion, config, dev, inject, key, replay, report, serve, task, train, version; did you mean \"report\"?\n"},
		{[]string{"rep"}, "camproxy: unknown command \"rep\": want completion, config, dev, inject, key, replay, report, serve, task, train, version; did you mean \"replay\" or \"report\"?\n"},
		// A flag camproxy does not have, before the command, is named and does not
		// swallow the command as its value.
		{[]string{"--bogus", "replay", "stats", "--from", dir}, "camproxy: replay stats: unknown flag --bogus\n"},
		{[]string{"--verison"}, "camproxy: unknown flag --verison; did you mean --version?\n"},
		{[]string{"help", "nosuch"}, "camproxy: help: no command \"nosuch\" in camproxy: want completion, config, dev, inject, key, replay, report, serve, task, train, version\n"},
		{[]string{"report", "--fo", "json", "--workers", "x", "--late", "soon"}, "camproxy: report: 3 problems:\n  unknown flag --fo; did you mean --format?\n  --workers \"x\": want an integer\n  --late \"soon\": want a duration (90s, 5m, 1h30m)\n"},
		{[]string{"replay", "export", "--partition-by", "dt", "--out", file}, "camproxy: replay export: --out " + file + " is a file: a partitioned export writes a directory (or s3://BUCKET/PREFIX)\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run(context.Background(), tc.args, &out, &errb, noEnv)
			if code := cobracli.ExitCode(err, &errb); code != 2 || errb.String() != tc.want {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and:\n%s", code, errb.String(), tc.want)
			}
		})
	}
	// -from (one dash, the flag package's style) is --from.
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"replay", "stats", "-from", "file://" + dir, "-format", "json"}, &out, &errb, noEnv)
	if err != nil || !strings.Contains(out.String(), `"episodes": 0`) {
		t.Errorf("single-dash long flags: %v\n%s%s", err, out.String(), errb.String())
	}
}
