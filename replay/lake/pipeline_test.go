package lake

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/camproxy/camproxy/replay"
)

// memSink keeps every batch written to it; fail, when set, fails every Write.
type memSink struct {
	mu      sync.Mutex
	batches [][][]byte
	fail    error
}

func (s *memSink) Name() string { return "mem" }
func (s *memSink) Close() error { return nil }
func (s *memSink) Write(_ context.Context, lines [][]byte) error {
	if s.fail != nil {
		return s.fail
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, lines)
	return nil
}

func (s *memSink) lines() int {
	n := 0
	for _, b := range s.batches {
		n += len(b)
	}
	return n
}

// importPath opens path (a directory with OpenDir) and imports it into a memSink.
func importPath(t *testing.T, path, format string, o ImportOptions) (*memSink, Imported, error) {
	t.Helper()
	open := func() (*Input, error) { return OpenFile(path, format) }
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		open = func() (*Input, error) { return OpenDir(path) }
	}
	in, err := open()
	if err != nil {
		return nil, Imported{}, err
	}
	defer in.Close()
	sink := &memSink{}
	res, err := (&Importer{Sink: sink}).Import(t.Context(), in, o)
	return sink, res, err
}

// TestImportPipeline: a file of each format, detected or named, and a directory of
// partitioned Parquet reach the sink whole, with what they held counted.
func TestImportPipeline(t *testing.T) {
	small := filepath.Join("testdata", "cli_tau_small.json")
	sink, res, err := importPath(t, small, "", ImportOptions{Arm: "old"})
	if err != nil || res.Episodes == 0 || res.Events != sink.lines() || len(sink.batches) != 1 {
		t.Fatalf("tau-bench: %+v, %d lines in %d batches, %v", res, sink.lines(), len(sink.batches), err)
	}
	if !bytes.Contains(sink.batches[0][0], []byte(`"arm":"old"`)) || !bytes.Contains(sink.batches[0][0], []byte(`"episode_id":"tau-cli_tau_small-`)) {
		t.Errorf("the arm and the domain from the file name: %s", sink.batches[0][0])
	}

	events := filepath.Join("testdata", "cli_events.jsonl")
	sink, res, err = importPath(t, events, FormatJSONL, ImportOptions{})
	if err != nil || res.Episodes != 0 || res.Events != 3 || sink.lines() != 3 {
		t.Fatalf("jsonl: %+v, %d lines, %v", res, sink.lines(), err)
	}

	// A partitioned export of 30 episodes, back in: every event of every episode.
	dir := filepath.Join(t.TempDir(), "lake")
	eps := exportEpisodes(30)
	m, err := ExportParquetPartitioned(t.Context(), NewDirDest(dir), bufferEpisodes(&replay.Buffer{Episodes: eps}),
		PartitionOptions{PartitionBy: []string{"arm"}})
	if err != nil {
		t.Fatal(err)
	}
	sink, res, err = importPath(t, dir, "", ImportOptions{})
	if err != nil || res.Episodes != 30 || res.Events != sink.lines() || res.Events < 60 {
		t.Fatalf("directory: %+v, %d lines, %v", res, sink.lines(), err)
	}
	if in, _ := OpenDir(dir); in.Files() != len(m.Files) || in.Format() != FormatParquet {
		t.Errorf("directory input: %d files, %s; the export wrote %d", in.Files(), in.Format(), len(m.Files))
	}
}

// TestImportPipelineBatches: the sink gets batches of importBatch lines, and a long
// import says how far it got, at most once a second by its clock.
func TestImportPipelineBatches(t *testing.T) {
	lines := tauLines(t)
	path := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(path, append(bytes.Join(lines, []byte("\n")), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := OpenFile(path, "")
	if err != nil || in.Format() != FormatJSONL {
		t.Fatalf("OpenFile: %v, format %q", err, in.Format())
	}
	defer in.Close()
	clock := time.Unix(0, 0)
	var reported []int
	sink := &memSink{}
	im := &Importer{Sink: sink, Progress: func(n int) { reported = append(reported, n) },
		now: func() time.Time { clock = clock.Add(400 * time.Millisecond); return clock }}
	res, err := im.Import(t.Context(), in, ImportOptions{})
	if err != nil || res.Events != len(lines) || sink.lines() != len(lines) {
		t.Fatalf("%+v, %d lines, %v; want %d", res, sink.lines(), err, len(lines))
	}
	for i, b := range sink.batches {
		if len(b) != importBatch && i != len(sink.batches)-1 {
			t.Fatalf("batch %d holds %d lines", i, len(b))
		}
	}
	// The clock moves 400 ms a look: every third batch is a second on.
	want := []int{}
	for k := 3; k*importBatch <= len(lines); k += 3 {
		want = append(want, k*importBatch)
	}
	if !slices.Equal(reported, want) {
		t.Errorf("progress %v, want %v", reported, want)
	}
}

// TestImportPipelineErrors: what the input is to blame for wraps ErrInput (the
// command's bad usage); a failed sink or a cancelled import does not, and every
// failure of an import says how many events were written.
func TestImportPipelineErrors(t *testing.T) {
	tmp := t.TempDir()
	junk := filepath.Join(tmp, "notes.txt")
	if err := os.WriteFile(junk, []byte("episode_id,task_id\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, format string
		unknown            bool
		want               string
	}{
		{"missing file", filepath.Join(tmp, "nope.json"), "", false, "nope.json"},
		{"undetectable", junk, "", true, "notes.txt: not a tau-bench JSON array"},
		{"directory without Parquet", tmp, "", false, "holds no .parquet file"},
		{"bad JSONL line", filepath.Join("testdata", "cli_events_bad.jsonl"), FormatJSONL, false,
			"cli_events_bad.jsonl is not valid jsonl input (0 events written): line 3"},
		{"jsonl as tau-bench", filepath.Join("testdata", "cli_events.jsonl"), FormatTauBench, false, "is not valid tau-bench input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := importPath(t, tc.path, tc.format, ImportOptions{})
			if !errors.Is(err, ErrInput) || errors.Is(err, ErrUnknownFormat) != tc.unknown || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v: want ErrInput (ErrUnknownFormat %v) and %q", err, tc.unknown, tc.want)
			}
		})
	}

	if _, err := OpenFile(tmp, ""); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "is not a readable file") {
		t.Errorf("a directory as a file: %v", err)
	}

	boom := errors.New("disk full")
	in, err := OpenFile(filepath.Join("testdata", "cli_tau_small.json"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	_, err = (&Importer{Sink: &memSink{fail: boom}}).Import(t.Context(), in, ImportOptions{})
	if !errors.Is(err, boom) || errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "cli_tau_small.json (0 events written): write to mem sink") {
		t.Errorf("sink failure: %v", err)
	}
}

func TestBatchWriterSinkError(t *testing.T) {
	boom := errors.New("disk full")
	w := &batchWriter{ctx: context.Background(), sink: &memSink{fail: boom}, now: time.Now}
	err := w.emit([]byte("{}"))
	if err == nil {
		err = w.flush()
	}
	if !errors.Is(err, boom) {
		t.Fatalf("flush error %v", err)
	}
	if got := w.explain("f", "jsonl", err); errors.Is(got, ErrInput) || !errors.Is(got, boom) {
		t.Errorf("a sink failure must be a run-time error (exit 1), got %v", got)
	}
}
