package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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

func replayCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("replay: want a subcommand: import, export or stats")
	}
	var err error
	switch args[0] {
	case "import":
		err = replayImport(ctx, args[1:], stdout, stderr)
	case "export":
		err = replayExport(ctx, args[1:], stdout, stderr)
	case "stats":
		err = replayStats(ctx, args[1:], stdout, stderr)
	default:
		return usagef("replay: unknown subcommand %q: want import, export or stats", args[0])
	}
	if errors.Is(err, flag.ErrHelp) {
		return nil // -h asked for help, which is not a failure
	}
	return err
}

// parseInterleaved parses flags that may come before or after positional
// arguments: Go's flag package stops at the first positional, so parse, take it,
// and parse the rest again. After "--" everything is positional.
func parseInterleaved(flags *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := flags.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err // the flag package printed the help
			}
			return nil, usagef("%s: %v", flags.Name(), err)
		}
		rest := flags.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	flags := flag.NewFlagSet(name, flag.ContinueOnError)
	flags.SetOutput(stderr)
	return flags
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

func parseImportArgs(args []string, stderr io.Writer) (importArgs, error) {
	var a importArgs
	flags := newFlagSet("replay import", stderr)
	flags.StringVar(&a.format, "format", "", "input format: tau-bench, jsonl (replay events or export rows) or parquet (an export); default: detected from the file")
	flags.StringVar(&a.to, "to", defaultReplayURI, "replay URI to write into (file://, redis://, s3://)")
	flags.StringVar(&a.arm, "arm", "", "arm recorded on imported episodes (tau-bench only; default \"imported\")")
	flags.StringVar(&a.domain, "domain", "", "tau-bench domain for ids (default from the file name, e.g. airline)")
	pos, err := parseInterleaved(flags, args)
	if err != nil {
		return a, err
	}
	switch {
	case a.format != "" && a.format != replay.FormatTauBench && a.format != replay.FormatJSONL && a.format != replay.FormatParquet:
		return a, usagef("replay import: --format %q: want tau-bench, jsonl or parquet (or none: detected from the file)", a.format)
	case a.format != "" && a.format != replay.FormatTauBench && (a.arm != "" || a.domain != ""):
		return a, usagef("replay import: --arm and --domain apply to --format tau-bench only")
	case len(pos) != 1:
		return a, usagef("replay import: want exactly one FILE, got %d", len(pos))
	}
	a.file = pos[0]
	return a, nil
}

func replayImport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a, err := parseImportArgs(args, stderr)
	if err != nil {
		return err
	}
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

type exportArgs struct{ from, out, format string }

func parseExportArgs(args []string, stderr io.Writer) (exportArgs, error) {
	var a exportArgs
	flags := newFlagSet("replay export", stderr)
	flags.StringVar(&a.from, "from", defaultReplayURI, "replay URI to read")
	flags.StringVar(&a.out, "out", "", "output file, - for stdout (required)")
	flags.StringVar(&a.format, "format", "", "jsonl or parquet (default parquet for a .parquet --out, else jsonl)")
	pos, err := parseInterleaved(flags, args)
	if err != nil {
		return a, err
	}
	if len(pos) > 0 {
		return a, usagef("replay export: unexpected argument %q", pos[0])
	}
	if a.out == "" {
		return a, usagef("replay export: --out is required (a file, or - for stdout)")
	}
	if a.format == "" {
		a.format = "jsonl"
		if strings.EqualFold(filepath.Ext(a.out), ".parquet") {
			a.format = "parquet"
		}
	}
	if a.format != "jsonl" && a.format != "parquet" {
		return a, usagef("replay export: --format %q: want jsonl or parquet", a.format)
	}
	return a, checkOutDir(a.out)
}

// checkOutDir fails fast on an --out whose directory does not exist, before a
// possibly long read of the replay buffer.
func checkOutDir(out string) error {
	if out == "-" {
		return nil
	}
	dir := filepath.Dir(out)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return usagef("replay export: --out %s: directory %s does not exist", out, dir)
	}
	return nil
}

func replayExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a, err := parseExportArgs(args, stderr)
	if err != nil {
		return err
	}
	b, err := readBuffer(ctx, "replay export", a.from)
	if err != nil {
		return err
	}
	write := replay.ExportJSONL
	if a.format == "parquet" {
		write = replay.ExportParquet
	}
	if a.out == "-" {
		if err := write(stdout, b); err != nil {
			return fmt.Errorf("replay export: %w", err)
		}
		fmt.Fprintf(stderr, "exported %d episodes to stdout\n", len(b.Episodes))
		return nil
	}
	if err := writeFileAtomic(a.out, func(w io.Writer) error { return write(w, b) }); err != nil {
		return fmt.Errorf("replay export: %w", err)
	}
	fmt.Fprintf(stdout, "exported %d episodes to %s\n", len(b.Episodes), a.out)
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

// readBuffer opens a replay URI and reassembles its episodes. A file:// directory
// that does not exist is a mistyped flag (usage), not a run-time failure.
func readBuffer(ctx context.Context, cmd, uri string) (*replay.Buffer, error) {
	src, err := replay.OpenSource(ctx, uri)
	if err != nil {
		return nil, uriError(cmd, "--from", uri, err)
	}
	if c, ok := src.(io.Closer); ok {
		defer c.Close()
	}
	b, err := replay.Read(ctx, src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, usagef("%s: --from %s: %v", cmd, replay.Redact(uri), err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: --from %s: %w", cmd, replay.Redact(uri), err)
	}
	// Torn or over-long lines a source drops never reach the reader; count them too.
	if s, ok := src.(interface{ Skipped() int }); ok {
		b.Skipped += s.Skipped()
	}
	return b, nil
}

func replayStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := newFlagSet("replay stats", stderr)
	from := flags.String("from", defaultReplayURI, "replay URI to read")
	format := flags.String("format", "text", "text or json")
	pos, err := parseInterleaved(flags, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("replay stats: unexpected argument %q", pos[0])
	}
	if *format != "text" && *format != "json" {
		return usagef("replay stats: --format %q: want text or json", *format)
	}
	b, err := readBuffer(ctx, "replay stats", *from)
	if err != nil {
		return err
	}
	s := replay.ComputeStats(b)
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	return s.WriteText(stdout)
}
