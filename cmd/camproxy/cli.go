package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/camproxy/camproxy/internal/suggest"
)

// cli is what every command takes from the process: its streams and environment.
// Commands read flags into variables their constructor closes over.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) (string, bool)

	// flagProblems are the flag errors of the command line being run, found before
	// cobra parses it: unknown flags and values their flag refused. They are reported
	// with the command's own checks, all at once.
	flagProblems []string
}

// run builds the command tree and runs args on it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) (string, bool)) error {
	c := &cli{stdin: os.Stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	return c.execute(ctx, args)
}

// execute runs args on the command tree with c's streams.
func (c *cli) execute(ctx context.Context, args []string) error {
	root := c.root()
	if len(args) == 0 {
		fmt.Fprint(c.stderr, root.UsageString())
		return usagef("no command given")
	}
	args = c.prepare(root, args)
	root.SetArgs(args)
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetIn(c.stdin)
	return root.ExecuteContext(ctx)
}

func (c *cli) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "camproxy",
		Short: "A gateway that makes LLM agents better without touching their code",
		Long: `camproxy sits between an agent and its model provider. It finds the agent's task,
adds task-specific context (from a Context Augmentation Model, a playbook or
retrieval), keeps it the same for every turn of the episode, records the
trajectory and the reward the harness reports, and splits traffic between arms so
the lift is measured. Offline it trains the CAM from what it recorded.`,
		Example: `  camproxy serve --config camproxy.yaml
  camproxy replay stats
  camproxy report --format html --out report.html`,
		Version:       versionString(),
		SilenceErrors: true, // main prints the error once, with its exit status
		SilenceUsage:  true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	// A command that holds others is run through one of them: its usage line is
	// "camproxy replay COMMAND", not also "camproxy replay [flags]".
	root.SetUsageTemplate(strings.NewReplacer(
		"Usage:{{if .Runnable}}", "Usage:{{if and .Runnable (not .HasAvailableSubCommands)}}",
		"{{.CommandPath}} [command]{{end}}", "{{.CommandPath}} COMMAND{{end}}",
		`Use "{{.CommandPath}} [command] --help"`, `Use "{{.CommandPath}} COMMAND --help"`,
	).Replace(root.UsageTemplate()))
	c.holdsCommands(root)
	root.CompletionOptions.DisableDefaultCmd = true // ours says how to install the scripts
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return c.problemsOf(cmd, []string{err.Error()})
	})
	root.AddCommand(
		c.serveCmd(),
		c.replayCmd(),
		c.reportCmd(),
		c.trainCmd(),
		c.injectCmd(),
		c.configCmd(),
		c.taskCmd(),
		c.keyCmd(),
		c.devCmd(),
		c.completionCmd(),
		c.versionCmd(),
	)
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [COMMAND]",
		Short: "Help about any command",
		Long:  "Help about any command: what it does, an example, and every flag.",
		RunE: func(cmd *cobra.Command, args []string) error {
			target, rest, err := root.Find(args)
			if target == nil || err != nil || len(rest) > 0 {
				if target == nil || err != nil {
					target = root
				}
				bad := args[len(args)-1]
				if len(rest) > 0 {
					bad = rest[0]
				}
				names := subcommandNames(target)
				return usagef("help: no command %q in %s: want %s%s", bad, target.CommandPath(), strings.Join(names, ", "), didYouMean(bad, names, "%q"))
			}
			return target.Help()
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			target, _, _ := root.Find(args)
			var names []cobra.Completion
			for _, s := range target.Commands() {
				if s.IsAvailableCommand() && strings.HasPrefix(s.Name(), toComplete) {
					names = append(names, s.Name())
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
	})
	walk(root, func(cmd *cobra.Command) {
		// Unknown flags are found by prepare, so that they are reported with the
		// rest; the parser skips them instead of stopping at the first.
		cmd.FParseErrWhitelist.UnknownFlags = true
		cmd.Flags().VisitAll(func(f *pflag.Flag) { c.completeValues(cmd, f) })
		if cmd.ValidArgsFunction == nil && cmd.ValidArgs == nil {
			cmd.ValidArgsFunction = cobra.NoFileCompletions
		}
	})
	return root
}

// walk calls fn on cmd and every command under it.
func walk(cmd *cobra.Command, fn func(*cobra.Command)) {
	fn(cmd)
	for _, s := range cmd.Commands() {
		walk(s, fn)
	}
}

// group is a command that only holds others.
func (c *cli) group(use, short, example string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{Use: use, Short: short, Example: example}
	g.AddCommand(subs...)
	c.holdsCommands(g)
	return g
}

// holdsCommands makes cmd say, run without a command or with one it does not have,
// which it has (and which one was probably meant).
func (c *cli) holdsCommands(cmd *cobra.Command) {
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		names := subcommandNames(cmd)
		var p problems
		switch {
		case len(args) > 0:
			p.add("unknown command %q: want %s%s", args[0], strings.Join(names, ", "), didYouMean(args[0], names, "%q"))
		case len(c.flagProblems) == 0:
			p.add("want a command: %s (%s --help says what each does)", strings.Join(names, ", "), cmd.CommandPath())
		}
		return c.problemsOf(cmd, p)
	}
	cmd.RunE = func(*cobra.Command, []string) error { return nil } // Args refused it already
}

func subcommandNames(cmd *cobra.Command) []string {
	var names []string
	for _, s := range cmd.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return names
}

// checks makes a command's Args from its checks of the command line: everything
// that can be told wrong before any work starts, reported at once with the flag
// problems prepare found.
func (c *cli) checks(check func(p *problems, args []string)) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		var p problems
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if req := f.Annotations[cobra.BashCompOneRequiredFlag]; len(req) > 0 && req[0] == "true" && !f.Changed {
				p.add("--%s is required", f.Name)
			}
		})
		if check != nil {
			check(&p, args)
		}
		return c.problemsOf(cmd, p)
	}
}

// problemsOf is the usage error naming the flag problems and then p, or nil.
func (c *cli) problemsOf(cmd *cobra.Command, p problems) error {
	return problems(append(slices.Clip(c.flagProblems), p...)).err(commandName(cmd))
}

// commandName is a command as the user typed it, without "camproxy " (the root is
// "": its errors are said by main's "camproxy: " alone).
func commandName(cmd *cobra.Command) string {
	if !cmd.HasParent() {
		return ""
	}
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// didYouMean is "; did you mean X?" (or "X or Y", suggest.Candidates), or "" when
// nothing is near; format quotes each name.
func didYouMean(typed string, names []string, format string) string {
	var quoted []string
	for _, n := range suggest.Candidates(typed, names) {
		quoted = append(quoted, fmt.Sprintf(format, n))
	}
	if len(quoted) == 0 {
		return ""
	}
	return "; did you mean " + orList(quoted) + "?"
}

// problems are what is wrong with a command line, each a short sentence naming the
// flag or argument.
type problems []string

func (p *problems) add(format string, a ...any) { *p = append(*p, fmt.Sprintf(format, a...)) }

// noArgs is a command that takes no argument.
func (p *problems) noArgs(args []string) {
	if len(args) > 0 {
		p.add("unexpected argument %q", args[0])
	}
}

// err is the usage error of cmd naming every problem, or nil.
func (p problems) err(cmd string) error {
	prefix := cmd + ": "
	if cmd == "" {
		prefix = ""
	}
	switch len(p) {
	case 0:
		return nil
	case 1:
		return usagef("%s%s", prefix, p[0])
	}
	return usagef("%s%d problems:\n  %s", prefix, len(p), strings.Join(p, "\n  "))
}

// prepare finds the command args name and what is wrong with its flags before
// cobra parses them: a flag the command does not have (with the one probably
// meant), and a value its flag refuses. It rewrites -name to --name for a long
// flag, the form Go's flag package accepted before the tree moved to pflag.
func (c *cli) prepare(root *cobra.Command, args []string) []string {
	args = c.rootFlags(root, args)
	cmd, _, err := root.Find(args)
	if err != nil || cmd == nil {
		return args
	}
	cmd.InitDefaultHelpFlag()
	cmd.InitDefaultVersionFlag()
	flags := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	flags.AddFlagSet(cmd.Flags())
	flags.AddFlagSet(cmd.InheritedFlags())
	var names []string
	flags.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })

	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if a == "--" {
			break
		}
		if len(a) < 2 || a[0] != '-' || isNumber(a) {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		long := strings.HasPrefix(a, "--")
		if !long && len(name) > 1 && flags.Lookup(name) != nil {
			out[i], long = "-"+a, true // -name → --name
		}
		var f *pflag.Flag
		if long {
			f = flags.Lookup(name)
		} else if len(name) == 1 {
			f = flags.ShorthandLookup(name)
		}
		if f == nil {
			c.flagProblems = append(c.flagProblems, "unknown flag "+strings.SplitN(out[i], "=", 2)[0]+didYouMean(name, names, "--%s"))
			continue
		}
		if !hasValue && f.NoOptDefVal == "" && i+1 < len(out) {
			value, hasValue = out[i+1], true
			i++
		}
		if hasValue && f.NoOptDefVal == "" {
			if err := validValue(f, value); err != nil {
				c.flagProblems = append(c.flagProblems, fmt.Sprintf("--%s %q: %v", f.Name, value, err))
				// Reported here, not again by the parser: it keeps the default for
				// the refused value, and the command's checks run with the rest.
				f.Value = lenient{f.Value, *f}
			}
		}
	}
	return out
}

// rootFlags takes the flags given before the command out of args when camproxy does
// not have them (--bogus replay stats): reported, and not left to swallow the
// command as their value.
func (c *cli) rootFlags(root *cobra.Command, args []string) []string {
	root.InitDefaultHelpFlag()
	root.InitDefaultVersionFlag()
	var names []string
	root.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	out := args[:0:0]
	for i, a := range args {
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return append(out, args[i:]...)
		}
		name := strings.SplitN(strings.TrimLeft(a, "-"), "=", 2)[0]
		if root.Flags().Lookup(name) != nil || len(name) == 1 && root.Flags().ShorthandLookup(name) != nil {
			out = append(out, a)
			continue
		}
		c.flagProblems = append(c.flagProblems, "unknown flag "+strings.SplitN(a, "=", 2)[0]+didYouMean(name, names, "--%s"))
	}
	return out
}

// validValue is whether f takes value, tried on a flag of the same type so that the
// real one is set once, by the parser.
func validValue(f *pflag.Flag, value string) error {
	if c, ok := f.Value.(*choice); ok {
		return c.check(value)
	}
	probe := pflag.NewFlagSet("probe", pflag.ContinueOnError)
	switch f.Value.Type() {
	case "int":
		probe.Int("v", 0, "")
	case "int64":
		probe.Int64("v", 0, "")
	case "float64":
		probe.Float64("v", 0, "")
	case "bool":
		probe.Bool("v", false, "")
	case "duration":
		probe.Duration("v", 0, "")
	default:
		return nil // strings, lists: anything goes; the command checks what it means
	}
	if err := probe.Set("v", value); err != nil {
		return errors.New(map[string]string{
			"int": "want an integer", "int64": "want an integer", "float64": "want a number",
			"bool": "want true or false", "duration": "want a duration (90s, 5m, 1h30m)",
		}[f.Value.Type()])
	}
	return nil
}

// lenient sets what it can: a value prepare already reported is left at its default
// (the parser would otherwise stop at it, hiding the problems after it; and pflag's
// numbers would set the zero a refused value parses to).
type lenient struct {
	pflag.Value
	flag pflag.Flag // as defined: its type and name
}

func (l lenient) Set(s string) error {
	if validValue(&l.flag, s) != nil {
		return nil // reported by prepare
	}
	return l.Value.Set(s)
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// choice is a flag whose value is one of a few words; the words are its completions
// and its type in the help.
type choice struct {
	value   *string
	options []string
}

// choiceVar defines a choice flag. def may be "" (not chosen: the command decides).
func choiceVar(f *pflag.FlagSet, p *string, name, def, usage string, options ...string) {
	*p = def
	f.Var(&choice{value: p, options: options}, name, usage)
}

func (c *choice) String() string { return *c.value }
func (c *choice) Type() string   { return strings.Join(c.options, "|") }

func (c *choice) Set(s string) error {
	if err := c.check(s); err != nil {
		return err
	}
	*c.value = s
	return nil
}

func (c *choice) check(s string) error {
	if slices.Contains(c.options, s) {
		return nil
	}
	return fmt.Errorf("want %s", orList(c.options))
}

// orList is "a", "a or b", "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// Flags whose value is a path: the shell completes files (or directories) for them.
var (
	fileFlags = []string{"config", "out", "data", "system-prompt", "user-prompt", "tls-cert", "tls-key", "seed"}
	dirFlags  = []string{"work-dir", "spill-dir"}
)

// completeValues tells the shell what f's values are: its choices, files, directories,
// or (any other value flag) nothing to complete.
func (c *cli) completeValues(cmd *cobra.Command, f *pflag.Flag) {
	var fn cobra.CompletionFunc
	switch v := f.Value.(type) {
	case *choice:
		fn = func(_ *cobra.Command, _ []string, typed string) ([]cobra.Completion, cobra.ShellCompDirective) {
			var words []cobra.Completion
			for _, o := range v.options {
				if strings.HasPrefix(o, typed) {
					words = append(words, o)
				}
			}
			return words, cobra.ShellCompDirectiveNoFileComp
		}
	default:
		switch {
		case f.NoOptDefVal != "": // a bool: no value to complete
			return
		case slices.Contains(fileFlags, f.Name) && f.Value.Type() == "string":
			fn = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return nil, cobra.ShellCompDirectiveDefault
			}
		case slices.Contains(dirFlags, f.Name):
			fn = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return nil, cobra.ShellCompDirectiveFilterDirs
			}
		default:
			fn = cobra.NoFileCompletions
		}
	}
	_ = cmd.RegisterFlagCompletionFunc(f.Name, fn) // each flag once per command
}
