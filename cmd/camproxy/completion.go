package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

const completionUsage = `Usage:
  camproxy completion bash|zsh|fish    print the shell completion script

  bash:  source <(camproxy completion bash)          # or save it under /etc/bash_completion.d/
  zsh:   camproxy completion zsh > "${fpath[1]}/_camproxy"   # then restart zsh
  fish:  camproxy completion fish > ~/.config/fish/completions/camproxy.fish

The scripts ask camproxy itself what fits (camproxy __complete WORDS…), so they
follow the installed version's commands and flags.`

// commands are camproxy's commands and their subcommands (nil: a command of its
// own, whose flags are read from its -h).
var commands = map[string][]string{
	"serve":      nil,
	"replay":     {"import", "export", "stats"},
	"report":     nil,
	"train":      {"reflect", "sft", "grpo", "dpo"},
	"inject":     {"serve"},
	"config":     {"check"},
	"task":       {"explain"},
	"dev":        {"upstream"},
	"completion": nil,
	"version":    nil,
	"help":       nil,
}

// Value completions: a flag's fixed choices (by command, then for any command), or
// a file or directory.
var (
	flagChoices = map[string][]string{
		"replay import --format":  {"tau-bench", "jsonl"},
		"replay export --format":  {"jsonl", "parquet"},
		"replay stats --format":   {"text", "json"},
		"report --format":         {"text", "json", "html"},
		"task explain --format":   {"text", "json"},
		"task explain --protocol": {"openai", "responses", "anthropic", "bedrock"},
		"train sft --launch":      {"local"},
		"train dpo --launch":      {"local"},
		"train grpo --launch":     {"local", "ray"},
		"--log-level":             {"debug", "info", "warn", "error"},
		"--log-format":            {"json", "text"},
		"--progress":              {"auto", "bar", "lines", "off"},
		"--finetuning":            {"full", "lora", "freeze"},
		"--deepspeed":             {"z3", "z2", "none"},
		"--report-to":             {"none", "wandb", "tensorboard"},
		"--reward-manager":        {"loop", "batch"},
		"--pref-loss":             {"sigmoid", "orpo", "simpo", "hinge", "ipo"},
		"--image-pull-policy":     {"Always", "IfNotPresent", "Never"},
	}
	fileFlags = []string{"--config", "--out", "--data", "--system-prompt", "--user-prompt", "--tls-cert", "--tls-key"}
	dirFlags  = []string{"--work-dir"}
	// Leaves that take files as arguments.
	fileArgs = []string{"replay import", "config check", "task explain"}
)

// Completion directives: instead of words, the shell completes paths.
const (
	completeFiles = ":files"
	completeDirs  = ":dirs"
)

// completionCmd is `camproxy completion SHELL`.
func completionCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		fmt.Fprintln(stderr, completionUsage)
		return usagef("completion: want one shell: bash, zsh or fish")
	}
	script, ok := completionScripts[args[0]]
	switch {
	case args[0] == "-h" || args[0] == "--help":
		fmt.Fprintln(stdout, completionUsage)
		return nil
	case !ok:
		fmt.Fprintln(stderr, completionUsage)
		return usagef("completion: unknown shell %q: want bash, zsh or fish", args[0])
	}
	_, err := io.WriteString(stdout, script)
	return err
}

// completeCmd is the hidden `camproxy __complete WORDS… CURRENT`: one candidate a
// line, or a single directive line (:files, :dirs).
func completeCmd(ctx context.Context, args []string, stdout io.Writer) error {
	for _, c := range complete(ctx, args) {
		fmt.Fprintln(stdout, c)
	}
	return nil
}

// complete returns the candidates for the last of words (the word being typed, maybe
// empty), given the words before it.
func complete(ctx context.Context, words []string) []string {
	if len(words) == 0 {
		words = []string{""}
	}
	cur, prev := words[len(words)-1], words[:len(words)-1]
	if len(prev) == 0 {
		names := make([]string, 0, len(commands))
		for name := range commands {
			names = append(names, name)
		}
		return matching(names, cur)
	}
	subs, ok := commands[prev[0]]
	if !ok {
		return nil // not a camproxy command
	}
	path, rest := prev[:1], prev[1:]
	if subs != nil {
		if len(rest) == 0 {
			return matching(subs, cur)
		}
		if !slices.Contains(subs, rest[0]) {
			return nil
		}
		path, rest = prev[:2], prev[2:]
	}
	cmd := strings.Join(path, " ")
	switch cmd {
	case "completion":
		if len(rest) == 0 {
			return matching([]string{"bash", "zsh", "fish"}, cur)
		}
		return nil
	case "help":
		return nil
	}
	flags := leafFlags(ctx, path)
	// Is the word being typed the value of the flag before it?
	if len(rest) > 0 {
		last := rest[len(rest)-1]
		bare := strings.TrimLeft(last, "-")
		if strings.HasPrefix(last, "-") && !strings.Contains(last, "=") && flags[bare] {
			name := "--" + bare
			if c, ok := flagChoices[cmd+" "+name]; ok {
				return matching(c, cur)
			}
			if c, ok := flagChoices[name]; ok {
				return matching(c, cur)
			}
			switch {
			case slices.Contains(fileFlags, name):
				return []string{completeFiles}
			case slices.Contains(dirFlags, name):
				return []string{completeDirs}
			}
			return nil // a free value: a model name, a URL…
		}
	}
	if strings.HasPrefix(cur, "-") {
		names := make([]string, 0, len(flags))
		for f := range flags {
			names = append(names, "--"+f)
		}
		return matching(names, cur)
	}
	if slices.Contains(fileArgs, cmd) {
		return []string{completeFiles}
	}
	return nil
}

// flagLine is a flag in the flag package's -h listing: "  -name" for a bool, else
// "  -name type".
var flagLine = regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9._-]*)( \S+)?(\t|$)`)

// leafFlags asks the command for its flags (its -h listing, which parses flags and
// does nothing else): name → whether it takes a value.
func leafFlags(ctx context.Context, path []string) map[string]bool {
	var help bytes.Buffer
	noEnv := func(string) (string, bool) { return "", false }
	_ = run(ctx, append(slices.Clone(path), "-h"), io.Discard, &help, noEnv)
	out := map[string]bool{}
	sc := bufio.NewScanner(&help)
	for sc.Scan() {
		if m := flagLine.FindStringSubmatch(sc.Text()); m != nil && m[1] != "h" && m[1] != "help" {
			out[m[1]] = m[2] != ""
		}
	}
	return out
}

func matching(words []string, prefix string) []string {
	var out []string
	for _, w := range words {
		if strings.HasPrefix(w, prefix) {
			out = append(out, w)
		}
	}
	slices.Sort(out)
	return out
}

var completionScripts = map[string]string{
	"bash": `# bash completion for camproxy (camproxy completion bash)
_camproxy() {
    local cur="${COMP_WORDS[COMP_CWORD]}" IFS=$'\n' out
    out=($("${COMP_WORDS[0]}" __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null)) || return 0
    case "${out[0]}" in
    :files) COMPREPLY=($(compgen -f -- "$cur")); compopt -o filenames 2>/dev/null ;;
    :dirs) COMPREPLY=($(compgen -d -- "$cur")); compopt -o filenames 2>/dev/null ;;
    *) COMPREPLY=("${out[@]}") ;;
    esac
}
complete -F _camproxy camproxy
`,
	"zsh": `#compdef camproxy
# zsh completion for camproxy (camproxy completion zsh)
_camproxy() {
  local -a out
  out=(${(f)"$(${words[1]} __complete "${(@)words[2,CURRENT]}" 2>/dev/null)"})
  case "${out[1]}" in
    :files) _files ;;
    :dirs) _files -/ ;;
    *) (( ${#out} )) && compadd -- "${out[@]}" ;;
  esac
}
if [ "${funcstack[1]}" = "_camproxy" ]; then
  _camproxy "$@"
else
  compdef _camproxy camproxy
fi
`,
	"fish": `# fish completion for camproxy (camproxy completion fish)
function __camproxy_complete
    set -l words (commandline -opc)
    set -l out (command $words[1] __complete $words[2..-1] (commandline -ct) 2>/dev/null)
    switch "$out[1]"
        case :files
            __fish_complete_path (commandline -ct)
        case :dirs
            __fish_complete_directories (commandline -ct)
        case '*'
            printf '%s\n' $out
    end
end
complete -c camproxy -f -a '(__camproxy_complete)'
`,
}
