package lake

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

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
