package cli

import (
	"io"
	"os"

	"github.com/spf13/cobra"
)

// CompleteFiles completes a command's arguments as paths (a ValidArgsFunction).
func CompleteFiles(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return nil, cobra.ShellCompDirectiveDefault
}

// ToTerminal is whether w is a terminal (a character device, not a file or pipe).
func ToTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
