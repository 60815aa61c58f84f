// Command vulndb builds the Go vulnerability database that govulncheck reads offline
// (`-db file://DIR`) from the OSV records of a pinned golang.org/x/vulndb module
// version: the public database (vuln.go.dev) is not reachable from the build
// machines, but the module proxy serves the database's source like any module, and
// the module cache keeps it like any module.
//
//	go run ./internal/vulndb [-pin scripts/vulndb.pin] [-cache bin/vulndb]
//
// prints the database's directory, CACHE/VERSION, building it on first use. The pin
// file names the module version and its go.sum hash (h1:…), so a snapshot is
// verified as go.sum verifies a dependency; bumping the version in the pin file is
// how the snapshot updates. The layout is the database's v1 API as files:
// index/db.json, index/modules.json, index/vulns.json and ID/GO-YYYY-NNNN.json.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "vulndb:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("vulndb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pinFile := fs.String("pin", "scripts/vulndb.pin", "the file naming the golang.org/x/vulndb version and its h1: hash")
	cache := fs.String("cache", "bin/vulndb", "the directory the built databases are kept in, one per vulndb version")
	src := fs.String("src", "", "build from this vulndb source tree instead of the pinned module (tests)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return errors.New("no arguments expected")
	}
	b, err := os.ReadFile(*pinFile)
	if err != nil {
		return fmt.Errorf("reading the pin: %w", err)
	}
	p, err := parsePin(string(b))
	if err != nil {
		return fmt.Errorf("%s: %w", *pinFile, err)
	}
	dir, err := ensure(ctx, p, *cache, *src, goDownloader{})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, dir)
	return err
}
