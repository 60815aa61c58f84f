package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// init lets the test binary be camproxy for a shell: with CAMPROXY_TEST_ARGV=1 it
// runs its own arguments (empty ones included, which TestMain's CAMPROXY_ARGS
// cannot carry) and exits.
func init() {
	if os.Getenv("CAMPROXY_TEST_ARGV") == "1" {
		err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
		os.Exit(exitCode(err, os.Stderr))
	}
}

func TestCompletionCandidates(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		words []string
		want  []string // exactly, sorted
		has   []string // at least these
	}{
		{name: "commands", words: []string{""}, want: []string{"completion", "config", "dev", "help", "inject", "replay", "report", "serve", "task", "train", "version"}},
		{name: "nothing typed yet", words: nil, has: []string{"serve", "config"}},
		{name: "command prefix", words: []string{"re"}, want: []string{"replay", "report"}},
		{name: "subcommands", words: []string{"replay", ""}, want: []string{"export", "import", "stats"}},
		{name: "train stages", words: []string{"train", "s"}, want: []string{"sft"}},
		{name: "config", words: []string{"config", ""}, want: []string{"check"}},
		{name: "unknown command", words: []string{"frobnicate", ""}, want: nil},
		{name: "unknown subcommand", words: []string{"replay", "nope", "--"}, want: nil},
		{name: "flags of a leaf", words: []string{"serve", "--"}, want: []string{"--config", "--log-format", "--log-level"}},
		{name: "flag prefix", words: []string{"replay", "import", "--f"}, want: []string{"--format"}},
		{name: "choices of a flag, per command", words: []string{"replay", "import", "--format", ""}, want: []string{"jsonl", "tau-bench"}},
		{name: "same flag, other command", words: []string{"report", "--format", "h"}, want: []string{"html"}},
		{name: "choices shared by commands", words: []string{"inject", "serve", "--log-level", ""}, want: []string{"debug", "error", "info", "warn"}},
		{name: "grpo launches on ray too", words: []string{"train", "grpo", "--launch", ""}, want: []string{"local", "ray"}},
		{name: "a file flag", words: []string{"serve", "--config", "ex"}, want: []string{completeFiles}},
		{name: "a directory flag", words: []string{"train", "reflect", "--work-dir", ""}, want: []string{completeDirs}},
		{name: "a free value", words: []string{"train", "reflect", "--model", ""}, want: nil},
		{name: "after a value, flags again", words: []string{"serve", "--config", "x.yaml", "--log-f"}, want: []string{"--log-format"}},
		{name: "a bool flag takes no value", words: []string{"train", "reflect", "--dry-run", "--max-t"}, want: []string{"--max-tokens", "--max-tool-bytes"}},
		{name: "file argument", words: []string{"config", "check", ""}, want: []string{completeFiles}},
		{name: "file argument of import", words: []string{"replay", "import", "--format", "jsonl", ""}, want: []string{completeFiles}},
		{name: "config check flags", words: []string{"config", "check", "-"}, want: []string{"--quiet"}},
		{name: "shells", words: []string{"completion", ""}, want: []string{"bash", "fish", "zsh"}},
		{name: "version flags", words: []string{"version", "--"}, want: []string{"--json"}},
		{name: "the stages' own flags", words: []string{"train", "dpo", "--"}, has: []string{"--from", "--out", "--min-margin", "--pref-beta", "--launch"}},
		{name: "task explain", words: []string{"task", ""}, want: []string{"explain"}},
		{name: "task explain flags", words: []string{"task", "explain", "--"}, want: []string{"--config", "--format", "--protocol"}},
		{name: "task explain protocols", words: []string{"task", "explain", "--protocol", ""}, want: []string{"anthropic", "bedrock", "openai", "responses"}},
		{name: "task explain body", words: []string{"task", "explain", ""}, want: []string{completeFiles}},
		{name: "injector flags", words: []string{"inject", "serve", "--tls-"}, want: []string{"--tls-cert", "--tls-key"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := complete(ctx, c.words)
			if c.has == nil && !slices.Equal(got, c.want) {
				t.Errorf("complete(%q) = %q, want %q", c.words, got, c.want)
			}
			for _, h := range c.has {
				if !slices.Contains(got, h) {
					t.Errorf("complete(%q) = %q, lacks %q", c.words, got, h)
				}
			}
		})
	}
}

// TestCompletionFlagsAreReal: every command lists flags (read from its own -h), and
// every flag the completion knows values for is a value flag of a command.
func TestCompletionFlagsAreReal(t *testing.T) {
	ctx := context.Background()
	for top, subs := range commands {
		paths := [][]string{{top}}
		if subs != nil {
			paths = nil
			for _, s := range subs {
				paths = append(paths, []string{top, s})
			}
		}
		for _, p := range paths {
			cmd := strings.Join(p, " ")
			if cmd == "completion" || cmd == "help" {
				continue
			}
			flags := leafFlags(ctx, p)
			if len(flags) == 0 {
				t.Errorf("%s: no flag read from its -h", cmd)
			}
			for f := range flags {
				if f == "h" || f == "help" {
					t.Errorf("%s: -%s offered", cmd, f)
				}
			}
		}
	}
	all := map[string]bool{} // every value flag of every command
	for top, subs := range commands {
		for _, s := range append([]string{""}, subs...) {
			for f, value := range leafFlags(ctx, strings.Fields(top+" "+s)) {
				all[f] = all[f] || value
			}
		}
	}
	for key := range flagChoices {
		if i := strings.LastIndex(key, " --"); i > 0 {
			cmd, flag := key[:i], key[i+3:]
			if !leafFlags(ctx, strings.Fields(cmd))[flag] {
				t.Errorf("choices for %q: %s has no --%s taking a value", key, cmd, flag)
			}
		} else if !all[strings.TrimPrefix(key, "--")] {
			t.Errorf("choices for %s: no command has it", key)
		}
	}
	for _, f := range append(slices.Clone(fileFlags), dirFlags...) {
		if !all[strings.TrimPrefix(f, "--")] {
			t.Errorf("%s completes paths, but no command has it", f)
		}
	}
}

func TestCompletionScripts(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"completion", "bash"}, 0, "complete -F _camproxy camproxy"},
		{[]string{"completion", "zsh"}, 0, "#compdef camproxy"},
		{[]string{"completion", "fish"}, 0, "complete -c camproxy"},
		{[]string{"completion", "-h"}, 0, "source <(camproxy completion bash)"},
		{[]string{"completion"}, 2, "want one shell"},
		{[]string{"completion", "tcsh"}, 2, `unknown shell "tcsh"`},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errs := runCmd(t, nil, c.args...)
			if code != c.code || !strings.Contains(out+errs, c.want) {
				t.Errorf("exit %d (want %d), output lacks %q:\n%s%s", code, c.code, c.want, out, errs)
			}
		})
	}
	for _, sh := range []string{"zsh", "fish"} { // syntax only, where installed
		if p, err := exec.LookPath(sh); err == nil {
			f := filepath.Join(t.TempDir(), "camproxy."+sh)
			if err := os.WriteFile(f, []byte(completionScripts[sh]), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(p, "-n", f).CombinedOutput(); err != nil {
				t.Errorf("%s -n: %v\n%s", sh, err, out)
			}
		}
	}
}

// TestCompletionInBash sources the bash script and completes as bash would on TAB,
// with the test binary as camproxy on $PATH.
func TestCompletionInBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	bin := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := fmt.Sprintf("#!/bin/sh\nCAMPROXY_TEST_ARGV=1 exec %q \"$@\"\n", self)
	if err := os.WriteFile(filepath.Join(bin, "camproxy"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	for _, f := range []string{"camproxy.yaml", "cam.jsonl", "other.txt"} {
		if err := os.WriteFile(filepath.Join(work, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		line string // what is typed before TAB
		want string // COMPREPLY, one per line
	}{
		{"camproxy rep", "replay\nreport"},
		{"camproxy replay ex", "export"},
		{"camproxy report --format ", "html\njson\ntext"},
		{"camproxy serve --config cam", "cam.jsonl\ncamproxy.yaml"},
		{"camproxy config check ", "cam.jsonl\ncamproxy.yaml\nother.txt"},
		{"camproxy train sft --la", "--launch"},
		{"camproxy completion z", "zsh"},
		{"camproxy frobnicate ", ""},
	}
	for _, c := range cases {
		t.Run(c.line, func(t *testing.T) {
			t.Parallel() // each TAB starts the (race-built) test binary: about a second
			script := completionScripts["bash"] + `
read -r -a COMP_WORDS <<< "$LINE"
[[ "$LINE" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
_camproxy
printf '%s\n' "${COMPREPLY[@]}" | sort
`
			cmd := exec.Command(bash, "--norc", "--noprofile", "-c", script)
			cmd.Dir = work
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "LINE="+c.line)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("bash: %v\n%s", err, out)
			}
			if got := strings.TrimRight(string(out), "\n"); got != c.want {
				t.Errorf("%q<TAB> completes to\n%s\nwant\n%s", c.line, got, c.want)
			}
		})
	}
}
