package lake

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/replay"
)

// experimentBuffer is the four episodes of three experiments that replay's reader
// tests read: the experiment on the episode event (and its steps), on the reward
// event only (its episode event written before events carried it), in the harness's
// metadata only, and nowhere. The reward of "sup" names another experiment in its
// metadata, and is written before its episode event.
func experimentBuffer(t *testing.T) *replay.Buffer {
	t.Helper()
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	episode := func(id, exp string) any {
		return &replay.EpisodeEvent{V: replay.Version, Type: replay.TypeEpisode, ID: replay.NewEventID(), EpisodeID: id,
			TaskID: "t-" + id, Task: id, Arm: "cam", Experiment: exp, StartedAt: at}
	}
	step := func(id, exp string) any {
		return &replay.StepEvent{V: replay.Version, Type: replay.TypeStep, ID: replay.NewEventID(), EpisodeID: id, Experiment: exp,
			Messages: []protocol.Message{{Role: "user", Content: "go"}}, Status: 200, At: at.Add(time.Second)}
	}
	reward := func(id string, r float64, exp, meta string) any {
		ev := &replay.RewardEvent{V: replay.Version, Type: replay.TypeReward, ID: replay.NewEventID(), EpisodeID: id, Experiment: exp,
			Reward: r, At: at.Add(time.Minute)}
		if meta != "" {
			ev.Metadata = json.RawMessage(meta)
		}
		return ev
	}
	var lines [][]byte
	for _, ev := range []any{
		reward("sup", 1, "", `{"experiment":"coding"}`), episode("sup", "support"), step("sup", "support"),
		episode("res", ""), step("res", ""), reward("res", 0.5, "research", ""),
		episode("cod", ""), reward("cod", 0, "", `{"experiment":"coding"}`),
		episode("old", ""), reward("old", 1, "", ""),
	} {
		line, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line)
	}
	dir := t.TempDir()
	importLines(t, dir, lines)
	return readDir(t, dir)
}

// TestExportPartitionByExperimentEvent: --partition-by experiment reads the
// experiment from the events (not only from a harness's metadata), by the rule.
func TestExportPartitionByExperimentEvent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	b := experimentBuffer(t)
	m, err := ExportParquetPartitioned(t.Context(), NewDirDest(dir), bufferEpisodes(b), PartitionOptions{PartitionBy: []string{"experiment"}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range m.Files {
		rows, _, _ := readPartFile(t, filepath.Join(dir, filepath.FromSlash(f.Path)))
		for _, r := range rows {
			got[r.EpisodeID] = strings.SplitN(f.Path, "/", 2)[0]
		}
	}
	want := map[string]string{"sup": "experiment=support", "res": "experiment=research", "cod": "experiment=coding",
		"old": "experiment=" + hiveNull}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("partitions %v\nwant %v", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "experiment=support")); err != nil {
		t.Fatal(err)
	}
}

// TestExportRowsCarryExperiment: an exported row names its episode's experiment by
// the rule (ExperimentOf: the events', else the harness's metadata), in JSON Lines and
// in Parquet, and an import of either gives it back: two experiments may name their
// arms alike, and an export that dropped the experiment merged them on re-import.
func TestExportRowsCarryExperiment(t *testing.T) {
	want := map[string]string{"sup": "support", "res": "research", "cod": "coding", "old": ""}
	b := experimentBuffer(t)

	var jl bytes.Buffer
	if err := ExportJSONL(&jl, b); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(jl.String()), "\n") {
		var r struct {
			EpisodeID  string  `json:"episode_id"`
			Experiment *string `json:"experiment"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		if r.Experiment == nil {
			t.Fatalf("row without an experiment key: %s", line)
		}
		got[r.EpisodeID] = *r.Experiment
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("JSON Lines experiments %v, want %v", got, want)
	}

	var pq bytes.Buffer
	if err := ExportParquet(&pq, b); err != nil {
		t.Fatal(err)
	}
	type expRow struct {
		EpisodeID  string `parquet:"episode_id"`
		Experiment string `parquet:"experiment"`
	}
	rows, err := parquet.Read[expRow](bytes.NewReader(pq.Bytes()), int64(pq.Len()))
	if err != nil {
		t.Fatal(err)
	}
	clear(got)
	for _, r := range rows {
		got[r.EpisodeID] = r.Experiment
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parquet experiments %v, want %v", got, want)
	}

	// Imported back, each episode is in its experiment, and exports the same line.
	for name, imp := range map[string]func(emit func([]byte) error) error{
		"jsonl": func(emit func([]byte) error) error {
			_, err := ImportJSONL(bytes.NewReader(jl.Bytes()), emit)
			return err
		},
		"parquet": func(emit func([]byte) error) error {
			_, _, err := ImportParquetPart("export.parquet", bytes.NewReader(pq.Bytes()), int64(pq.Len()), emit)
			return err
		},
	} {
		dir := t.TempDir()
		importInto(t, dir, imp)
		back := readDir(t, dir)
		for id, exp := range want {
			ep := episodeOf(back, id)
			if ep == nil || replay.ExperimentOf(ep) != exp {
				t.Fatalf("%s import: episode %s in experiment %q, want %q", name, id, experimentOf(ep), exp)
			}
		}
		var again bytes.Buffer
		if err := ExportJSONL(&again, back); err != nil {
			t.Fatal(err)
		}
		if name == "jsonl" && again.String() != jl.String() {
			t.Errorf("export → import → export changed the file:\n%s\nwant\n%s", again.String(), jl.String())
		}
	}
}

func experimentOf(ep *replay.Episode) string {
	if ep == nil {
		return "(no episode)"
	}
	return replay.ExperimentOf(ep)
}

// TestImportParquetBeforeExperimentColumn: a Parquet export written before rows had
// an experiment column still imports (the experiment read as none), and a part file
// of an export partitioned by experiment takes it from its path.
func TestImportParquetBeforeExperimentColumn(t *testing.T) {
	old := []readBackRow{{EpisodeID: "e1", TaskID: "t1", Task: "Cancel ABC123.", Arm: "cam", Turns: 0,
		StartedAt: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}}
	var buf bytes.Buffer
	if err := parquet.Write(&buf, old); err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Schema().Lookup("experiment"); ok {
		t.Fatal("the old-shape file has an experiment column")
	}
	for path, want := range map[string]string{
		"export.parquet": "",
		"out/experiment=support/part-00000.parquet":    "support",
		"out/experiment=" + hiveNull + "/part.parquet": "",
	} {
		dir := t.TempDir()
		importInto(t, dir, func(emit func([]byte) error) error {
			_, _, err := ImportParquetPart(path, bytes.NewReader(buf.Bytes()), int64(buf.Len()), emit)
			return err
		})
		ep := episodeOf(readDir(t, dir), "e1")
		if ep == nil || ep.Arm != "cam" || ep.TaskID != "t1" {
			t.Fatalf("%s: imported %+v", path, ep)
		}
		if got := replay.ExperimentOf(ep); got != want {
			t.Errorf("%s: experiment %q, want %q", path, got, want)
		}
	}
}
