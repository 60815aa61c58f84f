package lake

import (
	"context"
	"errors"
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

// ErrInput is wrapped by every error about what an import reads: a file that cannot
// be opened, a directory without Parquet files, input that is not of its format
// (ErrUnknownFormat when no format was named and none was recognised). Naming other
// input fixes it; any other error of an import is the sink's or the context's.
var ErrInput = errors.New("bad import input")

// inputError is a problem with the input; its text is err's alone.
type inputError struct{ err error }

func (e inputError) Error() string   { return e.err.Error() }
func (e inputError) Unwrap() []error { return []error{ErrInput, e.err} }

// importBatch is how many lines go to the sink per Write: big enough that S3 and
// Redis see few round trips, small enough that a failed batch is cheap to retry.
const importBatch = 500

// progressEvery is how often a long import reports that it is still alive.
const progressEvery = time.Second

// Input is what an import reads: one file of a known format (OpenFile), or every
// Parquet file under a directory, a partitioned export (OpenDir).
type Input struct {
	path   string
	format string
	file   *os.File // OpenFile's, open until Close
	parts  []string // OpenDir's Parquet files
}

// OpenFile opens a file to import. format is FormatTauBench, FormatJSONL or
// FormatParquet, or "" to detect it from the file's first bytes.
func OpenFile(path, format string) (*Input, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	in := &Input{path: path, format: format, file: f}
	if format == "" {
		if in.format, err = detectFile(f); err != nil {
			f.Close()
			return nil, err
		}
	}
	return in, nil
}

// OpenDir finds every Parquet file under dir: a partitioned export, whose part files
// take the arm and task id of their partition directories (ImportParquetPart).
func OpenDir(dir string) (*Input, error) {
	in := &Input{path: dir, format: FormatParquet}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.EqualFold(filepath.Ext(path), ".parquet") {
			in.parts = append(in.parts, path)
		}
		return err
	})
	switch {
	case err != nil:
		return nil, inputError{err}
	case len(in.parts) == 0:
		return nil, inputError{fmt.Errorf("%s holds no .parquet file (a directory is read as a partitioned export)", dir)}
	}
	return in, nil
}

// Format is the input's format: as named, or detected; FormatParquet for a directory.
func (in *Input) Format() string { return in.format }

// Files is how many files the input holds: 1, or a directory's Parquet files.
func (in *Input) Files() int { return max(len(in.parts), 1) }

// Close closes a file input.
func (in *Input) Close() error {
	if in.file == nil {
		return nil
	}
	return in.file.Close()
}

// openRegular opens path; a missing, unreadable or non-regular path is bad input.
func openRegular(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, inputError{err}
	}
	if st, err := f.Stat(); err != nil || st.IsDir() {
		f.Close()
		return nil, inputError{fmt.Errorf("%s is not a readable file", path)}
	}
	return f, nil
}

// detectFile names the format of f from its first bytes.
func detectFile(f *os.File) (string, error) {
	head := make([]byte, 512)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read %s: %w", f.Name(), err)
	}
	format, err := DetectFormat(head[:n])
	if err != nil {
		return "", inputError{fmt.Errorf("%s: %w", f.Name(), err)}
	}
	return format, nil
}

// OpenImportSink opens the replay buffer uri names for an import. History keeps its
// own times: it is written outside the time partitions (of the hour of the import),
// where every window reads it.
func OpenImportSink(ctx context.Context, uri string) (replay.Sink, error) {
	return replay.OpenSink(ctx, uri, replay.OpenOptions{Writer: "import-" + strconv.Itoa(os.Getpid()), Unpartitioned: true})
}

// Imported is what an import wrote.
type Imported struct {
	Episodes int // episodes read; 0 for JSON Lines, whose events are not counted by episode
	Events   int // lines the sink took
}

// Importer writes what an Input holds into a sink, in batches of importBatch lines.
// Events keep their ids, so a second import of the same input adds nothing a reader
// keeps.
type Importer struct {
	Sink replay.Sink
	// Progress, when set, is told the events written so far after a batch, at most
	// once a second: a long import is still alive.
	Progress func(events int)

	now func() time.Time // nil: time.Now
}

// Import writes in into the sink; o applies to tau-bench input. A failure says how
// much was written (a re-import after a fix deduplicates): it wraps ErrInput when
// the input is at fault, else the sink's or the context's error.
func (im *Importer) Import(ctx context.Context, in *Input, o ImportOptions) (Imported, error) {
	now := im.now
	if now == nil {
		now = time.Now
	}
	w := &batchWriter{ctx: ctx, sink: im.Sink, progress: im.Progress, now: now, last: now()}
	var res Imported
	if in.file != nil {
		n, err := importFile(in.path, in.format, in.file, o, w.emit)
		if err == nil {
			err = w.flush()
		}
		res = Imported{Episodes: n, Events: w.total}
		if err != nil {
			return res, w.explain(in.path, in.format, err)
		}
		return res, nil
	}
	for _, path := range in.parts {
		f, err := openRegular(path)
		if err != nil {
			return Imported{Episodes: res.Episodes, Events: w.total}, err
		}
		n, err := importFile(path, FormatParquet, f, o, w.emit)
		f.Close()
		res.Episodes += n
		if err != nil {
			return Imported{Episodes: res.Episodes, Events: w.total}, w.explain(path, FormatParquet, err)
		}
	}
	err := w.flush()
	res.Events = w.total
	if err != nil {
		return res, w.explain(in.path, FormatParquet, err)
	}
	return res, nil
}

// importFile emits the events of one file of format and says how many episodes it
// held (0 for JSON Lines).
func importFile(path, format string, f *os.File, o ImportOptions, emit func([]byte) error) (int, error) {
	switch format {
	case FormatJSONL:
		_, err := ImportJSONL(f, emit)
		return 0, err
	case FormatParquet:
		st, err := f.Stat()
		if err != nil {
			return 0, err
		}
		n, _, err := ImportParquetPart(path, f, st.Size(), emit)
		return n, err
	}
	if o.Domain == "" {
		o.Domain = DomainFromPath(path)
	}
	return ImportTauBench(f, o, emit)
}

// batchWriter collects emitted lines into sink-sized batches and reports progress.
type batchWriter struct {
	ctx      context.Context
	sink     replay.Sink
	batch    [][]byte
	total    int // lines handed to the sink
	sinkErr  error
	progress func(events int)
	now      func() time.Time
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
	if now := w.now(); w.progress != nil && now.Sub(w.last) >= progressEvery {
		w.last = now
		w.progress(w.total)
	}
	return nil
}

// explain classifies a failed import: a file that is not what its format says is bad
// input (ErrInput), a sink that failed or a cancelled context is not. Either way the
// message says how much was written.
func (w *batchWriter) explain(path, format string, err error) error {
	if w.sinkErr != nil || w.ctx.Err() != nil {
		return fmt.Errorf("%s (%d events written): %w", path, w.total, err)
	}
	return inputError{fmt.Errorf("%s is not valid %s input (%d events written): %v", path, format, w.total, err)}
}
