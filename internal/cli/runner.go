package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/camproxy/camproxy/internal/suggest"
)

// Runner runs a command tree on a command line. Its zero value is ready; one Runner
// runs one command line.
type Runner struct {
	// flagProblems are the flag errors of the command line being run, found before
	// cobra parses it: unknown flags and values their flag refused. They are reported
	// with the command's own checks, all at once.
	flagProblems []string
}

// PathFlags name the flags whose value is a path: the shell completes files (or
// directories) for them.
type PathFlags struct{ Files, Dirs []string }

// Setup makes root, once its commands are added, a tree Execute runs: usage lines
// that say COMMAND, a help command that names what it does not know, flag errors
// and unknown commands reported as usage errors, and every flag's completions
// (choices, paths, or nothing).
func (r *Runner) Setup(root *cobra.Command, paths PathFlags) {
	root.SetVersionTemplate("{{.Version}}\n")
	// A command that holds others is run through one of them: its usage line is
	// "camproxy replay COMMAND", not also "camproxy replay [flags]".
	root.SetUsageTemplate(strings.NewReplacer(
		"Usage:{{if .Runnable}}", "Usage:{{if and .Runnable (not .HasAvailableSubCommands)}}",
		"{{.CommandPath}} [command]{{end}}", "{{.CommandPath}} COMMAND{{end}}",
		`Use "{{.CommandPath}} [command] --help"`, `Use "{{.CommandPath}} COMMAND --help"`,
	).Replace(root.UsageTemplate()))
	r.holdsCommands(root)
	root.CompletionOptions.DisableDefaultCmd = true // the tree's own says how to install the scripts
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return r.problemsOf(cmd, []string{err.Error()})
	})
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
				return Usagef("help: no command %q in %s: want %s%s", bad, target.CommandPath(), strings.Join(names, ", "), didYouMean(bad, names, "%q"))
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
	Walk(root, func(cmd *cobra.Command) {
		// Unknown flags are found by prepare, so that they are reported with the
		// rest; the parser skips them instead of stopping at the first.
		cmd.FParseErrWhitelist.UnknownFlags = true
		cmd.Flags().VisitAll(func(f *pflag.Flag) { completeValues(cmd, f, paths) })
		if cmd.ValidArgsFunction == nil && cmd.ValidArgs == nil {
			cmd.ValidArgsFunction = cobra.NoFileCompletions
		}
	})
}

// Execute runs args on root (made ready by Setup). With no argument it prints the
// usage on root's error stream: a usage error.
func (r *Runner) Execute(ctx context.Context, root *cobra.Command, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(root.ErrOrStderr(), root.UsageString())
		return Usagef("no command given")
	}
	root.SetArgs(r.prepare(root, args))
	return root.ExecuteContext(ctx)
}

// Walk calls fn on cmd and every command under it.
func Walk(cmd *cobra.Command, fn func(*cobra.Command)) {
	fn(cmd)
	for _, s := range cmd.Commands() {
		Walk(s, fn)
	}
}

// Group is a command that only holds others.
func (r *Runner) Group(use, short, example string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{Use: use, Short: short, Example: example}
	g.AddCommand(subs...)
	r.holdsCommands(g)
	return g
}

// holdsCommands makes cmd say, run without a command or with one it does not have,
// which it has (and which one was probably meant).
func (r *Runner) holdsCommands(cmd *cobra.Command) {
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		names := subcommandNames(cmd)
		var p Problems
		switch {
		case len(args) > 0:
			p.Add("unknown command %q: want %s%s", args[0], strings.Join(names, ", "), didYouMean(args[0], names, "%q"))
		case len(r.flagProblems) == 0:
			p.Add("want a command: %s (%s --help says what each does)", strings.Join(names, ", "), cmd.CommandPath())
		}
		return r.problemsOf(cmd, p)
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

// Checks makes a command's Args from its checks of the command line: everything
// that can be told wrong before any work starts (required flags first), reported at
// once with the flag problems Execute found.
func (r *Runner) Checks(check func(p *Problems, args []string)) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		var p Problems
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if req := f.Annotations[cobra.BashCompOneRequiredFlag]; len(req) > 0 && req[0] == "true" && !f.Changed {
				p.Add("--%s is required", f.Name)
			}
		})
		if check != nil {
			check(&p, args)
		}
		return r.problemsOf(cmd, p)
	}
}

// problemsOf is the usage error naming the flag problems and then p, or nil.
func (r *Runner) problemsOf(cmd *cobra.Command, p Problems) error {
	return Problems(append(slices.Clip(r.flagProblems), p...)).Err(CommandName(cmd))
}

// CommandName is a command as the user typed it, without the root's name (the root
// is "": its errors are said by the "camproxy: " ExitCode prints alone).
func CommandName(cmd *cobra.Command) string {
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

// prepare finds the command args name and what is wrong with its flags before
// cobra parses them: a flag the command does not have (with the one probably
// meant), and a value its flag refuses. It rewrites -name to --name for a long
// flag, the form Go's flag package accepted before the tree moved to pflag.
func (r *Runner) prepare(root *cobra.Command, args []string) []string {
	args = r.rootFlags(root, args)
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
			r.flagProblems = append(r.flagProblems, "unknown flag "+strings.SplitN(out[i], "=", 2)[0]+didYouMean(name, names, "--%s"))
			continue
		}
		if !hasValue && f.NoOptDefVal == "" && i+1 < len(out) {
			value, hasValue = out[i+1], true
			i++
		}
		if hasValue && f.NoOptDefVal == "" {
			if err := validValue(f, value); err != nil {
				r.flagProblems = append(r.flagProblems, fmt.Sprintf("--%s %q: %v", f.Name, value, err))
				// Reported here, not again by the parser: it keeps the default for
				// the refused value, and the command's checks run with the rest.
				f.Value = lenient{f.Value, *f}
			}
		}
	}
	return out
}

// rootFlags takes the flags given before the command out of args when the root does
// not have them (--bogus replay stats): reported, and not left to swallow the
// command as their value.
func (r *Runner) rootFlags(root *cobra.Command, args []string) []string {
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
		r.flagProblems = append(r.flagProblems, "unknown flag "+strings.SplitN(a, "=", 2)[0]+didYouMean(name, names, "--%s"))
	}
	return out
}
