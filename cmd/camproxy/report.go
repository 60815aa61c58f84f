package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	cobracli "github.com/camproxy/camproxy/internal/cli"
	"github.com/camproxy/camproxy/internal/fsx"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/replay/location"
	"github.com/camproxy/camproxy/report"
)

func (c *cli) reportCmd() *cobra.Command {
	var in bufferFlags
	var control, format, out string
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Each arm's outcomes and its lift over the control arm",
		Long: `Report each arm's reward (mean, 95% interval), success rate, pass@k, turns, time
and context latency, and its lift over the control arm with a p-value and the
episodes per arm a decisive answer needs.

A buffer whose episodes belong to several experiments (a gateway's agents) gives
a report per experiment, never one row for two experiments' arms of one name;
--experiment NAME reports that one.

A buffer with no episode fails (exit 1): there is nothing to report yet.`,
		Example: `  camproxy report
  camproxy report --experiment support
  camproxy report --format html --out report.html
  camproxy report --from s3://my-bucket/replay --control baseline --format json`,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) {
			p.NoArgs(args)
			in.check(p)
			if out == "-" {
				out = ""
			}
			if format == "" {
				format = report.FormatOf(out)
			}
			p.OutDir("--out", out)
		}),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.report(cmd.Context(), in, report.Options{Experiment: in.experiment, Control: control}, format, out)
		},
	}
	f := cmd.Flags()
	in.define(f)
	f.StringVar(&control, "control", "", `arm the others are compared to (default "baseline" if present, else the first arm by name)`)
	cobracli.ChoiceVar(f, &format, "format", "", "output format (default html for an --out ending in .html, json for .json, else text)", report.FormatText, report.FormatJSON, report.FormatHTML)
	f.StringVar(&out, "out", "", "write to this file instead of stdout")
	return cmd
}

// report is `camproxy report`. A bad or unreadable --from is bad usage (exit 2); a
// buffer with no episode is a run-time failure (exit 1).
func (c *cli) report(ctx context.Context, in bufferFlags, o report.Options, format, out string) error {
	o.Source = location.Redact(in.from)
	// One streaming pass: a slim copy of each episode, never its messages.
	var r report.Reports
	var err error // the report's own, apart from the read's
	_, rerr := in.scan(ctx, "report", c.stderr, true, func(src replay.Source, ro replay.ReadOptions) (replay.Summary, error) {
		var sum replay.Summary
		r, sum, err = report.SplitStream(ctx, src, ro, o)
		if errors.Is(err, report.ErrEmpty) || errors.Is(err, report.ErrNoControl) {
			return sum, nil // read whole: the report's error follows
		}
		return sum, err
	})
	if rerr != nil {
		var ue *cobracli.UsageError
		if errors.As(rerr, &ue) || ctx.Err() != nil {
			return rerr
		}
		return cobracli.Usagef("%s", cobracli.OneLine(rerr.Error()))
	}
	switch {
	case errors.Is(err, report.ErrNoControl):
		return cobracli.Usagef("report: --control: %v", err)
	case errors.Is(err, report.ErrEmpty):
		return fmt.Errorf("report: %v in %s: record some traffic (or import trajectories with camproxy replay import) first", err, o.Source)
	case err != nil:
		return fmt.Errorf("report: %w", err)
	}
	write := func(w io.Writer) error { return r.Write(w, format) }
	if out == "" {
		return write(c.stdout)
	}
	if err := fsx.WriteFileAtomic(out, write); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	fmt.Fprintf(c.stdout, "wrote the %s report to %s\n", format, out)
	return nil
}
