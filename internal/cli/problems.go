package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
)

// Problems are what is wrong with a command line, each a short sentence naming the
// flag or argument.
type Problems []string

// Add is a problem.
func (p *Problems) Add(format string, a ...any) { *p = append(*p, fmt.Sprintf(format, a...)) }

// NoArgs is a problem when a command that takes no argument got one.
func (p *Problems) NoArgs(args []string) {
	if len(args) > 0 {
		p.Add("unexpected argument %q", args[0])
	}
}

// AtLeast is a problem when an integer flag is below its least value.
func (p *Problems) AtLeast(flag string, v, least int, want string) {
	if v < least {
		p.Add("%s %d: want %s", flag, v, want)
	}
}

// Dir is a problem when a directory flag is set to something that is not one.
func (p *Problems) Dir(flag, path string) {
	if path != "" && !IsDir(path) {
		p.Add("%s %s is not a directory", flag, path)
	}
}

// IsDir is whether path is a directory.
func IsDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// Err is the usage error of cmd (as typed, without "camproxy "; "" for the root)
// naming every problem, or nil.
func (p Problems) Err(cmd string) error {
	prefix := cmd + ": "
	if cmd == "" {
		prefix = ""
	}
	switch len(p) {
	case 0:
		return nil
	case 1:
		return Usagef("%s%s", prefix, p[0])
	}
	return Usagef("%s%d problems:\n  %s", prefix, len(p), strings.Join(p, "\n  "))
}

// Bounds are the least values of a command's integer flags, declared with the flags
// and checked together, in the order they were defined.
type Bounds []bound

type bound struct {
	flag  string
	v     *int
	least int
	want  string
}

// IntVar defines an integer flag whose value must be least or more; want says so in
// the problem ("1 or more", "0 (all) or more").
func (b *Bounds) IntVar(f *pflag.FlagSet, p *int, name string, value, least int, want, usage string) {
	f.IntVar(p, name, value, usage)
	*b = append(*b, bound{flag: "--" + name, v: p, least: least, want: want})
}

// Check adds a problem (AtLeast) for each flag below its least value.
func (b Bounds) Check(p *Problems) {
	for _, x := range b {
		p.AtLeast(x.flag, *x.v, x.least, x.want)
	}
}

// OutDir is a problem when the directory an output file goes into does not exist:
// found before a possibly long read, not after it. "" and "-" (stdout) have none.
func (p *Problems) OutDir(flag, out string) {
	if out == "" || out == "-" {
		return
	}
	dir := filepath.Dir(out)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		p.Add("%s %s: directory %s does not exist", flag, out, dir)
	}
}
