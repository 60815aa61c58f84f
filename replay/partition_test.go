package replay

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParsePartition(t *testing.T) {
	day := func(y, m, d, h int) time.Time { return time.Date(y, time.Month(m), d, h, 0, 0, 0, time.UTC) }
	for _, tc := range []struct {
		segs       []string
		start, end time.Time
		ok         bool
	}{
		{[]string{"dt=2026-03-04"}, day(2026, 3, 4, 0), day(2026, 3, 5, 0), true},
		{[]string{"dt=2026-03-04", "hr=00"}, day(2026, 3, 4, 0), day(2026, 3, 4, 1), true},
		{[]string{"dt=2026-03-04", "hr=23"}, day(2026, 3, 4, 23), day(2026, 3, 5, 0), true},
		{[]string{"dt=2026-12-31"}, day(2026, 12, 31, 0), day(2027, 1, 1, 0), true},
		{[]string{"2026"}, day(2026, 1, 1, 0), day(2027, 1, 1, 0), true},
		{[]string{"2026", "02"}, day(2026, 2, 1, 0), day(2026, 3, 1, 0), true},
		{[]string{"2026", "02", "28"}, day(2026, 2, 28, 0), day(2026, 3, 1, 0), true},
		{[]string{"2026", "02", "28", "07"}, day(2026, 2, 28, 7), day(2026, 2, 28, 8), true},
		{nil, time.Time{}, time.Time{}, false},
		{[]string{"hr=05"}, time.Time{}, time.Time{}, false},
		{[]string{"dt=2026-3-4"}, time.Time{}, time.Time{}, false},
		{[]string{"dt=2026-02-30"}, time.Time{}, time.Time{}, false},
		{[]string{"dt=2026-03-04", "hr=24"}, time.Time{}, time.Time{}, false},
		{[]string{"dt=2026-03-04", "hr=5"}, time.Time{}, time.Time{}, false},
		{[]string{"dt=2026-03-04", "hr=05", "x"}, time.Time{}, time.Time{}, false},
		{[]string{"dt=2026-03-04", "05"}, time.Time{}, time.Time{}, false},
		{[]string{"2026", "13"}, time.Time{}, time.Time{}, false},
		{[]string{"2026", "02", "30"}, time.Time{}, time.Time{}, false},
		{[]string{"2026", "02", "28", "07", "00"}, time.Time{}, time.Time{}, false},
		{[]string{"+026"}, time.Time{}, time.Time{}, false},
		{[]string{"spool"}, time.Time{}, time.Time{}, false},
	} {
		start, end, ok := parsePartition(tc.segs)
		if ok != tc.ok || !start.Equal(tc.start) || !end.Equal(tc.end) {
			t.Errorf("parsePartition(%q) = %v, %v, %v; want %v, %v, %v", tc.segs, start, end, ok, tc.start, tc.end, tc.ok)
		}
	}
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("X", -3*3600))
	if got := partitionPath(at); got != "dt=2026-03-04/hr=08" {
		t.Errorf("partitionPath = %q (UTC)", got)
	}
}

// FuzzParsePartition: any segments parse without panicking, into a range of at most
// a year that starts on an hour, and a partition the sink writes parses back to its
// own hour.
func FuzzParsePartition(f *testing.F) {
	for _, s := range []string{"dt=2026-03-04/hr=05", "2026/02/28/07", "dt=2026-02-30", "2026", "dt=/hr=", "dt=2026-03-04/hr=-1", "a/b/c"} {
		f.Add(s, int64(1772589967))
	}
	f.Fuzz(func(t *testing.T, path string, unix int64) {
		start, end, ok := parsePartition(strings.Split(path, "/"))
		if ok {
			if !end.After(start) || end.Sub(start) > 366*24*time.Hour || !start.Truncate(time.Hour).Equal(start) {
				t.Fatalf("parsePartition(%q) = [%v, %v)", path, start, end)
			}
		}
		at := time.Unix(unix%(1<<36), 0).UTC() // years 1970..4147
		p := partitionPath(at)
		start, end, ok = parsePartition(strings.Split(p, "/"))
		if !ok || at.Before(start) || !at.Before(end) || end.Sub(start) != time.Hour {
			t.Fatalf("partitionPath(%v) = %q parses to [%v, %v) %v", at, p, start, end, ok)
		}
	})
}

// windowSource is what FileSource and S3Source offer a window reader.
type windowSource interface {
	Source
	ScanWindow(ctx context.Context, from, to time.Time, fn func(line []byte) error) error
	Size(ctx context.Context) (int64, error)
	SizeWindow(ctx context.Context, from, to time.Time) (int64, error)
	bytesRead() int64
}

var (
	_ windowSource = (*FileSource)(nil)
	_ windowSource = (*S3Source)(nil)
)

// bufStart is the first hour of the bufDays-day buffers the window tests write: they
// cross midnights and a month's end (Feb 28 to Mar 1), the boundaries a window's
// listing turns at in both layouts (dt=…/hr=… and the legacy YYYY/MM/DD/HH). A few
// days cross the same boundaries a month would, at a fifth of the objects.
var bufStart = time.Date(2026, 2, 27, 0, 0, 0, 0, time.UTC)

const bufDays = 6

// bufDay is the day the window tests read: the first of a month, the day after a
// month's last.
var bufDay = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// writeBuffer writes one batch an hour for bufDays days through write, the clock set to
// that hour (plus a few minutes), and returns every line by the hour it was written.
func writeBuffer(t *testing.T, setNow func(time.Time), write func([][]byte) error) map[time.Time][]string {
	t.Helper()
	byHour := map[time.Time][]string{}
	pad := strings.Repeat("x", 400)
	for h := range bufDays * 24 {
		hour := bufStart.Add(time.Duration(h) * time.Hour)
		setNow(hour.Add(17 * time.Minute))
		batch := make([][]byte, 5)
		for i := range batch {
			batch[i] = fmt.Appendf(nil, `{"h":%d,"i":%d,"pad":%q}`, h, i, pad)
			byHour[hour] = append(byHour[hour], string(batch[i]))
		}
		if err := write(batch); err != nil {
			t.Fatal(err)
		}
	}
	return byHour
}

// linesIn is every line written in an hour that overlaps [from, to), sorted.
func linesIn(byHour map[time.Time][]string, from, to time.Time) []string {
	var out []string
	for h, lines := range byHour {
		if h.Before(to) && h.Add(time.Hour).After(from) {
			out = append(out, lines...)
		}
	}
	slices.Sort(out)
	return out
}

// checkWindows reads windows of a bufDays-day buffer and checks that each returns
// exactly the lines of its hours plus extra (the unpartitioned lines), and that a
// one-day window reads no more than its day's share (1/bufDays) with slack for one
// object's size, never a second day's: counted as the bytes the source read
// (bytesRead), the bytes it delivered, and the bytes SizeWindow announces.
func checkWindows(t *testing.T, src windowSource, byHour map[time.Time][]string, extra []string) {
	t.Helper()
	ctx := t.Context()
	read := func(from, to time.Time) (lines []string, delivered, stored int64) {
		err := src.ScanWindow(ctx, from, to, func(l []byte) error {
			lines = append(lines, string(l))
			delivered += int64(len(l)) + 1
			return nil
		})
		if err != nil {
			t.Fatalf("ScanWindow(%v, %v): %v", from, to, err)
		}
		slices.Sort(lines)
		return lines, delivered, src.bytesRead()
	}
	var all []string
	var allDelivered int64
	if err := src.Scan(ctx, func(l []byte) error {
		all = append(all, string(l))
		allDelivered += int64(len(l)) + 1
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	allStored := src.bytesRead()
	size, err := src.Size(ctx)
	if err != nil || size != allStored {
		t.Fatalf("Size = %d, %v; Scan read %d bytes", size, err, allStored)
	}
	slices.Sort(all)
	if want := append(linesIn(byHour, bufStart, bufStart.AddDate(0, 0, bufDays)), extra...); !slices.Equal(all, sorted(want)) {
		t.Fatalf("Scan read %d lines, want %d", len(all), len(want))
	}

	day := bufDay
	for _, tc := range []struct {
		name     string
		from, to time.Time
	}{
		{"one day", day, day.AddDate(0, 0, 1)},
		{"one day, off the hour", day.Add(30 * time.Minute), day.AddDate(0, 0, 1).Add(30 * time.Minute)},
		{"an hour", day.Add(5 * time.Hour), day.Add(6 * time.Hour)},
		{"a minute", day.Add(5*time.Hour + time.Minute), day.Add(5*time.Hour + 2*time.Minute)},
		{"over the month's end", day.Add(-90 * time.Minute), day.Add(90 * time.Minute)},
		{"open start", time.Time{}, bufStart.Add(3 * time.Hour)},
		{"open end", bufStart.AddDate(0, 0, bufDays-1).Add(20 * time.Hour), time.Time{}},
		{"before the buffer", bufStart.AddDate(0, -1, 0), bufStart.AddDate(0, 0, -1)},
		{"after the buffer", bufStart.AddDate(0, 0, bufDays+1), bufStart.AddDate(0, 1, 0)},
		{"the whole buffer", bufStart, bufStart.AddDate(0, 0, bufDays)},
	} {
		from, to := tc.from, tc.to
		lines, delivered, stored := read(from, to)
		if from.IsZero() {
			from = bufStart.AddDate(-10, 0, 0)
		}
		if to.IsZero() {
			to = bufStart.AddDate(10, 0, 0)
		}
		want := sorted(append(linesIn(byHour, from, to), extra...))
		if !slices.Equal(lines, want) {
			t.Errorf("%s: read %d lines, want %d", tc.name, len(lines), len(want))
		}
		sz, err := src.SizeWindow(ctx, tc.from, tc.to)
		if err != nil || sz != stored {
			t.Errorf("%s: SizeWindow = %d, %v; ScanWindow read %d bytes", tc.name, sz, err, stored)
		}
		if tc.name == "one day" {
			t.Logf("one day of %d: %d of %d bytes read (1/%.1f), %d of %d delivered (1/%.1f)", bufDays,
				stored, allStored, float64(allStored)/float64(stored), delivered, allDelivered, float64(allDelivered)/float64(delivered))
			// A day's share is 1/bufDays; a second day read too would be 2/bufDays.
			if limit := int64(bufDays - 2); stored*limit > allStored || delivered*limit > allDelivered {
				t.Errorf("one day of %d read %d of %d bytes, delivered %d of %d: more than 1/%d", bufDays, stored, allStored, delivered, allDelivered, limit)
			}
		}
	}
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

var fileSegmentRE = regexp.MustCompile(`^dt=\d{4}-\d{2}-\d{2}/hr=\d{2}/w-\d{20}-\d{6}\.jsonl$`)

func TestFileSourceWindow(t *testing.T) {
	t.Parallel() // its own directories and data: it overlaps the package's other heavy tests
	dir := t.TempDir()
	s := fileNewSink(t, dir, FileOptions{Writer: "w", SegmentBytes: 1500})
	byHour := writeBuffer(t, func(at time.Time) { s.now = func() time.Time { return at } }, func(b [][]byte) error {
		return s.Write(t.Context(), b)
	})
	// Every batch is in the partition of the hour it was written in.
	for _, seg := range fileSegmentsOf(t, dir) {
		rel, _ := filepath.Rel(dir, seg)
		if !fileSegmentRE.MatchString(filepath.ToSlash(rel)) {
			t.Fatalf("segment %s is not under dt=/hr=", rel)
		}
	}
	checkWindows(t, NewFileSource(dir), byHour, nil)

	// A flat buffer from before partitioning is read by Scan and by every window;
	// a directory that is not a partition is not replay data.
	flat := filepath.Join(dir, "old-00000000000000000001-000000.jsonl")
	if err := os.WriteFile(flat, []byte(`{"flat":1}`+"\n"+`{"flat":2}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "spool"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "spool", "x.jsonl"), []byte(`{"spool":1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkWindows(t, NewFileSource(dir), byHour, []string{`{"flat":1}`, `{"flat":2}`})
}

func TestFileSinkPartitionTurnsWithTheHour(t *testing.T) {
	dir := t.TempDir()
	s := fileNewSink(t, dir, FileOptions{Writer: "w"})
	at := time.Date(2026, 3, 4, 23, 59, 59, 0, time.UTC)
	s.now = func() time.Time { return at }
	fileWrite(t, s, fileLines("w", 0, 2))
	first := s.path
	at = at.Add(time.Second) // the next day's first hour
	fileWrite(t, s, fileLines("w", 2, 2))
	if s.path == first {
		t.Fatal("the segment did not change with the hour")
	}
	for path, want := range map[string]string{first: "dt=2026-03-04/hr=23", s.path: "dt=2026-03-05/hr=00"} {
		if rel, _ := filepath.Rel(dir, filepath.Dir(path)); filepath.ToSlash(rel) != want {
			t.Errorf("segment %s in %s, want %s", filepath.Base(path), rel, want)
		}
	}
	// Names stay unique across partitions: the sequence goes on.
	if filepath.Base(first) == filepath.Base(s.path) {
		t.Errorf("two segments named %s", filepath.Base(first))
	}
	got, _ := fileScanAll(t, dir)
	if want := fileStrings(fileLines("w", 0, 4)); !slices.Equal(got, want) {
		t.Fatalf("read back %q, want %q in time order", got, want)
	}
}

func TestFileSinkPartitionDirUnwritable(t *testing.T) {
	dir := t.TempDir()
	s := fileNewSink(t, dir, FileOptions{Writer: "w"})
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return at }
	// A file where the day's directory must go.
	if err := os.WriteFile(filepath.Join(dir, "dt=2030-01-01"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := s.Write(t.Context(), fileLines("w", 0, 1))
	if err == nil || !strings.Contains(err.Error(), "dt=2030-01-01") {
		t.Fatalf("Write = %v, want an error naming the partition", err)
	}
	at = at.Add(24 * time.Hour) // the next day is writable again
	fileWrite(t, s, fileLines("w", 1, 1))
}

// TestFileSinkUnpartitioned: an import's sink writes directly in the directory
// whatever the hour, and every window of a read takes those lines.
func TestFileSinkUnpartitioned(t *testing.T) {
	dir := t.TempDir()
	s := fileNewSink(t, dir, FileOptions{Writer: "imp", Unpartitioned: true})
	at := time.Date(2026, 3, 4, 23, 59, 59, 0, time.UTC)
	s.now = func() time.Time { return at }
	fileWrite(t, s, fileLines("imp", 0, 2))
	at = at.Add(2 * time.Hour)
	fileWrite(t, s, fileLines("imp", 2, 2))
	if filepath.Dir(s.path) != dir {
		t.Fatalf("segment %s not directly in %s", s.path, dir)
	}
	if parts, _ := filepath.Glob(filepath.Join(dir, "dt=*")); len(parts) > 0 {
		t.Fatalf("partitions made: %q", parts)
	}
	var got []string
	src := NewFileSource(dir)
	// A window far from the writes still reads the flat lines.
	from := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := src.ScanWindow(t.Context(), from, from.Add(time.Hour), func(l []byte) error { got = append(got, string(l)); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := fileStrings(fileLines("imp", 0, 4)); !slices.Equal(got, want) {
		t.Fatalf("window read %q, want %q", got, want)
	}
}
