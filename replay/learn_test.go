package replay

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestLearnEventRoundTrip: a learn event has no episode_id and still decodes; the
// reader keeps learn events in time order, drops repeats, and they make no episode.
func TestLearnEventRoundTrip(t *testing.T) {
	mean := 0.75
	p := 0.97
	promoted := &LearnEvent{V: Version, Type: TypeLearn, ID: NewEventID(), Experiment: "exp", Action: LearnPromoted, Version: 3,
		Arm: "learn-v3", Parent: 2, Champion: "learn-v3", ChampionVersion: 3, Iteration: 2, Entries: 5, Applied: 2,
		Reason: "beats the champion", PBetter: &p, Stats: map[string]LearnArmStats{"learn-v3": {N: 20, Mean: &mean}, "baseline": {N: 30}},
		At: readerAt(50)}
	version := &LearnEvent{V: Version, Type: TypeLearn, ID: NewEventID(), Action: LearnVersion, Version: 3, Arm: "learn-v3",
		Parent: 2, Champion: "baseline", ChampionVersion: 1, Iteration: 2, Entries: 5, Applied: 2, At: readerAt(10)}
	line, err := json.Marshal(promoted)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(line), "episode_id") {
		t.Fatalf("a learn event carries an episode_id: %s", line)
	}
	ev, err := Decode(line)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if !reflect.DeepEqual(ev, promoted) {
		t.Fatalf("decoded %+v, want %+v", ev, promoted)
	}
	// Other types still need their episode.
	if _, err := Decode([]byte(`{"v":1,"type":"reward","id":"x","reward":1}`)); err == nil {
		t.Fatal("a reward without episode_id decoded")
	}

	src := readerEncode(t, promoted, readerEpisode("e1", "book", 0), version, promoted, readerReward("e1", 1, 3, nil, ""),
		[]byte(`{"v":1,"type":"learn","id":"bad","version":"three"}`))
	b, err := Read(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Learn) != 2 || b.Learn[0].Action != LearnVersion || b.Learn[1].Action != LearnPromoted {
		t.Fatalf("learn events %+v, want version then promoted", b.Learn)
	}
	if b.Duplicates != 1 || b.Skipped != 1 || len(b.Episodes) != 1 || b.Orphans != 0 {
		t.Fatalf("duplicates %d skipped %d episodes %d orphans %d", b.Duplicates, b.Skipped, len(b.Episodes), b.Orphans)
	}
}
