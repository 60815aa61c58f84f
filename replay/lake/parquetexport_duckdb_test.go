package lake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/report"
)

// duckOut is what clients/duckdb/read-partitioned.mjs prints.
type duckOut struct {
	Version string `json:"version"`
	Columns []struct {
		Name string `json:"column_name"`
		Type string `json:"column_type"`
	} `json:"columns"`
	Count      int              `json:"count"`
	Files      int              `json:"files"`
	Partitions []map[string]any `json:"partitions"`
	ByTaskArm  []duckGroup      `json:"byTaskArm"`
	ByArm      []duckGroup      `json:"byArm"`
	ToolCalls  []struct {
		Name string
		N    int
	} `json:"toolCalls"`
	Episode []struct {
		ID               string   `json:"episode_id"`
		Messages         int      `json:"messages"`
		Roles            []string `json:"roles"`
		FirstToolCallID  string   `json:"first_tool_call_id"`
		FirstToolContent string   `json:"first_tool_content"`
		StartedMs        int64    `json:"started_ms"`
	} `json:"episode"`
}

type duckGroup struct {
	TaskID      string   `json:"task_id"`
	Arm         string   `json:"arm"`
	Episodes    int      `json:"episodes"`
	Rewarded    int      `json:"rewarded"`
	MeanReward  *float64 `json:"mean_reward"`
	SuccessRate *float64 `json:"success_rate"`
}

// readWithDuckDB runs clients/duckdb/read-partitioned.mjs over an export directory.
func readWithDuckDB(t *testing.T, dir string, partitionBy ...string) duckOut {
	t.Helper()
	client, _ := filepath.Abs("../../clients/duckdb")
	if _, err := os.Stat(filepath.Join(client, "node_modules", "@duckdb", "node-api")); err != nil {
		if os.Getenv("CAMPROXY_REQUIRE_NODE") == "1" {
			t.Fatal("clients/duckdb/node_modules/@duckdb/node-api missing: run `npm ci` there (make test does)")
		}
		t.Skip("clients/duckdb/node_modules missing; `make test` runs npm ci there")
	}
	cmd := exec.Command("node", append([]string{filepath.Join(client, "read-partitioned.mjs"), dir}, partitionBy...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("duckdb: %v\n%s", err, stderr.Bytes())
	}
	var d duckOut
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("duckdb output: %v\n%.2000s", err, out)
	}
	return d
}

// tauBuffer is the 200 tau-bench runs as a buffer, spread over four arms (two with
// characters Hive escapes, one empty) and about six weeks.
func tauBuffer(t *testing.T) *replay.Buffer {
	t.Helper()
	lines := tauLines(t)
	dir := t.TempDir()
	sink, err := replay.NewFileSink(dir, replay.FileOptions{Writer: "import"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Write(t.Context(), lines); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := replay.Read(t.Context(), replay.NewFileSource(dir))
	if err != nil {
		t.Fatal(err)
	}
	arms := []string{"baseline", "playbook/v2", "rag=on 100%", ""}
	start := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	for i, ep := range b.Episodes {
		ep.Arm = arms[i%len(arms)]
		ep.StartedAt = start.Add(time.Duration(i) * 5 * time.Hour)
	}
	return b
}

// TestParquetPartitionedInDuckDB: the partitioned export of the tau-bench buffer,
// read by DuckDB as one table with the README's one-liner, has every episode, the
// partitions of the episodes, nested messages that queries reach into, and the
// mean reward and success rate the Go report computes, by arm and by task and arm.
func TestParquetPartitionedInDuckDB(t *testing.T) {
	t.Parallel() // its own directories and data: it overlaps the package's other heavy tests
	b := tauBuffer(t)
	dir := filepath.Join(t.TempDir(), "lake")
	m, err := ExportParquetPartitioned(t.Context(), NewDirDest(dir), bufferEpisodes(b),
		PartitionOptions{PartitionBy: []string{"dt", "arm"}, RowGroupRows: 3})
	if err != nil {
		t.Fatal(err)
	}
	d := readWithDuckDB(t, dir, "dt", "arm")
	t.Logf("DuckDB %s read %d rows from %d files (%d partitions)", d.Version, d.Count, d.Files, len(d.Partitions))
	if d.Count != len(b.Episodes) || d.Files != len(m.Files) {
		t.Fatalf("DuckDB read %d rows from %d files; exported %d episodes in %d files", d.Count, d.Files, len(b.Episodes), len(m.Files))
	}

	// Partitions: every (dt, arm) of the episodes, with its count, arm names unescaped.
	want := map[string]int{}
	for _, ep := range b.Episodes {
		want[ep.StartedAt.Format(time.DateOnly)+"|"+ep.Arm]++
	}
	got := map[string]int{}
	for _, p := range d.Partitions {
		arm, _ := p["arm"].(string) // the empty arm's __HIVE_DEFAULT_PARTITION__ reads back as null
		got[fmt.Sprint(p["dt"])+"|"+arm] = int(p["n"].(float64))
	}
	if !maps.Equal(got, want) {
		t.Errorf("partitions\n got %v\nwant %v", got, want)
	}

	// The table: the file columns plus dt and arm from the paths, arm once; messages
	// a list of structs with tool calls inside.
	types := map[string]string{}
	for _, c := range d.Columns {
		types[c.Name] = c.Type
	}
	for _, c := range []string{"episode_id", "task_id", "task", "experiment", "arm", "context", "messages", "turns", "reward", "success", "started_at", "dt"} {
		if types[c] == "" {
			t.Errorf("column %s missing: %v", c, types)
		}
	}
	if len(types) != 12 {
		t.Errorf("%d columns, want 12: %v", len(types), types)
	}
	if mt := types["messages"]; !strings.HasPrefix(mt, "STRUCT(") || !strings.HasSuffix(mt, "[]") ||
		!strings.Contains(mt, "tool_calls STRUCT(id VARCHAR, \"type\" VARCHAR, \"function\" STRUCT(\"name\" VARCHAR, arguments VARCHAR)") {
		t.Errorf("messages is %s", mt)
	}
	if types["reward"] != "DOUBLE" || types["success"] != "BOOLEAN" || !strings.HasPrefix(types["started_at"], "TIMESTAMP") {
		t.Errorf("reward %s, success %s, started_at %s", types["reward"], types["success"], types["started_at"])
	}

	// By arm: the report's numbers.
	rep, err := report.New(b, report.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkGroups(t, "by arm", d.ByArm, rep.Arms, func(g duckGroup) string { return g.Arm })
	// By task and arm: the report of each task's episodes.
	var wantTaskArm []duckGroup
	for _, task := range b.Tasks() {
		r, err := report.New(&replay.Buffer{Episodes: task.Episodes}, report.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range r.Arms {
			wantTaskArm = append(wantTaskArm, duckGroup{TaskID: task.ID, Arm: a.Name, Episodes: a.Episodes, Rewarded: a.Rewarded, MeanReward: a.MeanReward, SuccessRate: a.SuccessRate})
		}
	}
	if len(d.ByTaskArm) != len(wantTaskArm) {
		t.Fatalf("%d task×arm groups, the report has %d", len(d.ByTaskArm), len(wantTaskArm))
	}
	for _, w := range wantTaskArm {
		i := slices.IndexFunc(d.ByTaskArm, func(g duckGroup) bool { return g.TaskID == w.TaskID && g.Arm == w.Arm })
		if i < 0 {
			t.Errorf("no DuckDB group for task %s arm %s", w.TaskID, w.Arm)
			continue
		}
		checkGroup(t, "task "+w.TaskID+" arm "+w.Arm, d.ByTaskArm[i], w)
	}

	// Into the nested messages: tool calls by function name, and one episode's
	// trajectory.
	calls := map[string]int{}
	for _, ep := range b.Episodes {
		for _, msg := range ep.Messages {
			for _, tc := range msg.ToolCalls {
				calls[tc.Name]++
			}
		}
	}
	gotCalls := map[string]int{}
	for _, c := range d.ToolCalls {
		gotCalls[c.Name] = c.N
	}
	if len(calls) == 0 || !maps.Equal(gotCalls, calls) {
		t.Errorf("tool calls by name\n got %v\nwant %v", gotCalls, calls)
	}
	ids := make([]string, len(b.Episodes))
	for i, ep := range b.Episodes {
		ids[i] = ep.ID
	}
	slices.Sort(ids)
	first := episodeOf(b, ids[0])
	if len(d.Episode) != 1 {
		t.Fatalf("episode query: %+v", d.Episode)
	}
	e := d.Episode[0]
	var roles []string
	var toolID, toolContent string
	for _, msg := range first.Messages {
		roles = append(roles, msg.Role)
		if msg.Role == "tool" && toolID == "" {
			toolID, toolContent = msg.ToolCallID, msg.Content
		}
	}
	if e.ID != first.ID || e.Messages != len(first.Messages) || !slices.Equal(e.Roles, roles) ||
		e.FirstToolCallID != toolID || e.FirstToolContent != toolContent || toolID == "" {
		t.Errorf("episode %s from DuckDB: %+v\nwant %d messages %v, first tool answer %s %q", first.ID, e, len(first.Messages), roles, toolID, toolContent)
	}
	if e.StartedMs != first.StartedAt.UnixMilli() {
		t.Errorf("started_at %d ms, want %v", e.StartedMs, first.StartedAt)
	}
}

func checkGroups(t *testing.T, what string, got []duckGroup, arms []report.Arm, key func(duckGroup) string) {
	t.Helper()
	if len(got) != len(arms) {
		t.Fatalf("%s: %d groups, the report has %d arms", what, len(got), len(arms))
	}
	for _, a := range arms {
		i := slices.IndexFunc(got, func(g duckGroup) bool { return key(g) == a.Name })
		if i < 0 {
			t.Errorf("%s: no DuckDB group for arm %q", what, a.Name)
			continue
		}
		checkGroup(t, what+" "+a.Name, got[i], duckGroup{Episodes: a.Episodes, Rewarded: a.Rewarded, MeanReward: a.MeanReward, SuccessRate: a.SuccessRate})
	}
}

func checkGroup(t *testing.T, what string, got, want duckGroup) {
	t.Helper()
	if (want.Rewarded != 0 && got.Rewarded != want.Rewarded) || got.Episodes != want.Episodes ||
		!floatEq(got.MeanReward, want.MeanReward) || !floatEq(got.SuccessRate, want.SuccessRate) {
		t.Errorf("%s: DuckDB %s, report %s", what, groupString(got), groupString(want))
	}
}

func groupString(g duckGroup) string {
	f := func(p *float64) string {
		if p == nil {
			return "null"
		}
		return fmt.Sprintf("%.12g", *p)
	}
	return fmt.Sprintf("{episodes %d rewarded %d mean %s success %s}", g.Episodes, g.Rewarded, f(g.MeanReward), f(g.SuccessRate))
}

func floatEq(a, b *float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return math.Abs(*a-*b) < 1e-12
}
