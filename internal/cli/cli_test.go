package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// tree is a small command tree as a command would build it: a group holding a leaf
// with a choice, a bounded integer, a duration, a required flag and its own check.
type tree struct {
	r                 Runner
	format, name, out string
	count             int
	ran               bool
}

func (tr *tree) root() *cobra.Command {
	root := &cobra.Command{Use: "tool", Short: "A tool", Version: "tool v1", SilenceErrors: true, SilenceUsage: true}
	var bounds Bounds
	leaf := &cobra.Command{
		Use: "run", Short: "Run", Example: "  tool job run --name x",
		Args: tr.r.Checks(func(p *Problems, args []string) {
			p.NoArgs(args)
			bounds.Check(p)
			if tr.name == "bad" {
				p.Add("--name %q: not that one", tr.name)
			}
		}),
		RunE: func(*cobra.Command, []string) error { tr.ran = true; return nil },
	}
	f := leaf.Flags()
	ChoiceVar(f, &tr.format, "format", "text", "output format", "text", "json")
	bounds.IntVar(f, &tr.count, "count", 1, 1, "1 or more", "how many")
	f.Duration("wait", 0, "how long")
	f.StringVar(&tr.name, "name", "", "a name")
	f.StringVar(&tr.out, "out", "", "a file")
	_ = leaf.MarkFlagRequired("name")
	root.AddCommand(tr.r.Group("job", "Jobs", "  tool job run", leaf))
	tr.r.Setup(root, PathFlags{Files: []string{"out"}})
	return root
}

func (tr *tree) run(args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	root := tr.root()
	root.SetOut(&out)
	root.SetErr(&errb)
	err := tr.r.Execute(context.Background(), root, args)
	code = ExitCode(err, &errb)
	return out.String(), errb.String(), code
}

// TestProblemsAtOnce: unknown flags (with the one probably meant), values a flag
// refuses, required flags, bounds and the command's own checks come in one usage
// error, exit 2, in that order; a long flag written with one dash works.
func TestProblemsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"job", "run", "--nme", "x", "--format", "yaml", "--count", "0", "--wait", "soon", "extra"},
			"tool: job run: 6 problems:\n  unknown flag --nme; did you mean --name?\n  --format \"yaml\": want text or json\n  --wait \"soon\": want a duration (90s, 5m, 1h30m)\n" +
				"  --name is required\n  unexpected argument \"extra\"\n  --count 0: want 1 or more\n"},
		{[]string{"job", "run", "--name", "bad", "--count", "many"}, "tool: job run: 2 problems:\n  --count \"many\": want an integer\n  --name \"bad\": not that one\n"},
		{[]string{"jbo"}, "tool: unknown command \"jbo\": want job; did you mean \"job\"?\n"},
		{[]string{"job"}, "tool: job: want a command: run (tool job --help says what each does)\n"},
		{[]string{"job", "walk"}, "tool: job: unknown command \"walk\": want run\n"},
		{[]string{"--bogus", "job", "run", "--name", "x"}, "tool: job run: unknown flag --bogus\n"},
		{[]string{"--verison"}, "tool: unknown flag --verison; did you mean --version?\n"},
		{[]string{"help", "nosuch"}, "tool: help: no command \"nosuch\" in tool: want job\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var tr tree
			_, stderr, code := tr.run(tc.args...)
			stderr = strings.Replace(stderr, "camproxy: ", "tool: ", 1)
			if code != 2 || stderr != tc.stderr || tr.ran {
				t.Errorf("exit %d, ran %v, stderr:\n%s\nwant exit 2 and:\n%s", code, tr.ran, stderr, tc.stderr)
			}
		})
	}
	var tr tree
	if _, stderr, code := tr.run("job", "run", "-name", "x", "-format=json", "-count", "3"); code != 0 || !tr.ran || tr.name != "x" || tr.format != "json" || tr.count != 3 {
		t.Errorf("single-dash long flags: exit %d %s, %+v", code, stderr, tr)
	}
}

func TestNoCommand(t *testing.T) {
	var tr tree
	_, stderr, code := tr.run()
	if code != 2 || !strings.Contains(stderr, "Usage:\n  tool COMMAND") || !strings.HasSuffix(stderr, "camproxy: no command given\n") {
		t.Errorf("exit %d:\n%s", code, stderr)
	}
}

// TestHelp: a group's usage line says COMMAND, and help reaches every command.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"job", "--help"}, {"help", "job"}} {
		var tr tree
		out, stderr, code := tr.run(args...)
		if code != 0 || stderr != "" || !strings.Contains(out, "tool job COMMAND") || strings.Contains(out, "tool job [flags]") {
			t.Errorf("%q: exit %d %s\n%s", args, code, stderr, out)
		}
	}
	var tr tree
	if out, _, code := tr.run("help", "job", "run"); code != 0 || !strings.Contains(out, "--format text|json") {
		t.Errorf("help job run: exit %d\n%s", code, out)
	}
}

// TestCompletion: a choice completes its words, a path flag files, any other value
// nothing; help completes command names.
func TestCompletion(t *testing.T) {
	complete := func(words ...string) string {
		var tr tree
		out, stderr, code := tr.run(append([]string{cobra.ShellCompRequestCmd}, words...)...)
		if code != 0 {
			t.Fatalf("%q: exit %d %s", words, code, stderr)
		}
		return out
	}
	if out := complete("job", "run", "--format", "j"); !strings.HasPrefix(out, "json\n:4\n") {
		t.Errorf("choice:\n%s", out)
	}
	if out := complete("job", "run", "--out", ""); !strings.HasPrefix(out, ":0\n") {
		t.Errorf("file flag:\n%s", out)
	}
	if out := complete("job", "run", "--name", ""); !strings.HasPrefix(out, ":4\n") {
		t.Errorf("free value:\n%s", out)
	}
	if out := complete("help", "j"); !strings.HasPrefix(out, "job\n:4\n") {
		t.Errorf("help:\n%s", out)
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err    error
		code   int
		stderr string
	}{
		{nil, 0, ""},
		{Usagef("bad %s", "flag"), 2, "camproxy: bad flag\n"},
		{fmt.Errorf("wrapped: %w", Usagef("bad")), 2, "camproxy: wrapped: bad\n"},
		{&ExitStatus{Code: 3, Msg: "the trainer failed"}, 3, "camproxy: the trainer failed\n"},
		{&ExitStatus{Code: -1, Msg: "killed"}, 1, "camproxy: killed\n"},
		{errors.New("boom"), 1, "camproxy: boom\n"},
	} {
		var b bytes.Buffer
		if code := ExitCode(tc.err, &b); code != tc.code || b.String() != tc.stderr {
			t.Errorf("ExitCode(%v) = %d, %q; want %d, %q", tc.err, code, b.String(), tc.code, tc.stderr)
		}
	}
	if got := OneLine("a\r\nb\nc"); got != "a b c" {
		t.Errorf("OneLine = %q", got)
	}
}

func TestLogFlags(t *testing.T) {
	var tr tree
	root := tr.root()
	var l LogFlags
	l.Define(root.Flags())
	if err := root.ParseFlags([]string{"--log-level", "warn", "--log-format", "text"}); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	log := l.Logger(&b)
	log.Info("hidden")
	log.Warn("shown", "k", 1)
	if s := b.String(); strings.Contains(s, "hidden") || !strings.Contains(s, "level=WARN msg=shown k=1") {
		t.Errorf("log:\n%s", s)
	}
	b.Reset()
	(LogFlags{Level: "info", Format: "json"}).Logger(&b).Info("x")
	if !strings.HasPrefix(b.String(), `{"time":`) {
		t.Errorf("json log: %s", b.String())
	}
}
