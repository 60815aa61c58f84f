// Command camproxy is the CLI: serve the gateway, work with the replay buffer, report,
// and train the CAM. main only wires signals and exit codes; run (cli.go) builds the
// command tree and runs it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
	os.Exit(exitCode(err, os.Stderr))
}

// usageError is bad usage or bad config: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// exitStatus is a launched command that failed: camproxy exits with its status.
type exitStatus struct {
	code int
	msg  string
}

func (e *exitStatus) Error() string { return e.msg }

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "camproxy:", err)
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	var es *exitStatus
	if errors.As(err, &es) && es.code > 0 {
		return es.code
	}
	return 1
}
