package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// reportFixture is the report package's hand-computed fixture as replay events
// (kept equal to the fixture by report.TestFixtureFile), and its golden outputs.
const (
	reportFixture     = "../../report/testdata/episodes.jsonl"
	reportGoldenText  = "../../report/testdata/report.txt"
	reportGoldenJSON  = "../../report/testdata/report.json"
	reportGoldenSrc   = "file:///fixture"
	reportFixtureSize = 127
)

// importedFixture imports the fixture through the CLI into a fresh file:// buffer.
func importedFixture(t *testing.T) string {
	t.Helper()
	uri := "file://" + filepath.ToSlash(t.TempDir())
	if _, errOut, code := runCLI(t, "replay", "import", "--format", "jsonl", reportFixture, "--to", uri); code != 0 {
		t.Fatalf("import exit %d: %s", code, errOut)
	}
	return uri
}

// goldenFor reads a golden output of the report package with its source replaced
// by uri.
func goldenFor(t *testing.T, path, uri string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Replace(string(b), reportGoldenSrc, uri, 1)
}

func TestReport(t *testing.T) {
	uri := importedFixture(t)

	t.Run("text", func(t *testing.T) {
		out, errOut, code := runCLI(t, "report", "--from", uri)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if want := goldenFor(t, reportGoldenText, uri); out != want {
			t.Errorf("text report differs from report/testdata/report.txt:\n%s", out)
		}
	})

	t.Run("json", func(t *testing.T) {
		out, errOut, code := runCLI(t, "report", "--format", "json", "--from", uri)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if want := goldenFor(t, reportGoldenJSON, uri); out != want {
			t.Errorf("json report differs from report/testdata/report.json:\n%s", out)
		}
	})

	t.Run("html to --out", func(t *testing.T) {
		page := filepath.Join(t.TempDir(), "report.html")
		out, errOut, code := runCLI(t, "report", "--from", uri, "--out", page) // format from the extension
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if want := "wrote the html report to " + page + "\n"; out != want {
			t.Errorf("stdout %q, want %q", out, want)
		}
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if !strings.HasPrefix(s, "<!doctype html>") || strings.Count(s, "<svg ") != 2 || !strings.Contains(s, "cam beats baseline by +30.0 points") {
			t.Errorf("page:\n%.600s", s)
		}
		if st, _ := os.Stat(page); st.Mode().Perm() != 0o644 {
			t.Errorf("page mode %v", st.Mode())
		}
	})

	t.Run("html to stdout", func(t *testing.T) {
		out, _, code := runCLI(t, "report", "--from", uri, "--format", "html", "--out", "-")
		if code != 0 || !strings.HasPrefix(out, "<!doctype html>") || !strings.HasSuffix(out, "</html>\n") {
			t.Errorf("exit %d:\n%.300s", code, out)
		}
	})

	t.Run("json to --out", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "r.json")
		if _, errOut, code := runCLI(t, "report", "--from", uri, "--out", file); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var r struct {
			Episodes int    `json:"episodes"`
			Control  string `json:"control"`
		}
		b, _ := os.ReadFile(file)
		if err := json.Unmarshal(b, &r); err != nil || r.Episodes != reportFixtureSize || r.Control != "baseline" {
			t.Errorf("%v %+v", err, r)
		}
	})

	t.Run("control", func(t *testing.T) {
		out, errOut, code := runCLI(t, "report", "--from", uri, "--control", "cam")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if !strings.Contains(out, "baseline trails cam by \u221230.0 points, p = 0.0066") || !strings.Contains(out, "control arm cam") {
			t.Errorf("control cam:\n%s", out)
		}
	})

	t.Run("experiment", func(t *testing.T) {
		// The fixture's episodes record no experiment: all are kept, and the report says so.
		out, errOut, code := runCLI(t, "report", "--from", uri, "--experiment", "exp1")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if !strings.Contains(out, "experiment exp1, 127 episodes") || !strings.Contains(out, `note: 127 episodes record no experiment and are counted under "exp1"`) {
			t.Errorf("experiment:\n%s", out)
		}
	})

	t.Run("unknown control", func(t *testing.T) {
		_, errOut, code := runCLI(t, "report", "--from", uri, "--control", "nope")
		if code != 2 || !strings.Contains(errOut, `no arm "nope" in the buffer (arms: "baseline", "cam", "playbook", "rag")`) {
			t.Errorf("exit %d: %s", code, errOut)
		}
	})
}

func TestReportExitCodes(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"bad uri", []string{"report", "--from", "ftp://x/y"}, 2, `bad replay URI ftp://x/y: unknown scheme "ftp"`},
		{"missing dir", []string{"report", "--from", "file://" + filepath.Join(dir, "nope")}, 2, "no replay buffer there: record some traffic"},
		{"not a dir", []string{"report", "--from", "file://" + notDir}, 2, "camproxy: report: --from file://" + notDir},
		{"empty buffer", []string{"report", "--from", "file://" + empty}, 1, "no episodes to report on in file://" + empty},
		{"bad format", []string{"report", "--from", "file://" + empty, "--format", "pdf"}, 2, `--format "pdf": want text, json or html`},
		{"out dir missing", []string{"report", "--from", "file://" + empty, "--out", filepath.Join(dir, "no", "r.html")}, 2, "does not exist"},
		{"positional", []string{"report", "extra"}, 2, `unexpected argument "extra"`},
		{"bad flag", []string{"report", "--frm", "x"}, 2, "unknown flag --frm; did you mean --from?"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, c.args...)
			if code != c.code || !strings.Contains(errOut, c.msg) {
				t.Errorf("exit %d, want %d; stderr %q lacks %q", code, c.code, errOut, c.msg)
			}
			if code != 0 {
				if out != "" {
					t.Errorf("stdout %q on failure", out)
				}
				// One clear line: the error is the last line, alone (flag errors add usage).
				lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
				if last := lines[len(lines)-1]; !strings.HasPrefix(last, "camproxy: ") {
					t.Errorf("last stderr line %q", last)
				}
			}
		})
	}
}

// The report package's gateway fixture: three experiments whose arms share names.
const (
	reportExperimentsFixture = "../../report/testdata/episodes-experiments.jsonl"
	reportExperimentsText    = "../../report/testdata/report-experiments.txt"
	reportExperimentsSrc     = "file:///gateway"
)

// TestReportExperiments: a buffer of several experiments reports each apart (the
// golden file: never a baseline row averaging two experiments' rewards);
// --experiment reports one; replay stats keeps a row per arm of each experiment and
// selects one; an export partitions by the experiment the events record.
func TestReportExperiments(t *testing.T) {
	uri := "file://" + filepath.ToSlash(t.TempDir())
	if _, errOut, code := runCLI(t, "replay", "import", "--format", "jsonl", reportExperimentsFixture, "--to", uri); code != 0 {
		t.Fatalf("import exit %d: %s", code, errOut)
	}

	out, errOut, code := runCLI(t, "report", "--from", uri)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	b, err := os.ReadFile(reportExperimentsText)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.ReplaceAll(string(b), reportExperimentsSrc, uri); out != want {
		t.Errorf("report differs from report/testdata/report-experiments.txt:\n%s", out)
	}

	out, errOut, code = runCLI(t, "report", "--from", uri, "--experiment", "support", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var one struct {
		Experiment string `json:"experiment"`
		Episodes   int    `json:"episodes"`
		Unlabelled int    `json:"experiment_unlabelled"`
		Arms       []struct {
			Arm        string  `json:"arm"`
			MeanReward float64 `json:"mean_reward"`
		} `json:"arms"`
	}
	if err := json.Unmarshal([]byte(out), &one); err != nil || one.Experiment != "support" || one.Episodes != 14 || one.Unlabelled != 2 ||
		len(one.Arms) != 2 || one.Arms[0].Arm != "baseline" || one.Arms[0].MeanReward != 0.333333 {
		t.Fatalf("--experiment support: %v %+v", err, one)
	}

	out, errOut, code = runCLI(t, "report", "--from", uri, "--format", "json")
	var all struct {
		Experiments []struct {
			Experiment string `json:"experiment"`
		} `json:"experiments"`
	}
	if err := json.Unmarshal([]byte(out), &all); code != 0 || err != nil || len(all.Experiments) != 4 || all.Experiments[0].Experiment != "coding" {
		t.Fatalf("json of several experiments: exit %d %v %s", code, err, errOut)
	}

	out, errOut, code = runCLI(t, "replay", "stats", "--from", uri)
	if code != 0 {
		t.Fatalf("stats exit %d: %s", code, errOut)
	}
	for _, frag := range []string{"experiments    coding, research, support", "coding      baseline  6         6         0.833",
		"support     baseline  6         6         0.333", "(none)      cam       2         2         0.500"} {
		if !strings.Contains(out, frag) {
			t.Errorf("stats lack %q:\n%s", frag, out)
		}
	}
	out, errOut, code = runCLI(t, "replay", "stats", "--from", uri, "--experiment", "coding", "--format", "json")
	var st struct {
		Episodes int `json:"episodes"`
		Arms     []struct {
			Experiment string `json:"experiment"`
		} `json:"arms"`
	}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Episodes != 14 || len(st.Arms) != 2 || st.Arms[0].Experiment != "coding" {
		t.Fatalf("stats --experiment coding: exit %d %v %+v %s", code, err, st, errOut)
	}

	dir := t.TempDir()
	if _, errOut, code := runCLI(t, "replay", "export", "--from", uri, "--out", dir, "--partition-by", "experiment"); code != 0 {
		t.Fatalf("export exit %d: %s", code, errOut)
	}
	for _, part := range []string{"experiment=coding", "experiment=research", "experiment=support", "experiment=__HIVE_DEFAULT_PARTITION__"} {
		if _, err := os.Stat(filepath.Join(dir, part)); err != nil {
			t.Errorf("export: %v", err)
		}
	}
}
