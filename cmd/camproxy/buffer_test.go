package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/replay/lake"
)

// exportedRows is every episode of uri as replay export's JSON Lines rows.
func exportedRows(t *testing.T, uri string, flags ...string) []lake.Row {
	t.Helper()
	out := filepath.Join(t.TempDir(), "all.jsonl")
	if _, errOut, code := runCLI(t, append([]string{"replay", "export", "--from", uri, "--out", out}, flags...)...); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errOut)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []lake.Row
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var r lake.Row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	return rows
}

func statsEpisodes(t *testing.T, args ...string) int {
	t.Helper()
	out, errOut, code := runCLI(t, append([]string{"replay", "stats", "--format", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("stats %q: exit %d: %s", args, code, errOut)
	}
	var s replay.Stats
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("stats %q: %v\n%s", args, err, out)
	}
	return s.Episodes
}

// TestSelectionFlags: --since, --until, --arm, --task select on every reading
// command the same episodes a filter of the whole export finds. It reads the sample
// of the real data: each case is two reads, and the selections split 20 runs as
// they split 200.
func TestSelectionFlags(t *testing.T) {
	t.Parallel()
	uri := airlineSample(t)
	all := exportedRows(t, uri)
	if len(all) != 4*airlineSampleTasks {
		t.Fatalf("%d episodes in the sample, want %d", len(all), 4*airlineSampleTasks)
	}
	// Imported runs start a second apart from 2024-01-01T00:00:00Z, a task's trials
	// 50 s apart.
	cut := all[0].StartedAt
	for _, r := range all {
		if r.StartedAt.Before(cut) {
			cut = r.StartedAt
		}
	}
	cut = cut.Add(60 * time.Second)
	task := all[len(all)/2].TaskID
	count := func(keep func(lake.Row) bool) int {
		n := 0
		for _, r := range all {
			if keep(r) {
				n++
			}
		}
		return n
	}
	since := count(func(r lake.Row) bool { return !r.StartedAt.Before(cut) })
	ofTask := count(func(r lake.Row) bool { return r.TaskID == task })
	if since == 0 || since == len(all) || ofTask == 0 || ofTask == len(all) {
		t.Fatalf("the data does not split: %d since, %d of task %s, of %d", since, ofTask, task, len(all))
	}
	at := cut.Format(time.RFC3339)
	for _, tc := range []struct {
		flags []string
		want  int
	}{
		{nil, len(all)},
		{[]string{"--since", at}, since},
		{[]string{"--until", at}, len(all) - since},
		{[]string{"--since", "2024-01-01", "--until", "2024-01-02"}, len(all)},
		{[]string{"--task", task}, ofTask},
		{[]string{"--task", task + ",nope"}, ofTask},
		{[]string{"--arm", "imported"}, len(all)},
		{[]string{"--arm", "cam", "--arm", "baseline"}, 0},
		{[]string{"--task", task, "--since", at}, count(func(r lake.Row) bool { return r.TaskID == task && !r.StartedAt.Before(cut) })},
		{[]string{"--workers", "1", "--progress", "off"}, len(all)},
		{[]string{"--from", strings.TrimPrefix(uri, "file://")}, len(all)}, // a plain directory is file://
	} {
		if got := statsEpisodes(t, append([]string{"--from", uri}, tc.flags...)...); got != tc.want {
			t.Errorf("replay stats %q: %d episodes, want %d", tc.flags, got, tc.want)
		}
		if got := len(exportedRows(t, uri, tc.flags...)); got != tc.want {
			t.Errorf("replay export %q: %d rows, want %d", tc.flags, got, tc.want)
		}
	}
	// report selects the same way: its episode count is the table's n.
	out, errOut, code := runCLI(t, "report", "--from", uri, "--task", task, "--format", "json")
	if code != 0 || !strings.Contains(out, `"episodes": `+itoa(ofTask)) {
		t.Errorf("report --task %s: exit %d, want %d episodes:\n%s%s", task, code, ofTask, out, errOut)
	}
	// Bad selections are usage errors, all at once.
	_, errOut, code = runCLI(t, "replay", "stats", "--from", uri, "--since", "tomorrow", "--until", "2024-01-01", "--workers", "-1", "--spill-dir", "/nonexistent/spill")
	want := "camproxy: replay stats: 3 problems:\n  --since \"tomorrow\": want a time (2026-11-24, 2026-11-24T08, RFC 3339) or an age (90m, 36h, 7d)\n  --workers -1: want 0 (one per CPU) or more\n  --spill-dir /nonexistent/spill is not a directory\n"
	if code != 2 || errOut != want {
		t.Errorf("bad selection: exit %d:\n%s\nwant:\n%s", code, errOut, want)
	}
	_, errOut, code = runCLI(t, "report", "--from", uri, "--since", "2024-01-02", "--until", "2024-01-01")
	if code != 2 || !strings.Contains(errOut, "--since 2024-01-02T00:00:00Z is not before --until 2024-01-01T00:00:00Z") {
		t.Errorf("since after until: exit %d: %s", code, errOut)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestExportPartitioned: --partition-by writes Hive-partitioned Parquet that
// replay import reads back whole, refuses a destination that is not empty, and
// names every problem of its flags. The sample of the real data makes five task
// partitions.
func TestExportPartitioned(t *testing.T) {
	t.Parallel()
	uri := airlineSample(t)
	all := exportedRows(t, uri)
	dir := filepath.Join(t.TempDir(), "lake")
	out, errOut, code := runCLI(t, "replay", "export", "--from", uri, "--partition-by", "arm,task_id", "--out", dir)
	if code != 0 || !strings.Contains(out, "exported "+itoa(len(all))+" episodes to "+dir) {
		t.Fatalf("export: exit %d:\n%s%s", code, out, errOut)
	}
	tasks := map[string]bool{}
	for _, r := range all {
		tasks[r.TaskID] = true
	}
	parts, err := filepath.Glob(filepath.Join(dir, "arm=imported", "task_id=*", "*.parquet"))
	if err != nil || len(parts) < len(tasks) {
		t.Fatalf("%d part files under arm=imported/task_id=*, want one per task (%d): %v", len(parts), len(tasks), err)
	}
	// The directory reads back through replay import: every episode once, with the
	// arm and task id its partition directories name (the files do not repeat them).
	back := "file://" + filepath.Join(t.TempDir(), "back")
	if out, errOut, code := runCLI(t, "replay", "import", dir, "--to", back); code != 0 || !strings.Contains(out, "imported "+itoa(len(all))+" episodes") {
		t.Fatalf("import %s: exit %d: %s%s", dir, code, out, errOut)
	}
	if got := statsEpisodes(t, "--from", back, "--arm", "imported"); got != len(all) {
		t.Errorf("imported back %d episodes of arm imported, want %d", got, len(all))
	}
	if got := statsEpisodes(t, "--from", back, "--task", all[0].TaskID); got != statsEpisodes(t, "--from", uri, "--task", all[0].TaskID) {
		t.Errorf("imported back %d episodes of task %s, want as many as the buffer", got, all[0].TaskID)
	}
	// One part file alone takes its partition's values too.
	one := "file://" + filepath.Join(t.TempDir(), "one")
	if _, errOut, code := runCLI(t, "replay", "import", parts[0], "--to", one); code != 0 {
		t.Fatalf("import %s: exit %d: %s", parts[0], code, errOut)
	}
	if got := statsEpisodes(t, "--from", one, "--arm", "imported"); got == 0 || got != statsEpisodes(t, "--from", one) {
		t.Errorf("a part file imported %d episodes of arm imported, want all of its %d", got, statsEpisodes(t, "--from", one))
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--partition-by", "arm", "--out", dir}, "replay export: --out: export parquet to " + dir + ": export destination is not empty (export into a new directory or prefix)\n"},
		{[]string{"--partition-by", "colour", "--format", "jsonl", "--out", t.TempDir()}, "2 problems:\n  --format jsonl: a directory export is Parquet (write JSON Lines to a FILE)\n  --partition-by: "},
		{[]string{"--partition-by", "arm", "--out", filepath.Join(t.TempDir(), "no", "such", "dir")}, "does not exist"},
	} {
		_, errOut, code := runCLI(t, append([]string{"replay", "export", "--from", uri}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("export %q: exit %d: %s\nwant 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}
