// Command camproxy is the CLI: serve the gateway, work with the replay buffer, report,
// and train the CAM. main only wires signals and exit codes; run (cli.go) builds the
// command tree and runs it. What each command does is its packages'; this command
// wires flags to them (internal/cli is the layer over cobra).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	cobracli "github.com/camproxy/camproxy/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
	os.Exit(cobracli.ExitCode(err, os.Stderr))
}
