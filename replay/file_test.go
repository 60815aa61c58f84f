package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/camproxy/camproxy/protocol"
)

// fileLines returns n small valid JSON lines tagged with prefix.
func fileLines(prefix string, from, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"w":%q,"n":%d}`, prefix, from+i)
	}
	return out
}

// fileScanAll reads dir back as strings and returns the source for its counters.
func fileScanAll(t *testing.T, dir string) ([]string, *FileSource) {
	t.Helper()
	src := NewFileSource(dir)
	var got []string
	if err := src.Scan(context.Background(), func(l []byte) error {
		got = append(got, string(l))
		return nil
	}); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return got, src
}

func fileStrings(batches ...[][]byte) []string {
	var out []string
	for _, b := range batches {
		for _, l := range b {
			out = append(out, string(l))
		}
	}
	return out
}

func fileNewSink(t testing.TB, dir string, o FileOptions) *FileSink {
	t.Helper()
	s, err := NewFileSink(dir, o)
	if err != nil {
		t.Fatalf("NewFileSink: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func fileWrite(t testing.TB, s *FileSink, lines [][]byte) {
	t.Helper()
	if err := s.Write(context.Background(), lines); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

// fileSegmentsOf lists the segment paths of dir in the order Scan reads them.
func fileSegmentsOf(t *testing.T, dir string) []string {
	t.Helper()
	segs, err := fileSegments(t.Context(), dir, window{})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, s := range segs {
		paths = append(paths, s.path)
	}
	return paths
}

func fileAppendRaw(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestFileSinkWriteReadBackInOrder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "replay", "nested")
	s := fileNewSink(t, dir, FileOptions{Writer: "w"})
	if s.Name() != "file" {
		t.Fatalf("Name = %q", s.Name())
	}
	b1, b2, b3 := fileLines("w", 0, 3), fileLines("w", 3, 1), fileLines("w", 4, 5)
	for _, b := range [][][]byte{b1, b2, b3, nil} {
		fileWrite(t, s, b)
	}
	got, src := fileScanAll(t, dir)
	if want := fileStrings(b1, b2, b3); !slices.Equal(got, want) {
		t.Fatalf("read back\n got %q\nwant %q", got, want)
	}
	if src.Skipped() != 0 {
		t.Fatalf("Skipped = %d", src.Skipped())
	}
	segs := fileSegmentsOf(t, dir)
	if len(segs) != 1 {
		t.Fatalf("segments = %v", segs)
	}
	if !regexp.MustCompile(`^w-\d{20}-\d{6}\.jsonl$`).MatchString(filepath.Base(segs[0])) {
		t.Fatalf("segment name %q", filepath.Base(segs[0]))
	}
}

func TestFileSinkRotatesBySize(t *testing.T) {
	dir := t.TempDir()
	const segBytes = 100
	s := fileNewSink(t, dir, FileOptions{Writer: "w", SegmentBytes: segBytes})
	var batches [][][]byte
	for i := range 20 {
		b := fileLines("w", i*3, 3) // ~45 bytes a batch
		batches = append(batches, b)
		fileWrite(t, s, b)
	}
	big := fileLines(strings.Repeat("x", 300), 1000, 1) // larger than a segment: gets its own
	fileWrite(t, s, big)
	batches = append(batches, big)
	segs := fileSegmentsOf(t, dir)
	if len(segs) < 5 {
		t.Fatalf("want several segments, got %d", len(segs))
	}
	for _, p := range segs[:len(segs)-1] {
		if st, _ := os.Stat(p); st.Size() > segBytes {
			t.Errorf("%s has %d bytes > %d", p, st.Size(), segBytes)
		}
	}
	got, src := fileScanAll(t, dir)
	if want := fileStrings(batches...); !slices.Equal(got, want) {
		t.Fatalf("read back %d lines, want %d\n got %q\nwant %q", len(got), len(want), got, want)
	}
	if src.Skipped() != 0 {
		t.Fatalf("Skipped = %d", src.Skipped())
	}
}

func TestFileSinkTwoWritersShareADir(t *testing.T) {
	dir := t.TempDir()
	a := fileNewSink(t, dir, FileOptions{Writer: "a", SegmentBytes: 80})
	b := fileNewSink(t, dir, FileOptions{Writer: "b", SegmentBytes: 80})
	var wantA, wantB []string
	for i := range 10 {
		la, lb := fileLines("a", i*2, 2), fileLines("b", i, 1)
		fileWrite(t, a, la)
		fileWrite(t, b, lb)
		wantA, wantB = append(wantA, fileStrings(la)...), append(wantB, fileStrings(lb)...)
	}
	got, _ := fileScanAll(t, dir)
	var gotA, gotB []string
	for _, l := range got {
		if strings.Contains(l, `"w":"a"`) {
			gotA = append(gotA, l)
		} else {
			gotB = append(gotB, l)
		}
	}
	if !slices.Equal(gotA, wantA) || !slices.Equal(gotB, wantB) {
		t.Fatalf("per-writer order lost\n a %q\n b %q", gotA, gotB)
	}
}

// A process killed mid-write leaves a line without newline at the end of its last
// segment; everything before it reads, and the next process starts a new segment.
func TestFileSourceSkipsTornTail(t *testing.T) {
	dir := t.TempDir()
	s1, err := NewFileSink(dir, FileOptions{Writer: "w"})
	if err != nil {
		t.Fatal(err)
	}
	b1 := fileLines("w", 0, 4)
	fileWrite(t, s1, b1)
	segs := fileSegmentsOf(t, dir)
	fileAppendRaw(t, segs[len(segs)-1], `{"w":"w","n":4,"half":"th`) // SIGKILL here
	_ = s1.Close()

	got, src := fileScanAll(t, dir)
	if want := fileStrings(b1); !slices.Equal(got, want) || src.Skipped() != 1 {
		t.Fatalf("got %q skipped %d, want %q skipped 1", got, src.Skipped(), want)
	}

	time.Sleep(time.Microsecond) // a later process has a later stamp
	s2 := fileNewSink(t, dir, FileOptions{Writer: "w"})
	b2 := fileLines("w", 100, 2)
	fileWrite(t, s2, b2)
	if n := len(fileSegmentsOf(t, dir)); n != 2 {
		t.Fatalf("restart must open a new segment, have %d", n)
	}
	got, src = fileScanAll(t, dir)
	if want := fileStrings(b1, b2); !slices.Equal(got, want) || src.Skipped() != 1 {
		t.Fatalf("after restart got %q skipped %d, want %q skipped 1", got, src.Skipped(), want)
	}
}

func TestFileSourceSkipsInvalidLines(t *testing.T) {
	dir := t.TempDir()
	s := fileNewSink(t, dir, FileOptions{Writer: "w"})
	b1, b2 := fileLines("w", 0, 2), fileLines("w", 2, 2)
	fileWrite(t, s, b1)
	fileAppendRaw(t, fileSegmentsOf(t, dir)[0], "not json {\n\n   \n")
	fileWrite(t, s, b2)
	got, src := fileScanAll(t, dir)
	if want := fileStrings(b1, b2); !slices.Equal(got, want) {
		t.Fatalf("got %q want %q", got, want)
	}
	if src.Skipped() != 1 {
		t.Fatalf("Skipped = %d, want 1 (blank lines are not counted)", src.Skipped())
	}
	// Skipped is per Scan, not cumulative.
	_, src2 := fileScanAll(t, dir)
	if err := src2.Scan(context.Background(), func([]byte) error { return nil }); err != nil || src2.Skipped() != 1 {
		t.Fatalf("second Scan: err %v skipped %d", err, src2.Skipped())
	}
}

func TestFileSourceSkipsOverlongLine(t *testing.T) {
	dir := t.TempDir()
	s := fileNewSink(t, dir, FileOptions{Writer: "w"})
	long := [][]byte{fmt.Appendf(nil, `{"pad":%q}`, strings.Repeat("p", 500))}
	b1, b2 := fileLines("w", 0, 2), fileLines("w", 2, 2)
	for _, b := range [][][]byte{b1, long, b2, long} {
		fileWrite(t, s, b)
	}
	src := NewFileSource(dir)
	src.maxLine = 100
	var got []string
	if err := src.Scan(context.Background(), func(l []byte) error { got = append(got, string(l)); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := fileStrings(b1, b2); !slices.Equal(got, want) || src.Skipped() != 2 {
		t.Fatalf("got %q skipped %d", got, src.Skipped())
	}
}

func TestFileSinkLargeLineRoundTrips(t *testing.T) {
	dir := t.TempDir()
	s := fileNewSink(t, dir, FileOptions{Writer: "w"})
	huge := fmt.Appendf(nil, `{"content":%q}`, strings.Repeat("m", 5<<20))
	batch := [][]byte{fileLines("w", 0, 1)[0], huge, fileLines("w", 1, 1)[0]}
	fileWrite(t, s, batch)
	got, src := fileScanAll(t, dir)
	if len(got) != 3 || got[1] != string(huge) || src.Skipped() != 0 {
		t.Fatalf("5 MiB line did not round-trip: %d lines, skipped %d", len(got), src.Skipped())
	}
}

// A newline inside an event would split it into two garbage lines; it is JSON
// whitespace, so the sink turns it into a space.
func TestFileSinkKeepsOneEventOneLine(t *testing.T) {
	dir := t.TempDir()
	s := fileNewSink(t, dir, FileOptions{Writer: "w"})
	fileWrite(t, s, [][]byte{[]byte("{\n\"a\":\n1}\n"), {}, []byte(`{"b":2}`)})
	got, src := fileScanAll(t, dir)
	if want := []string{`{ "a": 1} `, `{"b":2}`}; !slices.Equal(got, want) || src.Skipped() != 0 {
		t.Fatalf("got %q skipped %d", got, src.Skipped())
	}
}

func TestFileSinkFailedWriteLeavesNoPartialBatch(t *testing.T) {
	cases := []struct {
		name   string
		inject func(s *FileSink)
		want   error
	}{
		{"short write, disk full", func(s *FileSink) {
			s.writeFile = func(f *os.File, b []byte) (int, error) {
				n, _ := f.Write(b[:len(b)/2+3]) // a torn line in the middle of the batch
				return n, syscall.ENOSPC
			}
		}, syscall.ENOSPC},
		{"fsync fails", func(s *FileSink) {
			s.syncFile = func(*os.File) error { return syscall.EIO }
		}, syscall.EIO},
		{"file closed under the sink", func(s *FileSink) {
			_ = s.file.Close()
		}, os.ErrClosed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := fileNewSink(t, dir, FileOptions{Writer: "w"})
			b1, b2, b3 := fileLines("w", 0, 3), fileLines("w", 3, 5), fileLines("w", 8, 2)
			fileWrite(t, s, b1)
			seg := s.path
			before, _ := os.Stat(seg)

			tc.inject(s)
			err := s.Write(context.Background(), b2)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), seg) {
				t.Fatalf("Write error = %v, want %v naming %s", err, tc.want, seg)
			}
			if after, _ := os.Stat(seg); after.Size() != before.Size() {
				t.Fatalf("segment grew from %d to %d bytes after a failed batch", before.Size(), after.Size())
			}

			s.writeFile, s.syncFile = (*os.File).Write, (*os.File).Sync
			fileWrite(t, s, b3) // the sink recovers (a fresh segment if the handle broke)
			got, src := fileScanAll(t, dir)
			if want := fileStrings(b1, b3); !slices.Equal(got, want) || src.Skipped() != 0 {
				t.Fatalf("got %q skipped %d, want %q", got, src.Skipped(), want)
			}
		})
	}
}

func TestFileSinkConcurrentWrites(t *testing.T) {
	dir := t.TempDir()
	s := fileNewSink(t, dir, FileOptions{Writer: "w", SegmentBytes: 4096})
	const writers, batches, per = 8, 40, 5
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range batches {
				if err := s.Write(context.Background(), fileLines(fmt.Sprint("g", w), i*per, per)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	got, src := fileScanAll(t, dir)
	if len(got) != writers*batches*per || src.Skipped() != 0 {
		t.Fatalf("read %d lines (skipped %d), want %d", len(got), src.Skipped(), writers*batches*per)
	}
}

func TestFileSinkClose(t *testing.T) {
	s, err := NewFileSink(t.TempDir(), FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if !strings.HasPrefix(filepath.Base(s.path), fileSafeName(host)+"-") || !strings.Contains(s.path, fmt.Sprint("-", os.Getpid(), "-")) {
		t.Fatalf("default writer not <hostname>-<pid>: %s", s.path)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Write(context.Background(), fileLines("w", 0, 1)); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Write after Close = %v", err)
	}
}

func TestFileSinkWriterNameStaysInDir(t *testing.T) {
	dir := t.TempDir()
	s := fileNewSink(t, dir, FileOptions{Writer: "../escape/x"})
	if filepath.Dir(s.path) != filepath.Join(dir, filepath.FromSlash(s.part)) {
		t.Fatalf("segment %s outside %s", s.path, dir)
	}
}

func TestFileSinkWriteHonoursCancelledContext(t *testing.T) {
	s := fileNewSink(t, t.TempDir(), FileOptions{Writer: "w"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Write(ctx, fileLines("w", 0, 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Write = %v", err)
	}
}

func TestFileErrorsNameTheDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	err := NewFileSource(missing).Scan(context.Background(), func([]byte) error { return nil })
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Scan of a missing dir = %v", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(file, "replay")
	if _, err := NewFileSink(bad, FileOptions{}); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("NewFileSink under a file = %v", err)
	}
}

func TestFileSourceScanStopsOnCancelAndFnError(t *testing.T) {
	dir := t.TempDir()
	s := fileNewSink(t, dir, FileOptions{Writer: "w"})
	fileWrite(t, s, fileLines("w", 0, 10))
	if err := os.Mkdir(filepath.Join(dir, "sub.jsonl"), 0o755); err != nil { // not a segment
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := NewFileSource(dir).Scan(ctx, func([]byte) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n != 3 {
		t.Fatalf("Scan after cancel = %v after %d lines", err, n)
	}

	stop := errors.New("stop")
	err = NewFileSource(dir).Scan(context.Background(), func([]byte) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("Scan = %v, want fn's error", err)
	}
}

// fileBenchStep is a realistic step line of about 1.5 KB: a tool result and an
// assistant answer with a tool call.
func fileBenchStep(tb testing.TB) []byte {
	tb.Helper()
	ev := &StepEvent{
		V: Version, Type: TypeStep, ID: NewEventID(), EpisodeID: NewEventID(), Turn: 7,
		Messages: []protocol.Message{{
			Role: "tool", ToolCallID: "call_abc123",
			Content: strings.Repeat(`{"flight":"HAT170","status":"available","seats":9} `, 14),
		}},
		Response: &protocol.Message{Role: "assistant", Content: strings.Repeat("I can help with that. ", 12),
			ToolCalls: []protocol.ToolCall{{ID: "call_def456", Type: "function", Name: "book_reservation",
				Arguments: `{"user_id":"mia_li_3668","origin":"JFK","destination":"SEA","cabin":"economy"}`}}},
		Usage:  protocol.Usage{InputTokens: 5231, OutputTokens: 88},
		Timing: Timing{Augment: 0.4, UpstreamTTFB: 512.3, Total: 1430.2},
		Status: 200, At: time.Now().UTC(),
	}
	line, err := json.Marshal(ev)
	if err != nil {
		tb.Fatal(err)
	}
	return line
}

func BenchmarkFileSinkWrite(b *testing.B) {
	line := fileBenchStep(b)
	batch := make([][]byte, 256)
	for i := range batch {
		batch[i] = line
	}
	s := fileNewSink(b, b.TempDir(), FileOptions{Writer: "bench"})
	b.SetBytes(int64(len(batch) * (len(line) + 1)))
	b.ReportAllocs()
	steps := 0
	for b.Loop() {
		fileWrite(b, s, batch)
		steps += len(batch)
	}
	b.ReportMetric(float64(steps)/b.Elapsed().Seconds(), "steps/s")
	b.ReportMetric(float64(len(line)), "B/step")
}
