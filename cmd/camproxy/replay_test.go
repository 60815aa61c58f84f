package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

const tauAirline = "../../../shared/data/tau-bench/gpt-4o-airline.json"

// runCLI runs camproxy with args and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, &stdout, &stderr, func(string) (string, bool) { return "", false })
	code := exitCode(err, &stderr)
	return stdout.String(), stderr.String(), code
}

// importedAirline imports the real tau-bench file into a fresh directory and
// returns its file:// URI.
func importedAirline(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(tauAirline); err != nil {
		t.Skipf("tau-bench data not available (%v): see shared/data/README.md", err)
	}
	uri := "file://" + filepath.ToSlash(t.TempDir())
	// Flags after the positional FILE, as users type them.
	out, errOut, code := runCLI(t, "replay", "import", "--format", "tau-bench", tauAirline, "--to", uri)
	if code != 0 {
		t.Fatalf("import exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "imported 200 episodes (3054 events) into "+uri) {
		t.Fatalf("import summary %q", out)
	}
	return uri
}

// TestReplayAirline imports the real data once (slow under -race) and runs the
// commands that read it; the re-import goes last because it adds duplicates.
func TestReplayAirline(t *testing.T) {
	uri := importedAirline(t)
	t.Run("stats", func(t *testing.T) { checkStats(t, uri) })
	t.Run("export", func(t *testing.T) { checkExport(t, uri) })
	t.Run("reimport", func(t *testing.T) { checkReimport(t, uri) })
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
	if _, errOut, code := runCLI(t, "replay", "import", "--format", "jsonl", "--to", uri, "../../replay/testdata/cli_events.jsonl"); code != 0 {
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
	out, errOut, code := runCLI(t, "replay", "import", "../../replay/testdata/cli_events.jsonl", "--format", "jsonl", "--to", uri)
	if code != 0 || !strings.Contains(out, "imported 3 events into "+uri) {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
}

func TestReplayExitCodes(t *testing.T) {
	tmp := "file://" + filepath.ToSlash(t.TempDir())
	small := "../../replay/testdata/cli_tau_small.json"
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
		{"--arm with detected jsonl", []string{"replay", "import", "--arm", "x", "../../replay/testdata/cli_events.jsonl", "--to", tmp}, 2, "tau-bench only"},
		{"unknown import --format", []string{"replay", "import", "--format", "csv", small, "--to", tmp}, 2, `"csv"`},
		{"unknown export --format", []string{"replay", "export", "--from", tmp, "--out", "x", "--format", "csv"}, 2, `"csv"`},
		{"unknown stats --format", []string{"replay", "stats", "--from", tmp, "--format", "html"}, 2, `"html"`},
		{"unknown flag", []string{"replay", "stats", "--from", tmp, "--verbose"}, 2, "verbose"},
		{"no --out", []string{"replay", "export", "--from", tmp}, 2, "--out is required"},
		{"--out in a missing dir", []string{"replay", "export", "--from", tmp, "--out", "nope/x.jsonl"}, 2, "nope does not exist"},
		{"FILE after --", []string{"replay", "import", "--format", "jsonl", "--to", tmp, "--", "-x.jsonl"}, 2, "open -x.jsonl"},
		{"--arm with jsonl", []string{"replay", "import", "--format", "jsonl", "--arm", "x", small, "--to", tmp}, 2, "tau-bench only"},
		{"bad JSONL line", []string{"replay", "import", "--format", "jsonl", "../../replay/testdata/cli_events_bad.jsonl", "--to", tmp}, 2, "line 3"},
		{"jsonl as tau-bench", []string{"replay", "import", "--format", "tau-bench", "../../replay/testdata/cli_events.jsonl", "--to", tmp}, 2, "not valid tau-bench input"},
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
	_, errOut, code := runCLI(t, "replay", "import", "--format", "tau-bench", "../../replay/testdata/cli_tau_small.json",
		"--to", "file://"+filepath.ToSlash(blocker)+"/replay")
	if code != 1 || !strings.Contains(errOut, "--to") {
		t.Errorf("exit %d, want 1; stderr %q", code, errOut)
	}
}

func TestBatchWriterSinkError(t *testing.T) {
	boom := errors.New("disk full")
	w := &batchWriter{ctx: context.Background(), sink: failingSink{boom}, progress: &bytes.Buffer{}}
	err := w.emit([]byte("{}"))
	if err == nil {
		err = w.flush()
	}
	if !errors.Is(err, boom) {
		t.Fatalf("flush error %v", err)
	}
	var ue *usageError
	if got := w.explain(importArgs{file: "f", format: "jsonl"}, err); errors.As(got, &ue) || !errors.Is(got, boom) {
		t.Errorf("a sink failure must be a run-time error (exit 1), got %v", got)
	}
}

type failingSink struct{ err error }

func (failingSink) Name() string                            { return "fail" }
func (s failingSink) Write(context.Context, [][]byte) error { return s.err }
func (failingSink) Close() error                            { return nil }

// TestReplayImportExport: what `replay export` writes, `replay import` reads back
// (the format detected, or --format jsonl as before), and exporting that gives the
// same file.
func TestReplayImportExport(t *testing.T) {
	src := "file://" + filepath.ToSlash(t.TempDir())
	if _, errOut, code := runCLI(t, "replay", "import", "--to", src, "../../replay/testdata/cli_events.jsonl"); code != 0 {
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
