package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// UsageError is bad usage or bad config: exit status 2.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

// Usagef is a UsageError.
func Usagef(format string, a ...any) error { return &UsageError{fmt.Sprintf(format, a...)} }

// ExitStatus is a launched command that failed: camproxy exits with its status.
type ExitStatus struct {
	Code int
	Msg  string
}

func (e *ExitStatus) Error() string { return e.Msg }

// ExitCode prints err (if any) on stderr after "camproxy: " and returns the process's
// exit status: 0, 2 for a UsageError, an ExitStatus's own, else 1.
func ExitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "camproxy:", err)
	var ue *UsageError
	if errors.As(err, &ue) {
		return 2
	}
	var es *ExitStatus
	if errors.As(err, &es) && es.Code > 0 {
		return es.Code
	}
	return 1
}

// OneLine folds a multi-line error message (some SDKs wrap their own) onto one line.
func OneLine(s string) string { return strings.NewReplacer("\r\n", " ", "\n", " ").Replace(s) }
