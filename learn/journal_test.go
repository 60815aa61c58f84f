package learn

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/trainer"
)

func TestFileJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), JournalName)
	j, err := OpenJournal(path, "run-a")
	if err != nil {
		t.Fatal(err)
	}
	rep := &trainer.Reply{Text: "hi", Calls: []trainer.Call{{ID: "c1", Name: "tag_entry", Args: `{"entry_id":"x","tag":"helpful"}`}}, Usage: trainer.Usage{Input: 10, Output: 2}}
	if err := j.Record("it1/reflector/turn1", rep); err != nil {
		t.Fatal(err)
	}
	ok := true
	if err := j.RecordRollout("score/v1/T/0", RolloutResult{EpisodeID: "e", Reward: 0.5, Success: &ok}); err != nil {
		t.Fatal(err)
	}
	j.Close()

	// Reopened: everything is there.
	j, err = OpenJournal(path, "run-a")
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" || runtime.GOOS == "darwin" {
		if _, err := OpenJournal(path, "run-a"); err == nil || !strings.Contains(err.Error(), "in use by another run") {
			t.Fatalf("a second run on an open journal: %v", err)
		}
	}
	got, found := j.Lookup("it1/reflector/turn1")
	if !found || got.Text != "hi" || len(got.Calls) != 1 || got.Calls[0] != rep.Calls[0] || got.Usage != rep.Usage {
		t.Fatalf("lookup: %+v %v", got, found)
	}
	if r, found := j.LookupRollout("score/v1/T/0"); !found || r.Reward != 0.5 || r.Success == nil || !*r.Success || r.EpisodeID != "e" {
		t.Fatalf("rollout: %+v", r)
	}
	if _, found := j.Lookup("it1/reflector/turn2"); found {
		t.Fatal("a key never recorded was found")
	}
	j.Close()

	// A torn last line (a crash mid-write) is cut; the rest stays, and appends follow it.
	good, _ := os.ReadFile(path)
	os.WriteFile(path, append(append([]byte{}, good...), `{"key":"it1/mutator/turn1","reply":{"te`...), 0o644)
	j, err = OpenJournal(path, "run-a")
	if err != nil {
		t.Fatal(err)
	}
	if j.Torn() == 0 {
		t.Fatal("the torn line was not noticed")
	}
	if err := j.Record("it1/mutator/turn1", &trainer.Reply{Text: "again"}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), string(good)) || strings.Count(string(data), "\n") != 4 {
		t.Fatalf("after the cut:\n%s", data)
	}
	p, err := ParseJournal(data)
	if err != nil || p.Records != 4 || p.Replies["it1/mutator/turn1"].Text != "again" || p.Run != "run-a" {
		t.Fatalf("parsed %+v, %v", p, err)
	}

	// Another run's journal is refused.
	if _, err := OpenJournal(path, "run-b"); !errors.Is(err, ErrJournalMismatch) {
		t.Fatalf("another fingerprint: %v", err)
	}
}

func TestParseJournal(t *testing.T) {
	const header = `{"key":"run","run":"fp"}` + "\n"
	const reply = `{"key":"it1/reflector/turn1","reply":{"text":"a","usage":{"input":1,"output":1}}}` + "\n"
	for _, c := range []struct {
		name, data string
		records    int
		good       int // -1: all of it
		err        string
	}{
		{"empty", "", 0, 0, ""},
		{"header", header, 1, -1, ""},
		{"header and reply", header + reply, 2, -1, ""},
		{"torn last line", header + reply + `{"key":"it1/ref`, 2, len(header + reply), ""},
		{"bad last line", header + reply + "garbage\n", 2, len(header + reply), ""},
		{"blank lines", header + "\n" + reply + "\n", 2, -1, ""},
		{"bad middle line", header + "garbage\n" + reply, 0, 0, "journal line 2"},
		{"no header", reply + reply, 0, 0, "not the run header"},
		{"two headers", header + header + reply, 0, 0, "a second run header"},
		{"neither reply nor rollout", header + `{"key":"x"}` + "\n" + reply, 0, 0, `holds a "reply" or a "rollout"`},
		{"unknown field", header + `{"key":"x","reply":{},"extra":1}` + "\n" + reply, 0, 0, "unknown field"},
		{"duplicate key keeps the first", header + reply + strings.Replace(reply, `"a"`, `"b"`, 1), 3, -1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := ParseJournal([]byte(c.data))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			good := c.good
			if good < 0 {
				good = len(c.data)
			}
			if p.Records != c.records || p.Good != good {
				t.Fatalf("records %d good %d, want %d and %d", p.Records, p.Good, c.records, good)
			}
			if r := p.Replies["it1/reflector/turn1"]; c.records > 1 && (r == nil || r.Text != "a") {
				t.Fatalf("reply %+v", r)
			}
		})
	}
}

// FuzzParseJournal: whatever the bytes, no panic; what it accepts re-parses the same
// from its good prefix, which ends at a line boundary.
func FuzzParseJournal(f *testing.F) {
	f.Add([]byte(`{"key":"run","run":"fp"}` + "\n" + `{"key":"it1/mutator/turn2","reply":{"calls":[{"id":"c","name":"finish","args":"{}"}],"usage":{"input":3,"output":4}}}` + "\n"))
	f.Add([]byte(`{"key":"run","run":"fp"}` + "\n" + `{"key":"score/v2/T/0","rollout":{"reward":0.5,"success":true}}` + "\n{\"key\""))
	f.Add([]byte("\n\n{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseJournal(data)
		if err != nil {
			return
		}
		if p.Good > len(data) || (p.Good > 0 && data[p.Good-1] != '\n') {
			t.Fatalf("good prefix %d of %d does not end a line", p.Good, len(data))
		}
		q, err := ParseJournal(data[:p.Good])
		if err != nil || q.Records != p.Records || q.Good != p.Good || len(q.Replies) != len(p.Replies) || len(q.Rollouts) != len(p.Rollouts) || q.Run != p.Run {
			t.Fatalf("the good prefix parses differently: %+v vs %+v (%v)", q, p, err)
		}
	})
}
