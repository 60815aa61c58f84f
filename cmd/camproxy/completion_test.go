package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	cobracli "github.com/camproxy/camproxy/internal/cli"
)

// init lets the test binary be camproxy for a shell: with CAMPROXY_TEST_ARGV=1 it
// runs its own arguments (empty ones included, which TestMain's CAMPROXY_ARGS
// cannot carry) and exits.
func init() {
	if os.Getenv("CAMPROXY_TEST_ARGV") == "1" {
		err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
		os.Exit(cobracli.ExitCode(err, os.Stderr))
	}
}

// Completion directives the tests look for: the shell completes files (the
// default), nothing, or directories.
const (
	wantFiles = ":files"
	wantNone  = ":none"
	wantDirs  = ":dirs"
)

// complete asks the tree, as the shell scripts do (camproxy __complete WORDS…), and
// returns the candidates sorted, or one directive when there are none.
func complete(t *testing.T, words []string) []string {
	t.Helper()
	if len(words) == 0 {
		words = []string{""}
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), append([]string{cobra.ShellCompRequestCmd}, words...), &out, &errb, noEnv); err != nil {
		t.Fatalf("__complete %q: %v\n%s", words, err, errb.String())
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	last := lines[len(lines)-1]
	d, err := strconv.Atoi(strings.TrimPrefix(last, ":"))
	if !strings.HasPrefix(last, ":") || err != nil {
		t.Fatalf("__complete %q: no directive line:\n%s", words, out.String())
	}
	var got []string
	for _, l := range lines[:len(lines)-1] {
		got = append(got, strings.SplitN(l, "\t", 2)[0]) // "word\tdescription"
	}
	slices.Sort(got)
	if len(got) > 0 {
		return got
	}
	switch dir := cobra.ShellCompDirective(d); {
	case dir&cobra.ShellCompDirectiveFilterDirs != 0:
		return []string{wantDirs}
	case dir&cobra.ShellCompDirectiveNoFileComp != 0:
		return []string{wantNone}
	case dir&cobra.ShellCompDirectiveError != 0:
		return nil
	}
	return []string{wantFiles}
}

func TestCompletionCandidates(t *testing.T) {
	cases := []struct {
		name  string
		words []string
		want  []string // exactly, sorted
		has   []string // at least these
	}{
		{name: "commands", words: []string{""}, want: []string{"completion", "config", "dev", "help", "inject", "key", "replay", "report", "serve", "task", "train", "version"}},
		{name: "nothing typed yet", words: nil, has: []string{"serve", "config"}},
		{name: "command prefix", words: []string{"re"}, want: []string{"replay", "report"}},
		{name: "subcommands", words: []string{"replay", ""}, want: []string{"export", "import", "stats"}},
		{name: "train stages", words: []string{"train", "s"}, want: []string{"serve-config", "sft"}},
		{name: "every train command", words: []string{"train", ""}, want: []string{"dpo", "grpo", "merge", "playbook", "reflect", "serve-config", "sft"}},
		{name: "config", words: []string{"config", ""}, want: []string{"check"}},
		{name: "unknown command", words: []string{"frobnicate", ""}, want: []string{wantNone}},
		{name: "flags of a leaf", words: []string{"serve", "--"}, want: []string{"--config", "--help", "--log-format", "--log-level"}},
		{name: "flag prefix", words: []string{"replay", "import", "--f"}, want: []string{"--format"}},
		{name: "choices of a flag, per command", words: []string{"replay", "import", "--format", ""}, want: []string{"jsonl", "parquet", "tau-bench"}},
		{name: "same flag, other command", words: []string{"report", "--format", "h"}, want: []string{"html"}},
		{name: "choices shared by commands", words: []string{"inject", "serve", "--log-level", ""}, want: []string{"debug", "error", "info", "warn"}},
		{name: "grpo launches on ray too", words: []string{"train", "grpo", "--launch", ""}, want: []string{"local", "ray"}},
		{name: "sft launches here only", words: []string{"train", "sft", "--launch", ""}, want: []string{"local"}},
		{name: "a file flag", words: []string{"serve", "--config", "ex"}, want: []string{wantFiles}},
		{name: "a directory flag", words: []string{"train", "reflect", "--work-dir", ""}, want: []string{wantDirs}},
		{name: "a free value", words: []string{"train", "reflect", "--model", ""}, want: []string{wantNone}},
		{name: "after a value, flags again", words: []string{"serve", "--config", "x.yaml", "--log-f"}, want: []string{"--log-format"}},
		{name: "a bool flag takes no value", words: []string{"train", "reflect", "--dry-run", "--max-t"}, want: []string{"--max-tokens", "--max-tool-bytes"}},
		{name: "file argument", words: []string{"config", "check", ""}, want: []string{wantFiles}},
		{name: "file argument of import", words: []string{"replay", "import", "--format", "jsonl", ""}, want: []string{wantFiles}},
		{name: "no file argument", words: []string{"replay", "stats", ""}, want: []string{wantNone}},
		{name: "config check flags", words: []string{"config", "check", "--"}, want: []string{"--help", "--quiet"}},
		{name: "shells", words: []string{"completion", ""}, want: []string{"bash", "fish", "zsh"}},
		{name: "version flags", words: []string{"version", "--"}, want: []string{"--help", "--json"}},
		{name: "the stages' own flags", words: []string{"train", "dpo", "--"}, has: []string{"--from", "--out", "--min-margin", "--pref-beta", "--launch"}},
		{name: "the playbook's", words: []string{"train", "playbook", "--roll"}, want: []string{"--rollout-concurrency", "--rollout-timeout", "--rollout-token-env", "--rollout-url"}},
		{name: "merge's required flags first", words: []string{"train", "merge", "--"}, want: []string{"--from", "--out"}},
		{name: "then the rest", words: []string{"train", "merge", "--from", "d", "--out", "o", "--"}, want: []string{"--help", "--python", "--step"}},
		{name: "task explain", words: []string{"task", ""}, want: []string{"explain"}},
		{name: "task explain flags", words: []string{"task", "explain", "--"}, want: []string{"--agent", "--config", "--format", "--help", "--key", "--path", "--protocol"}},
		{name: "task explain protocols", words: []string{"task", "explain", "--protocol", ""}, want: []string{"anthropic", "azure-openai", "azure-responses", "bedrock", "gemini", "openai", "responses"}},
		{name: "task explain body", words: []string{"task", "explain", ""}, want: []string{wantFiles}},
		{name: "injector flags", words: []string{"inject", "serve", "--tls-"}, want: []string{"--tls-cert", "--tls-key"}},
		{name: "help names commands", words: []string{"help", "tr"}, want: []string{"train"}},
		{name: "partition columns", words: []string{"replay", "export", "--partition-by", ""}, want: []string{"arm", "dt", "experiment", "hr", "task_id"}},
		{name: "the next partition column", words: []string{"replay", "export", "--partition-by", "dt,a"}, want: []string{"dt,arm"}},
		{name: "a spill directory", words: []string{"replay", "stats", "--spill-dir", ""}, want: []string{wantDirs}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := complete(t, c.words)
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

// TestCompletionFlagsAreReal: the flags completed as paths are flags of some command
// (a renamed flag would silently lose its completion otherwise).
func TestCompletionFlagsAreReal(t *testing.T) {
	c := &cli{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: noEnv}
	all := map[string]bool{}
	cobracli.Walk(c.root(), func(cmd *cobra.Command) {
		cmd.Flags().VisitAll(func(f *pflag.Flag) { all[f.Name] = true })
	})
	for _, f := range append(slices.Clone(fileFlags), dirFlags...) {
		if !all[f] {
			t.Errorf("--%s completes paths, but no command has it", f)
		}
	}
}

func TestCompletionScripts(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"completion", "bash"}, 0, "complete -o default -F __start_camproxy camproxy"},
		{[]string{"completion", "zsh"}, 0, "#compdef camproxy"},
		{[]string{"completion", "fish"}, 0, "complete -c camproxy"},
		{[]string{"completion", "-h"}, 0, "source <(camproxy completion bash)"},
		{[]string{"completion", "--help"}, 0, "source <(camproxy completion bash)"},
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
			_, script, _ := runCmd(t, nil, "completion", sh)
			if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
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
	// The script builds on bash-completion, as every distribution's interactive bash
	// has it (make test installs it).
	const bashCompletion = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(bashCompletion); err != nil {
		t.Skip("bash-completion not installed (scripts/test-deps.sh installs it)")
	}
	_, bashScript, _ := runCmd(t, nil, "completion", "bash")
	bashScript = "source " + bashCompletion + "\n" + bashScript
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
			// Outside a real TAB, compopt cannot change the options of the completion
			// in progress: record what the script asks, and do what bash's
			// "complete -o default" does when COMPREPLY is empty (complete files),
			// unless the script turned it off.
			script := `compopt() { [[ " $* " == *" +o default "* ]] && NODEFAULT=1; return 0; }
type() { if [[ "$*" == "-t compopt" ]]; then echo builtin; else builtin type "$@"; fi; }
` + bashScript + `
read -r -a COMP_WORDS <<< "$LINE"
[[ "$LINE" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMP_LINE="$LINE" COMP_POINT=${#LINE}
__start_camproxy
if [[ ${#COMPREPLY[@]} -eq 0 && -z "$NODEFAULT" ]]; then
  COMPREPLY=($(compgen -f -- "${COMP_WORDS[COMP_CWORD]}"))
fi
printf '%s\n' "${COMPREPLY[@]}" | sort
`
			cmd := exec.Command(bash, "--norc", "--noprofile", "-c", script)
			cmd.Dir = work
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "LINE="+c.line)
			out, err := cmd.Output() // bash's complaints (compopt outside a real TAB) on stderr
			if err != nil {
				t.Fatalf("bash: %v\n%s", err, out)
			}
			if got := strings.TrimRight(string(out), "\n"); got != c.want {
				t.Errorf("%q<TAB> completes to\n%s\nwant\n%s", c.line, got, c.want)
			}
		})
	}
}
