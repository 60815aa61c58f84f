package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/camproxy/camproxy/replay"
)

// defaultReplayURI is where serve's default config records, so that import, export
// and stats work on a laptop without any flag.
const defaultReplayURI = "file://./camproxy-data/replay"

// importBatch is how many lines go to the sink per Write: big enough that S3 and
// Redis see few round trips, small enough that a failed batch is cheap to retry.
const importBatch = 500

// progressEvery is how often a long import reports that it is still alive.
const progressEvery = time.Second

func (c *cli) replayCmd() *cobra.Command {
	return c.group("replay", "Work with a replay buffer: import, export, stats",
		`  camproxy replay import airline.json
  camproxy replay stats
  camproxy replay export --out episodes.parquet`,
		c.replayImportCmd(), c.replayExportCmd(), c.replayStatsCmd())
}

// bufferFlags name the replay buffer a command reads.
type bufferFlags struct{ from string }

func (b *bufferFlags) define(f *pflag.FlagSet) {
	f.StringVar(&b.from, "from", defaultReplayURI, "replay buffer to read: file://DIR, redis://HOST:PORT/DB?stream=KEY or s3://BUCKET/PREFIX")
}

// check finds a malformed --from before any work starts (a store that does not
// answer shows when it is read).
func (b *bufferFlags) check(p *problems) {
	if err := replay.CheckURI(b.from); err != nil {
		p.add("--from: %v", err)
	}
}

// outDir is a problem when the directory an output file goes into does not exist:
// found before a possibly long read, not after it.
func (p *problems) outDir(flag, out string) {
	if out == "" || out == "-" {
		return
	}
	dir := filepath.Dir(out)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		p.add("%s %s: directory %s does not exist", flag, out, dir)
	}
}

// uriError turns a malformed replay URI into a usage error (ErrBadURI's message
// already names the redacted URI); anything else (a Redis that does not answer, S3
// access denied) failed at run time.
func uriError(cmd, flagName, uri string, err error) error {
	if errors.Is(err, replay.ErrBadURI) {
		return usagef("%s: %s: %v", cmd, flagName, err)
	}
	return fmt.Errorf("%s: %s %s: %w", cmd, flagName, replay.Redact(uri), err)
}

type importArgs struct {
	format, file, to, arm, domain string
}

func (c *cli) replayImportCmd() *cobra.Command {
	var a importArgs
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Copy trajectories or events into a replay buffer",
		Long: `Copy trajectories or events into a replay buffer: tau-bench results (one
episode per run, with its reward), replay events (JSON Lines, as camproxy records
them), or what replay export wrote (JSON Lines rows or Parquet). The format is
detected from the file unless --format names it. Events keep their ids, so
importing the same file twice adds nothing.`,
		Example: `  camproxy replay import tau-bench/gpt-4o-airline.json
  camproxy replay import episodes.parquet --to s3://my-bucket/replay
  camproxy replay import events.jsonl --format jsonl --to redis://127.0.0.1:6379/0?stream=camproxy:replay`,
		ValidArgsFunction: completeFiles,
		Args: c.checks(func(p *problems, args []string) {
			if len(args) != 1 {
				p.add("want exactly one FILE, got %d", len(args))
			} else {
				a.file = args[0]
			}
			if a.format != "" && a.format != replay.FormatTauBench && (a.arm != "" || a.domain != "") {
				p.add("--arm and --domain apply to --format tau-bench only")
			}
			if err := replay.CheckURI(a.to); err != nil {
				p.add("--to: %v", err)
			}
		}),
		RunE: func(cmd *cobra.Command, _ []string) error { return c.replayImport(cmd.Context(), a) },
	}
	f := cmd.Flags()
	choiceVar(f, &a.format, "format", "", "input format (default: detected from the file)", replay.FormatTauBench, replay.FormatJSONL, replay.FormatParquet)
	f.StringVar(&a.to, "to", defaultReplayURI, "replay buffer to write into (file://, redis://, s3://)")
	f.StringVar(&a.arm, "arm", "", "arm recorded on imported episodes (tau-bench only; default \"imported\")")
	f.StringVar(&a.domain, "domain", "", "tau-bench domain for ids (default from the file name, e.g. airline)")
	return cmd
}

// completeFiles completes a command's arguments as paths.
func completeFiles(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return nil, cobra.ShellCompDirectiveDefault
}

func (c *cli) replayImport(ctx context.Context, a importArgs) error {
	stdout, stderr := c.stdout, c.stderr
	f, err := openInput(a.file)
	if err != nil {
		return err
	}
	defer f.Close()
	if a.format == "" {
		if a.format, err = detectFormat(f); err != nil {
			return err
		}
	}
	if a.format != replay.FormatTauBench && (a.arm != "" || a.domain != "") {
		return usagef("replay import: %s is %s input; --arm and --domain apply to tau-bench only", a.file, a.format)
	}
	sink, err := replay.OpenSink(ctx, a.to, replay.OpenOptions{Writer: "import-" + strconv.Itoa(os.Getpid())})
	if err != nil {
		return uriError("replay import", "--to", a.to, err)
	}
	w := &batchWriter{ctx: ctx, sink: sink, progress: stderr, last: time.Now()}
	n, err := importFile(a, f, w.emit)
	if err == nil {
		err = w.flush()
	}
	cerr := sink.Close()
	if err != nil {
		return w.explain(a, err)
	}
	if cerr != nil {
		return fmt.Errorf("replay import: close %s: %w", replay.Redact(a.to), cerr)
	}
	fmt.Fprintf(stdout, "imported %s into %s\n", importSummary(a.format, n, w.total), replay.Redact(a.to))
	return nil
}

// openInput opens FILE; a missing, unreadable or non-regular FILE is bad usage.
func openInput(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usagef("replay import: %v", err)
	}
	if st, err := f.Stat(); err != nil || st.IsDir() {
		f.Close()
		return nil, usagef("replay import: %s is not a readable file", path)
	}
	return f, nil
}

// detectFormat names the format of FILE from its first bytes.
func detectFormat(f *os.File) (string, error) {
	head := make([]byte, 512)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("replay import: read %s: %w", f.Name(), err)
	}
	format, err := replay.DetectFormat(head[:n])
	if err != nil {
		return "", usagef("replay import: %s: %v; name it with --format tau-bench|jsonl|parquet", f.Name(), err)
	}
	return format, nil
}

func importFile(a importArgs, f *os.File, emit func([]byte) error) (int, error) {
	switch a.format {
	case replay.FormatJSONL:
		return replay.ImportJSONL(f, emit)
	case replay.FormatParquet:
		st, err := f.Stat()
		if err != nil {
			return 0, err
		}
		n, _, err := replay.ImportParquet(f, st.Size(), emit)
		return n, err
	}
	domain := a.domain
	if domain == "" {
		domain = replay.DomainFromPath(a.file)
	}
	return replay.ImportTauBench(f, replay.ImportOptions{Arm: a.arm, Domain: domain}, emit)
}

func importSummary(format string, n, events int) string {
	if format == replay.FormatJSONL {
		return fmt.Sprintf("%d events", events)
	}
	return fmt.Sprintf("%d episodes (%d events)", n, events)
}

// batchWriter collects emitted lines into sink-sized batches and reports progress.
type batchWriter struct {
	ctx      context.Context
	sink     replay.Sink
	batch    [][]byte
	total    int // lines handed to the sink
	sinkErr  error
	progress io.Writer
	last     time.Time
}

func (w *batchWriter) emit(line []byte) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	w.batch = append(w.batch, line)
	if len(w.batch) < importBatch {
		return nil
	}
	return w.flush()
}

func (w *batchWriter) flush() error {
	if len(w.batch) == 0 {
		return nil
	}
	if err := w.sink.Write(w.ctx, w.batch); err != nil {
		w.sinkErr = err
		return fmt.Errorf("write to %s sink: %w", w.sink.Name(), err)
	}
	w.total += len(w.batch)
	w.batch = make([][]byte, 0, importBatch) // the sink may keep the old slice
	if time.Since(w.last) >= progressEvery {
		w.last = time.Now()
		fmt.Fprintf(w.progress, "imported %d events so far\n", w.total)
	}
	return nil
}

// explain classifies a failed import: a file that is not what --format says is bad
// usage (exit 2), a sink that failed is a run-time failure (exit 1). Either way the
// message says how much was written, since a re-import after a fix deduplicates.
func (w *batchWriter) explain(a importArgs, err error) error {
	if w.sinkErr != nil || w.ctx.Err() != nil {
		return fmt.Errorf("replay import %s (%d events written): %w", a.file, w.total, err)
	}
	return usagef("replay import: %s is not valid %s input (%d events written): %v", a.file, a.format, w.total, err)
}

func (c *cli) replayExportCmd() *cobra.Command {
	var in bufferFlags
	var out, format string
	cmd := &cobra.Command{
		Use:   "export --out FILE",
		Short: "One row per episode, as JSON Lines or Parquet",
		Long: `Export one row per episode: its task, arm, context, the whole trajectory in the
OpenAI chat shape, usage and reward. JSON Lines or Parquet (docs/replay-format.md
has the schema); replay import reads either back.`,
		Example: `  camproxy replay export --out episodes.parquet
  camproxy replay export --from s3://my-bucket/replay --out - | jq .reward`,
		Args: c.checks(func(p *problems, args []string) {
			p.noArgs(args)
			in.check(p)
			if out == "" {
				p.add("--out is required (a file, or - for stdout)")
			}
			if format == "" {
				format = "jsonl"
				if strings.EqualFold(filepath.Ext(out), ".parquet") {
					format = "parquet"
				}
			}
			p.outDir("--out", out)
		}),
		RunE: func(cmd *cobra.Command, _ []string) error { return c.replayExport(cmd.Context(), in, out, format) },
	}
	f := cmd.Flags()
	in.define(f)
	f.StringVar(&out, "out", "", "output file, - for stdout (required)")
	choiceVar(f, &format, "format", "", "output format (default parquet for a .parquet --out, else jsonl)", "jsonl", "parquet")
	return cmd
}

func (c *cli) replayExport(ctx context.Context, in bufferFlags, out, format string) error {
	b, err := in.read(ctx, "replay export")
	if err != nil {
		return err
	}
	write := replay.ExportJSONL
	if format == "parquet" {
		write = replay.ExportParquet
	}
	if out == "-" {
		if err := write(c.stdout, b); err != nil {
			return fmt.Errorf("replay export: %w", err)
		}
		fmt.Fprintf(c.stderr, "exported %d episodes to stdout\n", len(b.Episodes))
		return nil
	}
	if err := writeFileAtomic(out, func(w io.Writer) error { return write(w, b) }); err != nil {
		return fmt.Errorf("replay export: %w", err)
	}
	fmt.Fprintf(c.stdout, "exported %d episodes to %s\n", len(b.Episodes), out)
	return nil
}

// writeFileAtomic writes through a temporary file in the same directory and renames
// it into place, so a failed export never leaves a truncated file that looks whole.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil { // CreateTemp's 0600 is for secrets
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// read opens --from and reassembles its episodes. A file:// directory that does not
// exist is a mistyped flag (usage), not a run-time failure.
func (b *bufferFlags) read(ctx context.Context, cmd string) (*replay.Buffer, error) {
	uri := b.from
	src, err := replay.OpenSource(ctx, uri)
	if err != nil {
		return nil, uriError(cmd, "--from", uri, err)
	}
	if c, ok := src.(io.Closer); ok {
		defer c.Close()
	}
	buf, err := replay.Read(ctx, src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, usagef("%s: --from %s: %v", cmd, replay.Redact(uri), err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: --from %s: %w", cmd, replay.Redact(uri), err)
	}
	// Torn or over-long lines a source drops never reach the reader; count them too.
	if s, ok := src.(interface{ Skipped() int }); ok {
		buf.Skipped += s.Skipped()
	}
	return buf, nil
}

func (c *cli) replayStatsCmd() *cobra.Command {
	var in bufferFlags
	var format string
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Episodes, tasks, rewards and arms of a replay buffer",
		Example: `  camproxy replay stats
  camproxy replay stats --from s3://my-bucket/replay --format json`,
		Args: c.checks(func(p *problems, args []string) {
			p.noArgs(args)
			in.check(p)
		}),
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := in.read(cmd.Context(), "replay stats")
			if err != nil {
				return err
			}
			s := replay.ComputeStats(b)
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
	choiceVar(f, &format, "format", "text", "output format", "text", "json")
	return cmd
}
