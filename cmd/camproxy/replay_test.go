package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/tidwall/gjson"

	cobracli "github.com/camproxy/camproxy/internal/cli"
)

const tauAirline = "../../../shared/data/tau-bench/gpt-4o-airline.json"

// runCLI runs camproxy with args and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, &stdout, &stderr, func(string) (string, bool) { return "", false })
	code := cobracli.ExitCode(err, &stderr)
	return stdout.String(), stderr.String(), code
}

// airline is the real tau-bench file imported once for the package run: an import
// and every read of it are seconds of CPU under -race, and most tests only read it.
// TestMain removes the directories.
var airline struct {
	once              sync.Once
	root              string // holds both buffers
	full, sample, seg string // the buffers' directories; the import's segment file name
	err               error
}

// airlineSampleTasks is how many of the 50 tasks the sample buffer keeps, with all
// four runs of each.
const airlineSampleTasks = 5

// importAirline imports the real file (flags after the positional FILE, as users
// type them), then writes the sample: the import's own lines of the episodes of
// the first airlineSampleTasks tasks, in a segment named as the import's.
func importAirline() error {
	root, err := os.MkdirTemp("", "camproxy-airline-")
	if err != nil {
		return err
	}
	airline.root = root
	airline.full, airline.sample = filepath.Join(root, "full"), filepath.Join(root, "sample")
	uri := "file://" + filepath.ToSlash(airline.full)
	var out, errOut bytes.Buffer
	err = run(context.Background(), []string{"replay", "import", "--format", "tau-bench", tauAirline, "--to", uri}, &out, &errOut, func(string) (string, bool) { return "", false })
	if code := cobracli.ExitCode(err, &errOut); code != 0 {
		return fmt.Errorf("import exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "imported 200 episodes (3054 events) into "+uri) {
		return fmt.Errorf("import summary %q", out.String())
	}
	segs, err := filepath.Glob(filepath.Join(airline.full, "*.jsonl"))
	if err != nil || len(segs) != 1 {
		return fmt.Errorf("the import wrote segments %v (%v), want one", segs, err)
	}
	data, err := os.ReadFile(segs[0])
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for i := range airlineSampleTasks {
		keep[fmt.Sprintf("tau-airline-%d", i)] = true
	}
	var sample []byte
	for line := range bytes.Lines(data) {
		ep := gjson.GetBytes(line, "episode_id").String() // tau-airline-TASK-TRIAL
		if i := strings.LastIndexByte(ep, '-'); i > 0 && keep[ep[:i]] {
			sample = append(sample, line...)
		}
	}
	airline.seg = filepath.Base(segs[0])
	if err := os.Mkdir(airline.sample, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(airline.sample, airline.seg), sample, 0o644)
}

// airlineBuffer is the file:// URI of the shared import (full) or of its sample. The
// buffer is shared: a test must not write into it (airlineCopy).
func airlineBuffer(t *testing.T, sample bool) string {
	t.Helper()
	if _, err := os.Stat(tauAirline); err != nil {
		t.Skipf("tau-bench data not available (%v): see shared/data/README.md", err)
	}
	airline.once.Do(func() { airline.err = importAirline() })
	if airline.err != nil {
		t.Fatalf("importing %s: %v", tauAirline, airline.err)
	}
	if sample {
		return "file://" + filepath.ToSlash(airline.sample)
	}
	return "file://" + filepath.ToSlash(airline.full)
}

// importedAirline is the real tau-bench file imported: all 200 runs of its 50 tasks
// (3054 events), shared read-only.
func importedAirline(t *testing.T) string { return airlineBuffer(t, false) }

// airlineSample is the 20 runs of the first 5 tasks of importedAirline, their lines
// as imported (runs a second apart, a task's four trials 50 s apart), shared
// read-only: for a test about what a command does with a buffer rather than about
// the real numbers.
func airlineSample(t *testing.T) string { return airlineBuffer(t, true) }

// airlineCopy is a private copy of importedAirline, for a test that writes into it.
func airlineCopy(t *testing.T) string {
	t.Helper()
	importedAirline(t)
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(airline.full, airline.seg))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, airline.seg), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return "file://" + filepath.ToSlash(dir)
}

// removeAirline removes the shared buffers after the package's tests.
func removeAirline() {
	if airline.root != "" {
		os.RemoveAll(airline.root)
	}
}

// TestReplayAirline runs the commands that read the real data on the shared import,
// and the re-import, which adds duplicates, on a copy.
func TestReplayAirline(t *testing.T) {
	t.Parallel() // reads only: the shared import, and its own copy
	uri := importedAirline(t)
	t.Run("stats", func(t *testing.T) { checkStats(t, uri) })
	t.Run("export", func(t *testing.T) { checkExport(t, uri) })
	t.Run("reimport", func(t *testing.T) { checkReimport(t, airlineCopy(t)) })
}

type statsJSON struct {
	Episodes, Tasks, Rewarded, Duplicates int
	MeanReward                            float64                        `json:"mean_reward"`
	RunsPerTask                           struct{ Min, Median, Max int } `json:"runs_per_task"`
	Arms                                  []struct {
		Arm        string
		Episodes   int
		MeanReward float64 `json:"mean_reward"`
	}
}

func checkStats(t *testing.T, uri string) {
	out, errOut, code := runCLI(t, "replay", "stats", "--from", uri)
	if code != 0 {
		t.Fatalf("stats exit %d: %s", code, errOut)
	}
	for _, frag := range []string{"episodes       200", "tasks          50", "rewarded       200 (100.0%)", "mean reward    0.420", "imported  200"} {
		if !strings.Contains(out, frag) {
			t.Errorf("stats text lacks %q:\n%s", frag, out)
		}
	}

	out, errOut, code = runCLI(t, "replay", "stats", "--format", "json", "--from", uri)
	if code != 0 {
		t.Fatalf("stats json exit %d: %s", code, errOut)
	}
	var s struct {
		Episodes, Tasks, Rewarded, Duplicates int
		MeanReward                            float64                        `json:"mean_reward"`
		RunsPerTask                           struct{ Min, Median, Max int } `json:"runs_per_task"`
		Arms                                  []struct {
			Arm        string
			Episodes   int
			MeanReward float64 `json:"mean_reward"`
		}
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("stats json: %v\n%s", err, out)
	}
	if s.Episodes != 200 || s.Tasks != 50 || s.Rewarded != 200 || s.MeanReward != 0.42 || s.RunsPerTask.Min != 4 || s.RunsPerTask.Max != 4 ||
		len(s.Arms) != 1 || s.Arms[0].Arm != "imported" || s.Arms[0].MeanReward != 0.42 {
		t.Errorf("stats json %+v", s)
	}
}

func checkReimport(t *testing.T, uri string) {
	// A second import of the same file adds nothing a reader keeps.
	if _, errOut, code := runCLI(t, "replay", "import", "--to", uri, "--format=tau-bench", tauAirline); code != 0 {
		t.Fatalf("re-import exit %d: %s", code, errOut)
	}
	out, _, _ := runCLI(t, "replay", "stats", "--from", uri, "--format", "json")
	var s statsJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Episodes != 200 || s.Duplicates != 3054 {
		t.Errorf("after re-import: %v %+v", err, s)
	}
}

func checkExport(t *testing.T, uri string) {
	dir := t.TempDir()

	jsonl := filepath.Join(dir, "episodes.jsonl")
	out, errOut, code := runCLI(t, "replay", "export", "--from", uri, "--out", jsonl)
	if code != 0 || !strings.Contains(out, "exported 200 episodes to "+jsonl) {
		t.Fatalf("export jsonl exit %d: %s%s", code, out, errOut)
	}
	f, err := os.Open(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	lines := 0
	for sc.Scan() {
		var row struct {
			EpisodeID string            `json:"episode_id"`
			Messages  []json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil || row.EpisodeID == "" || len(row.Messages) == 0 {
			t.Fatalf("row %d: %v %+v", lines, err, row)
		}
		lines++
	}
	if lines != 200 {
		t.Errorf("%d JSONL rows, want 200", lines)
	}

	pq := filepath.Join(dir, "episodes.parquet")
	if out, errOut, code := runCLI(t, "replay", "export", "--from", uri, "--out", pq, "--format", "parquet"); code != 0 {
		t.Fatalf("export parquet exit %d: %s%s", code, out, errOut)
	}
	pf, err := os.Open(pq)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	st, _ := pf.Stat()
	file, err := parquet.OpenFile(pf, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	if file.NumRows() != 200 {
		t.Errorf("%d Parquet rows, want 200", file.NumRows())
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left behind: %v", leftovers)
	}
}

func TestReplayExportStdout(t *testing.T) {
	uri := "file://" + filepath.ToSlash(t.TempDir())
	if _, errOut, code := runCLI(t, "replay", "import", "--format", "jsonl", "--to", uri, "../../replay/lake/testdata/cli_events.jsonl"); code != 0 {
		t.Fatalf("import jsonl exit %d: %s", code, errOut)
	}
	out, errOut, code := runCLI(t, "replay", "export", "--from", uri, "--out", "-")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"episode_id":"ep-1"`) {
		t.Fatalf("export to stdout exit %d:\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "exported 1 episodes to stdout") {
		t.Errorf("summary not on stderr: %q", errOut)
	}
}

func TestReplayImportJSONLSummary(t *testing.T) {
	uri := "file://" + filepath.ToSlash(t.TempDir())
	out, errOut, code := runCLI(t, "replay", "import", "../../replay/lake/testdata/cli_events.jsonl", "--format", "jsonl", "--to", uri)
	if code != 0 || !strings.Contains(out, "imported 3 events into "+uri) {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
}

func TestReplayExitCodes(t *testing.T) {
	tmp := "file://" + filepath.ToSlash(t.TempDir())
	small := "../../replay/lake/testdata/cli_tau_small.json"
	junk := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(junk, []byte("episode_id,task_id\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // in stderr
	}{
		{"no subcommand", []string{"replay"}, 2, "replay: want a command: export, import, stats"},
		{"unknown subcommand", []string{"replay", "compact"}, 2, `unknown command "compact"`},
		{"a near miss", []string{"replay", "stat"}, 2, `did you mean "stats"?`},
		{"bad URI", []string{"replay", "import", "--format", "tau-bench", small, "--to", "ftp://x"}, 2, "ftp://x"},
		{"bad --from URI", []string{"replay", "stats", "--from", "ftp://x"}, 2, "ftp://x"},
		{"missing FILE", []string{"replay", "import", "--format", "tau-bench", "nope/missing.json", "--to", tmp}, 2, "nope/missing.json"},
		{"no FILE", []string{"replay", "import", "--format", "jsonl", "--to", tmp}, 2, "FILE"},
		{"two FILEs", []string{"replay", "import", "--format", "jsonl", small, small, "--to", tmp}, 2, "exactly one FILE"},
		{"FILE is a directory", []string{"replay", "import", "--format", "jsonl", ".", "--to", tmp}, 2, ". holds no .parquet file"},
		{"undetectable format", []string{"replay", "import", junk, "--to", tmp}, 2, "name it with --format tau-bench|jsonl|parquet"},
		{"--arm with detected jsonl", []string{"replay", "import", "--arm", "x", "../../replay/lake/testdata/cli_events.jsonl", "--to", tmp}, 2, "tau-bench only"},
		{"unknown import --format", []string{"replay", "import", "--format", "csv", small, "--to", tmp}, 2, `"csv"`},
		{"unknown export --format", []string{"replay", "export", "--from", tmp, "--out", "x", "--format", "csv"}, 2, `"csv"`},
		{"unknown stats --format", []string{"replay", "stats", "--from", tmp, "--format", "html"}, 2, `"html"`},
		{"unknown flag", []string{"replay", "stats", "--from", tmp, "--verbose"}, 2, "verbose"},
		{"no --out", []string{"replay", "export", "--from", tmp}, 2, "--out is required"},
		{"--out in a missing dir", []string{"replay", "export", "--from", tmp, "--out", "nope/x.jsonl"}, 2, "nope does not exist"},
		{"FILE after --", []string{"replay", "import", "--format", "jsonl", "--to", tmp, "--", "-x.jsonl"}, 2, "open -x.jsonl"},
		{"--arm with jsonl", []string{"replay", "import", "--format", "jsonl", "--arm", "x", small, "--to", tmp}, 2, "tau-bench only"},
		{"bad JSONL line", []string{"replay", "import", "--format", "jsonl", "../../replay/lake/testdata/cli_events_bad.jsonl", "--to", tmp}, 2, "line 3"},
		{"jsonl as tau-bench", []string{"replay", "import", "--format", "tau-bench", "../../replay/lake/testdata/cli_events.jsonl", "--to", tmp}, 2, "not valid tau-bench input"},
		{"missing --from dir", []string{"replay", "stats", "--from", tmp + "/nope"}, 2, "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := runCLI(t, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, want %d; stderr %q lacks %q", code, tc.code, errOut, tc.want)
			}
		})
	}
}

// TestReplayImportSinkFailure points --to at a directory that cannot be created: a
// well-formed URI whose sink fails is a run-time failure (exit 1), not bad usage.
func TestReplayImportSinkFailure(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCLI(t, "replay", "import", "--format", "tau-bench", "../../replay/lake/testdata/cli_tau_small.json",
		"--to", "file://"+filepath.ToSlash(blocker)+"/replay")
	if code != 1 || !strings.Contains(errOut, "--to") {
		t.Errorf("exit %d, want 1; stderr %q", code, errOut)
	}
}

// TestReplayImportExport: what `replay export` writes, `replay import` reads back
// (the format detected, or --format jsonl as before), and exporting that gives the
// same file.
func TestReplayImportExport(t *testing.T) {
	src := "file://" + filepath.ToSlash(t.TempDir())
	if _, errOut, code := runCLI(t, "replay", "import", "--to", src, "../../replay/lake/testdata/cli_events.jsonl"); code != 0 {
		t.Fatalf("import events exit %d: %s", code, errOut)
	}
	for _, tc := range []struct{ ext, format string }{{"jsonl", "jsonl"}, {"jsonl", ""}, {"parquet", ""}} {
		t.Run(tc.ext+"/"+tc.format, func(t *testing.T) {
			dir := t.TempDir()
			first, second := filepath.Join(dir, "first."+tc.ext), filepath.Join(dir, "second."+tc.ext)
			dst := "file://" + filepath.ToSlash(filepath.Join(dir, "buffer"))
			if _, errOut, code := runCLI(t, "replay", "export", "--from", src, "--out", first); code != 0 {
				t.Fatalf("export exit %d: %s", code, errOut)
			}
			args := []string{"replay", "import", first, "--to", dst}
			if tc.format != "" {
				args = append(args, "--format", tc.format)
			}
			if out, errOut, code := runCLI(t, args...); code != 0 || !strings.Contains(out, "imported ") {
				t.Fatalf("import of the export exit %d: %s%s", code, out, errOut)
			}
			if _, errOut, code := runCLI(t, "replay", "export", "--from", dst, "--out", second); code != 0 {
				t.Fatalf("second export exit %d: %s", code, errOut)
			}
			a, _ := os.ReadFile(first)
			b, _ := os.ReadFile(second)
			if len(a) == 0 || !bytes.Equal(a, b) {
				t.Errorf("export → import → export differs:\n%s\n---\n%s", a, b)
			}
		})
	}
}
