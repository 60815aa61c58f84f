package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	cobracli "github.com/camproxy/camproxy/internal/cli"
	"github.com/camproxy/camproxy/internal/fsx"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/replay/lake"
	"github.com/camproxy/camproxy/replay/location"
)

// defaultReplayURI is where serve's default config records, so that import, export
// and stats work on a laptop without any flag.
const defaultReplayURI = "file://./camproxy-data/replay"

func (c *cli) replayCmd() *cobra.Command {
	return c.runner.Group("replay", "Work with a replay buffer: import, export, stats",
		`  camproxy replay import airline.json
  camproxy replay stats
  camproxy replay export --out episodes.parquet`,
		c.replayImportCmd(), c.replayExportCmd(), c.replayStatsCmd())
}

// uriError turns a malformed replay URI into a usage error (location.Error's message
// already names the redacted URI); anything else (a Redis that does not answer, S3
// access denied) failed at run time.
func uriError(cmd, flagName, uri string, err error) error {
	if errors.Is(err, location.ErrBadURI) {
		return cobracli.Usagef("%s: %s: %v", cmd, flagName, err)
	}
	return fmt.Errorf("%s: %s %s: %w", cmd, flagName, location.Redact(uri), err)
}

type importArgs struct {
	format, file, to, arm, domain string
}

func (c *cli) replayImportCmd() *cobra.Command {
	var a importArgs
	cmd := &cobra.Command{
		Use:   "import FILE|DIR",
		Short: "Copy trajectories or events into a replay buffer",
		Long: `Copy trajectories or events into a replay buffer: tau-bench results (one
episode per run, with its reward), replay events (JSON Lines, as camproxy records
them), or what replay export wrote (JSON Lines rows, Parquet, or a directory of
partitioned Parquet, whose part files take the arm and task id of their
partition directories). The format is
detected from the file unless --format names it. Events keep their ids, so
importing the same file twice adds no episode (its events are written again and
dropped as duplicates when the buffer is read). History is written outside the
time partitions, so every --since/--until window reads it.`,
		Example: `  camproxy replay import tau-bench/gpt-4o-airline.json
  camproxy replay import episodes.parquet --to s3://my-bucket/replay
  camproxy replay import events.jsonl --format jsonl --to redis://127.0.0.1:6379/0?stream=camproxy:replay`,
		ValidArgsFunction: cobracli.CompleteFiles,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) {
			if len(args) != 1 {
				p.Add("want exactly one FILE, got %d", len(args))
			} else {
				a.file = args[0]
			}
			if a.format != "" && a.format != lake.FormatTauBench && (a.arm != "" || a.domain != "") {
				p.Add("--arm and --domain apply to --format tau-bench only")
			}
			a.to = location.URI(a.to)
			if _, err := location.Parse(a.to); err != nil {
				p.Add("--to: %v", err)
			}
		}),
		RunE: func(cmd *cobra.Command, _ []string) error { return c.replayImport(cmd.Context(), a) },
	}
	f := cmd.Flags()
	cobracli.ChoiceVar(f, &a.format, "format", "", "input format (default: detected from the file)", lake.FormatTauBench, lake.FormatJSONL, lake.FormatParquet)
	f.StringVar(&a.to, "to", defaultReplayURI, "replay buffer to write into: a directory (or file://DIR), redis://… or s3://…")
	f.StringVar(&a.arm, "arm", "", "arm recorded on imported episodes (tau-bench only; default \"imported\")")
	f.StringVar(&a.domain, "domain", "", "tau-bench domain for ids (default from the file name, e.g. airline)")
	return cmd
}

func (c *cli) replayImport(ctx context.Context, a importArgs) error {
	var in *lake.Input
	var err error
	dir := cobracli.IsDir(a.file)
	if dir {
		if in, err = lake.OpenDir(a.file); err != nil {
			return importError(err)
		}
		if a.format != "" && a.format != lake.FormatParquet || a.arm != "" || a.domain != "" {
			return cobracli.Usagef("replay import: %s is a directory: its Parquet files are imported; --format, --arm and --domain do not apply", a.file)
		}
	} else {
		if in, err = lake.OpenFile(a.file, a.format); err != nil {
			return importError(err)
		}
		defer in.Close()
		if in.Format() != lake.FormatTauBench && (a.arm != "" || a.domain != "") {
			return cobracli.Usagef("replay import: %s is %s input; --arm and --domain apply to tau-bench only", a.file, in.Format())
		}
	}
	sink, err := lake.OpenImportSink(ctx, a.to)
	if err != nil {
		return uriError("replay import", "--to", a.to, err)
	}
	im := &lake.Importer{Sink: sink, Progress: func(n int) { fmt.Fprintf(c.stderr, "imported %d events so far\n", n) }}
	res, err := im.Import(ctx, in, lake.ImportOptions{Arm: a.arm, Domain: a.domain})
	cerr := sink.Close()
	if err != nil && !errors.Is(err, lake.ErrInput) {
		return fmt.Errorf("replay import %w", err) // the sink's or the context's: "FILE (N events written): …"
	}
	if err != nil {
		return importError(err)
	}
	if cerr != nil {
		return fmt.Errorf("replay import: close %s: %w", location.Redact(a.to), cerr)
	}
	switch {
	case dir:
		fmt.Fprintf(c.stdout, "imported %d episodes (%d events) from %d Parquet files of %s into %s\n", res.Episodes, res.Events, in.Files(), a.file, location.Redact(a.to))
	case in.Format() == lake.FormatJSONL:
		fmt.Fprintf(c.stdout, "imported %d events into %s\n", res.Events, location.Redact(a.to))
	default:
		fmt.Fprintf(c.stdout, "imported %d episodes (%d events) into %s\n", res.Episodes, res.Events, location.Redact(a.to))
	}
	return nil
}

// importError says what failed: input that cannot be read or is not of its format is
// bad usage (exit 2, with how to name a format when none was recognised); anything
// else a run-time failure (exit 1).
func importError(err error) error {
	switch {
	case errors.Is(err, lake.ErrUnknownFormat):
		return cobracli.Usagef("replay import: %v; name it with --format tau-bench|jsonl|parquet", err)
	case errors.Is(err, lake.ErrInput):
		return cobracli.Usagef("replay import: %v", err)
	}
	return fmt.Errorf("replay import: %w", err)
}

func (c *cli) replayExportCmd() *cobra.Command {
	var in bufferFlags
	var a exportArgs
	cmd := &cobra.Command{
		Use:   "export --out FILE|DIR|s3://BUCKET/PREFIX",
		Short: "One row per episode, as JSON Lines or Parquet (Hive-partitioned for Spark, DuckDB, Ray)",
		Long: `Export one row per episode: its task, arm, context, the whole trajectory in the
OpenAI chat shape, turns, reward and success (docs/replay-format.md has the
schema).

To a FILE: JSON Lines (streamed) or one Parquet file; replay import reads either back.
To a directory or s3://BUCKET/PREFIX (an --out ending in /, an existing directory,
or any --partition-by): Parquet files partitioned Hive-style by --partition-by
(dt, hr, arm, task_id, experiment), written as the episodes stream, with bounded
row groups and memory whatever the buffer's size — one table for DuckDB
(read_parquet('DIR/**/*.parquet', hive_partitioning=1)), Spark and Ray Data.
The destination must be empty.`,
		Example: `  camproxy replay export --out episodes.parquet
  camproxy replay export --from s3://my-bucket/replay --since 7d --out - | jq .reward
  camproxy replay export --format parquet --partition-by dt,arm --out s3://lake/camproxy/episodes`,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) {
			p.NoArgs(args)
			in.check(p)
			a.check(p)
		}),
		RunE: func(cmd *cobra.Command, _ []string) error { return c.replayExport(cmd.Context(), in, a) },
	}
	f := cmd.Flags()
	in.define(f)
	f.StringVar(&a.out, "out", "", "output file (- for stdout), directory, or s3://BUCKET/PREFIX (required)")
	cobracli.ChoiceVar(f, &a.format, "format", "", "output format (default parquet for a .parquet or directory --out, else jsonl)", "jsonl", "parquet")
	f.StringSliceVar(&a.partitionBy, "partition-by", nil, "Hive partition columns of a directory export, outermost first: dt, hr, arm, task_id, experiment")
	_ = cmd.RegisterFlagCompletionFunc("partition-by", func(_ *cobra.Command, _ []string, typed string) ([]cobra.Completion, cobra.ShellCompDirective) {
		done, last := "", typed // dt,ar → dt, + ar
		if i := strings.LastIndex(typed, ","); i >= 0 {
			done, last = typed[:i+1], typed[i+1:]
		}
		var words []cobra.Completion
		for _, col := range []string{"dt", "hr", "arm", "task_id", "experiment"} {
			if strings.HasPrefix(col, last) && !slices.Contains(strings.Split(done, ","), col) {
				words = append(words, done+col)
			}
		}
		return words, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	})
	return cmd
}

type exportArgs struct {
	out, format string
	partitionBy []string
	dir         bool // a directory (or S3 prefix) of Parquet files
}

func (a *exportArgs) check(p *cobracli.Problems) {
	if a.out == "" {
		p.Add("--out is required (a file, - for stdout, a directory or s3://BUCKET/PREFIX)")
		return
	}
	a.dir = len(a.partitionBy) > 0 || strings.HasPrefix(a.out, "s3://") || strings.HasSuffix(a.out, "/") || cobracli.IsDir(a.out)
	switch {
	case a.format == "" && (a.dir || strings.EqualFold(filepath.Ext(a.out), ".parquet")):
		a.format = "parquet"
	case a.format == "":
		a.format = "jsonl"
	}
	if a.dir {
		if a.format != "parquet" {
			p.Add("--format %s: a directory export is Parquet (write JSON Lines to a FILE)", a.format)
		}
		if a.out == "-" {
			p.Add("--partition-by writes a directory, not stdout")
		}
		if err := (lake.PartitionOptions{PartitionBy: a.partitionBy}).Validate(); err != nil {
			p.Add("--partition-by: %v", err)
		}
		switch _, err := os.Stat(a.out); {
		case strings.HasPrefix(a.out, "s3://"), cobracli.IsDir(a.out):
		case err == nil:
			p.Add("--out %s is a file: a partitioned export writes a directory (or s3://BUCKET/PREFIX)", a.out)
		default:
			p.OutDir("--out", strings.TrimSuffix(a.out, "/"))
		}
		return
	}
	p.OutDir("--out", a.out)
}

func (c *cli) replayExport(ctx context.Context, in bufferFlags, a exportArgs) error {
	switch {
	case a.dir:
		return c.exportPartitioned(ctx, in, a)
	case a.format == "parquet": // one file holds every row group: collected first
		if a.out == "-" && cobracli.ToTerminal(c.stdout) {
			return cobracli.Usagef("replay export: Parquet is binary: redirect --out - to a file or a pipe, or give --out FILE")
		}
		b, err := in.read(ctx, "replay export", c.stderr)
		if err != nil {
			return err
		}
		return c.exportFile(a.out, func(w io.Writer) (int, error) { return len(b.Episodes), lake.ExportParquet(w, b) })
	}
	// JSON Lines stream: one row out per episode in, in the reader's order.
	return c.exportFile(a.out, func(w io.Writer) (int, error) {
		bw := bufio.NewWriterSize(w, 1<<20)
		one := &replay.Buffer{Episodes: make([]*replay.Episode, 1)}
		n := 0
		_, err := in.each(ctx, "replay export", c.stderr, false, func(ep *replay.Episode) error {
			one.Episodes[0] = ep
			n++
			return lake.ExportJSONL(bw, one)
		})
		if err != nil {
			return n, err
		}
		return n, bw.Flush()
	})
}

// exportFile writes one export file (or stdout for -) and says how many episodes it
// holds.
func (c *cli) exportFile(out string, write func(io.Writer) (int, error)) error {
	var n int
	if out == "-" {
		var err error
		if n, err = write(c.stdout); err != nil {
			return exportError(err)
		}
		fmt.Fprintf(c.stderr, "exported %d episodes to stdout\n", n)
		return nil
	}
	if err := fsx.WriteFileAtomic(out, func(w io.Writer) (err error) { n, err = write(w); return err }); err != nil {
		return exportError(err)
	}
	fmt.Fprintf(c.stdout, "exported %d episodes to %s\n", n, out)
	return nil
}

// exportError prefixes a write failure once (a read failure says its command already).
func exportError(err error) error {
	var ue *cobracli.UsageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "replay export:") {
		return err
	}
	return fmt.Errorf("replay export: %w", err)
}

// exportPartitioned streams the episodes into Hive-partitioned Parquet files.
func (c *cli) exportPartitioned(ctx context.Context, in bufferFlags, a exportArgs) error {
	dest, err := lake.OpenExportDest(ctx, strings.TrimSuffix(a.out, "/"))
	if err != nil {
		return cobracli.Usagef("replay export: --out: %v", err)
	}
	var sum replay.Summary
	episodes := func(yield func(*replay.Episode) error) error {
		var err error
		sum, err = in.each(ctx, "replay export", c.stderr, false, yield)
		return err
	}
	m, err := lake.ExportParquetPartitioned(ctx, dest, episodes, lake.PartitionOptions{PartitionBy: a.partitionBy})
	switch {
	case errors.Is(err, lake.ErrExportNotEmpty):
		return cobracli.Usagef("replay export: --out: %v", err) // says the destination and what to do
	case err != nil:
		return exportError(err)
	}
	fmt.Fprintf(c.stdout, "exported %d episodes to %s: %d Parquet files in %d partitions (%s)\n",
		m.Rows, dest, len(m.Files), m.Partitions(), lake.PartitionSummary(a.partitionBy, sum))
	return nil
}

func (c *cli) replayStatsCmd() *cobra.Command {
	var in bufferFlags
	var format string
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Episodes, tasks, rewards and arms of a replay buffer",
		Long: `Episodes, tasks, runs per task, the rewarded share and reward of a replay buffer,
and a row per arm of each experiment its episodes belong to (two experiments' arms
of one name are two rows).`,
		Example: `  camproxy replay stats
  camproxy replay stats --experiment support
  camproxy replay stats --from s3://my-bucket/replay --format json`,
		Args: c.runner.Checks(func(p *cobracli.Problems, args []string) {
			p.NoArgs(args)
			in.check(p)
		}),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var s replay.Stats
			sum, err := in.scan(cmd.Context(), "replay stats", c.stderr, true, func(src replay.Source, o replay.ReadOptions) (replay.Summary, error) {
				st, sum, err := replay.StatsOf(cmd.Context(), src, o)
				s = st
				return sum, err
			})
			if err != nil {
				return err
			}
			s.Skipped = sum.Skipped // with the lines the source itself dropped
			if format == "json" {
				enc := json.NewEncoder(c.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(s)
			}
			return s.WriteText(c.stdout)
		},
	}
	f := cmd.Flags()
	in.define(f)
	cobracli.ChoiceVar(f, &format, "format", "text", "output format", "text", "json")
	return cmd
}
