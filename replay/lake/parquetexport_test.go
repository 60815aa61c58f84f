package lake

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/parquet-go/parquet-go"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/replay"
)

func TestHiveEscape(t *testing.T) {
	for in, want := range map[string]string{
		"":            hiveNull,
		"control":     "control",
		"rag/v2":      "rag%2Fv2",
		"a=b":         "a%3Db",
		"100%":        "100%25",
		"x:y?z#":      "x%3Ay%3Fz%23",
		"tab\there":   "tab%09here",
		"é ü":         "é ü", // Hive keeps UTF-8 and spaces
		`"'*\{[]^`:    "%22%27%2A%5C%7B%5B%5D%5E",
		"del\x7f":     "del%7F",
		"%2F":         "%252F",
		"plain-._~+,": "plain-._~+,",
	} {
		if got := hiveEscape(in); got != want {
			t.Errorf("hiveEscape(%q) = %q, want %q", in, got, want)
		}
		if got := hiveUnescape(hiveEscape(in)); got != in {
			t.Errorf("hiveUnescape(hiveEscape(%q)) = %q", in, got)
		}
	}
	// What Hive leaves alone when reading: a "%" without two hex digits.
	for in, want := range map[string]string{"50%": "50%", "%zz": "%zz", "%4": "%4", "%41%": "A%"} {
		if got := hiveUnescape(in); got != want {
			t.Errorf("hiveUnescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzHiveEscape: an escaped value is one path segment (no "/", no "=", no control
// byte), reads back as itself, and a directory path of escaped values parses back.
func FuzzHiveEscape(f *testing.F) {
	for _, s := range []string{"", "a/b", "x=y%z", "\x00\x1f\x7f", "__HIVE_DEFAULT_PARTITION__x", "%%41"} {
		f.Add(s, "arm")
	}
	f.Fuzz(func(t *testing.T, v, arm string) {
		e := hiveEscape(v)
		if strings.ContainsAny(e, "/=\x00\n") || e == "" {
			t.Fatalf("hiveEscape(%q) = %q", v, e)
		}
		if v != hiveNull && hiveUnescape(e) != v {
			t.Fatalf("hiveUnescape(hiveEscape(%q)) = %q", v, hiveUnescape(e))
		}
		ep := &replay.Episode{TaskID: v, Arm: arm, StartedAt: time.Unix(1772589967, 0)}
		dir := partitionDir(ep, []string{PartitionDate, PartitionArm, PartitionTask})
		kv, err := parseHivePath(dir + "/part-00000.parquet")
		if err != nil || len(kv) != 3 || kv[0] != [2]string{"dt", "2026-03-04"} {
			t.Fatalf("parseHivePath(%q) = %q, %v", dir, kv, err)
		}
		if (arm != hiveNull && kv[1][1] != arm) || (v != hiveNull && kv[2][1] != v) {
			t.Fatalf("parseHivePath(%q) = %q; want arm %q task %q", dir, kv, arm, v)
		}
		_, _ = parseHivePath(v) // any path: no panic
	})
}

// bufferEpisodes iterates over a Buffer's episodes, in Buffer order.
func bufferEpisodes(b *replay.Buffer) EpisodeIter {
	return func(yield func(*replay.Episode) error) error {
		for _, e := range b.Episodes {
			if err := yield(e); err != nil {
				return err
			}
		}
		return nil
	}
}

// exportEpisodes are n episodes over several days, arms (one with characters Hive
// escapes, one empty) and tasks, with tool calls and rewards (some without).
func exportEpisodes(n int) []*replay.Episode {
	arms := []string{"baseline", "rag/v2=on", ""}
	start := time.Date(2026, 3, 1, 22, 0, 0, 0, time.UTC)
	var eps []*replay.Episode
	for i := range n {
		ep := &replay.Episode{
			ID: fmt.Sprintf("ep-%04d", i), TaskID: fmt.Sprintf("task-%d", i%7), Task: "do thing " + fmt.Sprint(i%7),
			Arm: arms[i%len(arms)], Context: strings.Repeat("ctx ", i%5), Steps: 2,
			StartedAt: start.Add(time.Duration(i) * 97 * time.Minute),
			Messages: []protocol.Message{
				{Role: "user", Content: fmt.Sprintf("question %d", i)},
				{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: fmt.Sprintf("call_%d", i), Type: "function", Name: "lookup", Arguments: `{"n":` + fmt.Sprint(i) + `}`}}},
				{Role: "tool", ToolCallID: fmt.Sprintf("call_%d", i), Content: "found"},
				{Role: "assistant", Content: "answer"},
			},
		}
		if i%4 != 3 {
			r := float64(i % 2)
			ok := r == 1
			ep.Reward, ep.Success = &r, &ok
			ep.Metadata = json.RawMessage(fmt.Sprintf(`{"experiment":"exp-%d"}`, i%2))
		}
		if i%3 == 0 {
			ep.Experiment = "fleet" // recorded by the events: the metadata's is not read
		}
		eps = append(eps, ep)
	}
	return eps
}

// readPartFile reads a part file's rows and the names of its top-level columns.
func readPartFile(t *testing.T, path string) (rows []parquetRow, cols []string, groups []int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, fl := range pf.Schema().Fields() {
		cols = append(cols, fl.Name())
	}
	for _, rg := range pf.RowGroups() {
		groups = append(groups, rg.NumRows())
	}
	rd := parquet.NewGenericReader[parquetRow](pf)
	rows = make([]parquetRow, pf.NumRows())
	if n, err := rd.Read(rows); n != len(rows) || err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("%s: read %d of %d rows: %v", path, n, len(rows), err)
	}
	return rows, cols, groups
}

func TestExportParquetPartitioned(t *testing.T) {
	t.Parallel() // its own directories and data: it overlaps the package's other heavy tests
	// 60 episodes: every arm × task, a null arm, 60 distinct hours over four days,
	// and more rows than the unpartitioned case's 50-row groups.
	eps := exportEpisodes(60)
	for _, tc := range []struct {
		name string
		by   []string
		o    PartitionOptions
	}{
		{"dt,arm", []string{"dt", "arm"}, PartitionOptions{RowGroupRows: 7, MaxOpenFiles: 2}},
		{"arm,task,hr", []string{"arm", "task", "hr"}, PartitionOptions{RowGroupBytes: 300}},
		{"experiment", []string{"experiment"}, PartitionOptions{}},
		{"none", nil, PartitionOptions{FileBytes: 1, RowGroupRows: 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			o := tc.o
			o.PartitionBy = tc.by
			m, err := ExportParquetPartitioned(t.Context(), NewDirDest(dir), bufferEpisodes(&replay.Buffer{Episodes: eps}), o)
			if err != nil {
				t.Fatal(err)
			}
			cols := make([]string, len(tc.by))
			for i, c := range tc.by {
				cols[i] = partitionColumn(c)
			}
			checkPartitionedExport(t, dir, m, eps, cols, o.withDefaults())
			if len(cols) > 0 {
				return
			}
			// Unpartitioned, every part file is what replay import reads back.
			imported := 0
			for _, f := range m.Files {
				b, err := os.ReadFile(filepath.Join(dir, f.Path))
				if err != nil {
					t.Fatal(err)
				}
				n, _, err := importParquet(bytes.NewReader(b), int64(len(b)), nil, func([]byte) error { return nil })
				if err != nil {
					t.Fatalf("import %s: %v", f.Path, err)
				}
				imported += n
			}
			if imported != len(eps) || len(m.Files) < 2 {
				t.Errorf("imported %d episodes from %d files, exported %d", imported, len(m.Files), len(eps))
			}
		})
	}
}

// checkPartitionedExport reads every file of an export back and checks it against
// the episodes: each episode once, in the directory of its own partition values,
// without the partition columns in the file, row groups and files within bounds, and
// the manifest naming exactly the files there.
func checkPartitionedExport(t *testing.T, dir string, m Manifest, eps []*replay.Episode, cols []string, o PartitionOptions) {
	t.Helper()
	var onDisk []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			onDisk = append(onDisk, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, f := range m.Files {
		listed = append(listed, f.Path)
	}
	if want := append(slices.Clone(listed), ManifestName); !slices.Equal(slices.Sorted(slices.Values(onDisk)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("files on disk %q\nmanifest lists %q", onDisk, listed)
	}
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var onDiskManifest Manifest
	if err := json.Unmarshal(b, &onDiskManifest); err != nil || onDiskManifest.Format != ManifestFormat || onDiskManifest.Rows != int64(len(eps)) {
		t.Fatalf("manifest %s: %v", b, err)
	}
	byID := map[string]*replay.Episode{}
	for _, e := range eps {
		byID[e.ID] = e
	}
	seen := map[string]bool{}
	for _, mf := range m.Files {
		kv, err := parseHivePath(mf.Path)
		if err != nil {
			t.Fatal(err)
		}
		if len(kv) != len(cols) {
			t.Fatalf("%s: partitions %q, want %q", mf.Path, kv, cols)
		}
		rows, fileCols, groups := readPartFile(t, filepath.Join(dir, filepath.FromSlash(mf.Path)))
		if int64(len(rows)) != mf.Rows || len(rows) == 0 {
			t.Errorf("%s: %d rows, manifest says %d", mf.Path, len(rows), mf.Rows)
		}
		for _, c := range cols {
			if slices.Contains(fileCols, c) {
				t.Errorf("%s: partition column %s is in the file too", mf.Path, c)
			}
		}
		for _, c := range []string{"episode_id", "task", "messages", "reward", "success", "started_at"} {
			if !slices.Contains(fileCols, c) {
				t.Errorf("%s: column %s missing (%q)", mf.Path, c, fileCols)
			}
		}
		for _, g := range groups {
			if g > int64(o.RowGroupRows) {
				t.Errorf("%s: a row group of %d rows > %d", mf.Path, g, o.RowGroupRows)
			}
		}
		for _, r := range rows {
			e := byID[r.EpisodeID]
			if e == nil || seen[r.EpisodeID] {
				t.Fatalf("%s: episode %q unknown or seen twice", mf.Path, r.EpisodeID)
			}
			seen[r.EpisodeID] = true
			at := e.StartedAt.UTC()
			for i, c := range cols {
				var exp struct{ Experiment string }
				_ = json.Unmarshal(e.Metadata, &exp)
				want := map[string]string{PartitionDate: at.Format(time.DateOnly), PartitionHour: fmt.Sprintf("%02d", at.Hour()),
					PartitionArm: e.Arm, PartitionTask: e.TaskID, PartitionExperiment: cmp.Or(e.Experiment, exp.Experiment)}[c]
				if kv[i] != [2]string{c, want} {
					t.Errorf("%s: episode %s has %s %q, in directory %q", mf.Path, e.ID, c, want, kv[i])
				}
			}
			// The row is the episode's, but for the columns the path holds.
			full := toParquet(rowOf(e))
			if slices.Contains(cols, PartitionArm) {
				full.Arm = ""
			}
			if slices.Contains(cols, PartitionTask) {
				full.TaskID = ""
			}
			if slices.Contains(cols, PartitionExperiment) {
				full.Experiment = ""
			}
			if got, want := must(json.Marshal(fromParquet(r))), must(json.Marshal(fromParquet(full))); !bytes.Equal(got, want) {
				t.Fatalf("%s: row\n got %s\nwant %s", mf.Path, got, want)
			}
		}
	}
	if len(seen) != len(eps) {
		t.Errorf("%d of %d episodes exported", len(seen), len(eps))
	}
	t.Logf("%d episodes → %d files", len(eps), len(m.Files))
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestExportParquetPartitionedBounds(t *testing.T) {
	t.Parallel() // its own directories and data: it overlaps the package's other heavy tests
	// Two open files at most, partitions interleaved: files are finished and new
	// part files started, numbered across the export, never two with one name.
	eps := exportEpisodes(60)
	dir := t.TempDir() + "/x"
	m, err := ExportParquetPartitioned(t.Context(), NewDirDest(dir), bufferEpisodes(&replay.Buffer{Episodes: eps}),
		PartitionOptions{PartitionBy: []string{"arm"}, MaxOpenFiles: 2, RowGroupRows: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) <= 3 {
		t.Errorf("%d files for 3 arms with 2 open at once, interleaved: want more", len(m.Files))
	}
	names := map[string]bool{}
	for _, f := range m.Files {
		base := f.Path[strings.LastIndexByte(f.Path, '/')+1:]
		if names[base] {
			t.Errorf("part name %s used twice", base)
		}
		names[base] = true
	}
	checkPartitionedExport(t, dir, m, eps, []string{PartitionArm}, PartitionOptions{RowGroupRows: 4})

	// A memory bound smaller than three episodes: row groups are written early
	// (small ones), but every partition keeps one file.
	dir = t.TempDir() + "/z"
	m, err = ExportParquetPartitioned(t.Context(), NewDirDest(dir), bufferEpisodes(&replay.Buffer{Episodes: eps}),
		PartitionOptions{PartitionBy: []string{"arm"}, MemoryBytes: 500})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != 3 {
		t.Errorf("%d files for 3 arms, want one each", len(m.Files))
	}
	groups := 0
	for _, f := range m.Files {
		_, _, g := readPartFile(t, filepath.Join(dir, filepath.FromSlash(f.Path)))
		groups += len(g)
	}
	if groups < len(eps)/3 {
		t.Errorf("%d row groups for %d episodes under a 500-byte bound: memory not bounded", groups, len(eps))
	}
	checkPartitionedExport(t, dir, m, eps, []string{PartitionArm}, PartitionOptions{RowGroupRows: defaultRowGroupRows})
}

func TestExportParquetPartitionedRefuses(t *testing.T) {
	eps := bufferEpisodes(&replay.Buffer{Episodes: exportEpisodes(3)})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "old.parquet"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ExportParquetPartitioned(t.Context(), NewDirDest(dir), eps, PartitionOptions{}); !errors.Is(err, ErrExportNotEmpty) {
		t.Errorf("into a non-empty dir: %v", err)
	}
	err := PartitionOptions{PartitionBy: []string{"dt", "month", "arm", "arm"}, RowGroupRows: -1, MaxOpenFiles: -2}.Validate()
	for _, want := range []string{`"month"`, `"arm" given twice`, "row group rows -1", "max open files -2"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v; want it to say %s", err, want)
		}
	}
	// An episode stream that fails: its error comes back, no manifest, no temporary.
	out := t.TempDir() + "/y"
	boom := errors.New("boom")
	_, err = ExportParquetPartitioned(t.Context(), NewDirDest(out), func(yield func(*replay.Episode) error) error {
		for _, e := range exportEpisodes(5) {
			if err := yield(e); err != nil {
				return err
			}
		}
		return boom
	}, PartitionOptions{PartitionBy: []string{"arm"}})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	_ = filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("left %s behind", p)
		}
		return nil
	})
}

func TestExportParquetPartitionedS3(t *testing.T) {
	fake := testkit.StartS3(t, "lake")
	eps := exportEpisodes(40)
	dest, err := OpenExportDest(t.Context(), "s3://lake/exports/run1?endpoint="+fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ExportParquetPartitioned(t.Context(), dest, bufferEpisodes(&replay.Buffer{Episodes: eps}), PartitionOptions{PartitionBy: []string{"dt", "arm"}})
	if err != nil {
		t.Fatal(err)
	}
	// Download what is there and check it as a directory.
	c := fake.Client()
	dir := t.TempDir()
	for _, k := range fake.Keys(t, "lake", "exports/run1/") {
		obj, err := c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String("lake"), Key: aws.String(k)})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(obj.Body)
		_ = obj.Body.Close()
		p := filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(k, "exports/run1/")))
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	checkPartitionedExport(t, dir, m, eps, []string{PartitionDate, PartitionArm}, PartitionOptions{RowGroupRows: defaultRowGroupRows})
	if _, err := ExportParquetPartitioned(t.Context(), dest, bufferEpisodes(&replay.Buffer{Episodes: eps}), PartitionOptions{}); !errors.Is(err, ErrExportNotEmpty) {
		t.Errorf("second export into the prefix: %v", err)
	}
	if _, err := OpenExportDest(t.Context(), "redis://localhost:6379/0?stream=x"); err == nil {
		t.Error("a redis destination was accepted")
	}
}

// BenchmarkExportParquetPartitionedMemory exports n synthetic episodes of ~16 KB of
// text (the tau-bench median) over 30 days and three arms (90 partitions), partitioned
// by dt and arm, under a 32 MiB memory bound and the default 32 open files, and
// reports the peak live heap sampled every 100 episodes: it stays flat from 2 000
// episodes (29 MB of text) to 20 000 (288 MB).
//
//	go test -run '^$' -bench ExportParquetPartitionedMemory -benchtime 1x ./replay
func BenchmarkExportParquetPartitionedMemory(b *testing.B) {
	for _, n := range []int{2_000, 20_000} {
		b.Run(fmt.Sprintf("episodes=%d", n), func(b *testing.B) {
			for b.Loop() {
				peak := benchExport(b, n)
				b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			}
		})
	}
}

func benchExport(b *testing.B, n int) uint64 {
	dir := b.TempDir() + "/out"
	arms := []string{"baseline", "rag", "playbook"}
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	word := []string{"booking ", "flight ", "refund ", "the ", "passenger ", "policy ", "cabin ", "date "}
	var peak uint64
	var ms runtimeMemStats
	episodes := func(yield func(*replay.Episode) error) error {
		for i := range n {
			var sb strings.Builder
			for j := 0; sb.Len() < 1800; j++ {
				sb.WriteString(word[(i*7+j*3)%len(word)])
				sb.WriteString(fmt.Sprint(i*j%997, " "))
			}
			text := sb.String()
			ep := &replay.Episode{ID: fmt.Sprintf("ep-%07d", i), TaskID: fmt.Sprintf("task-%d", i%50), Arm: arms[i%3],
				StartedAt: start.Add(time.Duration(i) * 30 * 24 * time.Hour / time.Duration(n)), Steps: 4}
			for k := range 8 {
				ep.Messages = append(ep.Messages, protocol.Message{Role: []string{"user", "assistant"}[k%2], Content: text})
			}
			if err := yield(ep); err != nil {
				return err
			}
			if i%100 == 0 {
				peak = max(peak, ms.heapLive())
			}
		}
		return nil
	}
	if _, err := ExportParquetPartitioned(b.Context(), NewDirDest(dir), episodes,
		PartitionOptions{PartitionBy: []string{"dt", "arm"}, MemoryBytes: 32 << 20}); err != nil {
		b.Fatal(err)
	}
	return peak
}
