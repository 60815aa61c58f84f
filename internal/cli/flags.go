package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// choice is a flag whose value is one of a few words; the words are its completions
// and its type in the help.
type choice struct {
	value   *string
	options []string
}

// ChoiceVar defines a choice flag. def may be "" (not chosen: the command decides).
func ChoiceVar(f *pflag.FlagSet, p *string, name, def, usage string, options ...string) {
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

// completeValues tells the shell what f's values are: its choices, files, directories,
// or (any other value flag) nothing to complete.
func completeValues(cmd *cobra.Command, f *pflag.Flag, paths PathFlags) {
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
		case slices.Contains(paths.Files, f.Name) && f.Value.Type() == "string":
			fn = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return nil, cobra.ShellCompDirectiveDefault
			}
		case slices.Contains(paths.Dirs, f.Name):
			fn = func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return nil, cobra.ShellCompDirectiveFilterDirs
			}
		default:
			fn = cobra.NoFileCompletions
		}
	}
	_ = cmd.RegisterFlagCompletionFunc(f.Name, fn) // each flag once per command
}

// LogFlags are the flags of a long-running command's log.
type LogFlags struct{ Level, Format string }

// Define defines --log-level and --log-format.
func (l *LogFlags) Define(f *pflag.FlagSet) {
	ChoiceVar(f, &l.Level, "log-level", "info", "least severe log level written", "debug", "info", "warn", "error")
	ChoiceVar(f, &l.Format, "log-format", "json", "log line format", "json", "text")
}

// Logger writes to w as the flags say (choice flags hold only valid words).
func (l LogFlags) Logger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(l.Level))
	opts := &slog.HandlerOptions{Level: level}
	if l.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
