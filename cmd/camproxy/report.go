package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/report"
)

type reportArgs struct {
	from, experiment, control, format, out string
}

func parseReportArgs(args []string, stderr io.Writer) (reportArgs, error) {
	var a reportArgs
	flags := newFlagSet("report", stderr)
	flags.StringVar(&a.from, "from", defaultReplayURI, "replay URI to read (file://, redis://, s3://)")
	flags.StringVar(&a.experiment, "experiment", "", "only episodes of this experiment (those that record one; see the README)")
	flags.StringVar(&a.control, "control", "", `arm the others are compared to (default "baseline" if present, else the first arm by name)`)
	flags.StringVar(&a.format, "format", "", "text, json or html (default html for an --out ending in .html, json for .json, else text)")
	flags.StringVar(&a.out, "out", "", "write to this file instead of stdout")
	pos, err := parseInterleaved(flags, args)
	if err != nil {
		return a, err
	}
	if len(pos) > 0 {
		return a, usagef("report: unexpected argument %q", pos[0])
	}
	if a.out == "-" {
		a.out = ""
	}
	if a.format == "" {
		switch strings.ToLower(filepath.Ext(a.out)) {
		case ".html", ".htm":
			a.format = "html"
		case ".json":
			a.format = "json"
		default:
			a.format = "text"
		}
	}
	if a.format != "text" && a.format != "json" && a.format != "html" {
		return a, usagef("report: --format %q: want text, json or html", a.format)
	}
	if a.out != "" {
		dir := filepath.Dir(a.out)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return a, usagef("report: --out %s: directory %s does not exist", a.out, dir)
		}
	}
	return a, nil
}

// reportCmd is `camproxy report`: per-arm outcomes and each arm's lift over the
// control arm. A bad or unreadable --from is bad usage (exit 2); a buffer with no
// episode is a run-time failure (exit 1): there is nothing to report yet.
func reportCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a, err := parseReportArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	b, err := readBuffer(ctx, "report", a.from)
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) || ctx.Err() != nil {
			return err
		}
		return usagef("%s", oneLine(err.Error()))
	}
	src := replay.Redact(a.from)
	r, err := report.New(b, report.Options{Source: src, Experiment: a.experiment, Control: a.control})
	switch {
	case errors.Is(err, report.ErrNoControl):
		return usagef("report: --control: %v", err)
	case errors.Is(err, report.ErrEmpty):
		return fmt.Errorf("report: %v in %s: record some traffic (or import trajectories with camproxy replay import) first", err, src)
	case err != nil:
		return fmt.Errorf("report: %w", err)
	}
	write := r.WriteText
	switch a.format {
	case "json":
		write = r.WriteJSON
	case "html":
		write = r.WriteHTML
	}
	if a.out == "" {
		return write(stdout)
	}
	if err := writeFileAtomic(a.out, write); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	fmt.Fprintf(stdout, "wrote the %s report to %s\n", a.format, a.out)
	return nil
}

// oneLine folds a multi-line error (some SDKs wrap their own) onto one line.
func oneLine(s string) string { return strings.NewReplacer("\r\n", " ", "\n", " ").Replace(s) }
