package learn

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/camproxy/camproxy/augment"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/replay/lake"
	"github.com/camproxy/camproxy/trainer"
)

const tauAirline = "../../shared/data/tau-bench/gpt-4o-airline.json"

// lineSource is an in-memory replay source.
type lineSource [][]byte

func (s lineSource) Scan(_ context.Context, fn func([]byte) error) error {
	for _, l := range s {
		if err := fn(l); err != nil {
			return err
		}
	}
	return nil
}

var tau struct {
	once sync.Once
	buf  *replay.Buffer
	err  error
}

// tauBuffer is the 200 real tau-bench airline runs, imported as camproxy records them.
func tauBuffer(t *testing.T) *replay.Buffer {
	t.Helper()
	if _, err := os.Stat(tauAirline); err != nil {
		t.Skipf("tau-bench data not available (%v): see shared/data/README.md", err)
	}
	tau.once.Do(func() {
		f, err := os.Open(tauAirline)
		if err != nil {
			tau.err = err
			return
		}
		defer f.Close()
		var lines lineSource
		if _, tau.err = lake.ImportTauBench(f, lake.ImportOptions{Domain: "airline"}, func(l []byte) error {
			lines = append(lines, append([]byte(nil), l...))
			return nil
		}); tau.err != nil {
			return
		}
		tau.buf, tau.err = replay.Read(context.Background(), lines)
	})
	if tau.err != nil {
		t.Fatal(tau.err)
	}
	return tau.buf
}

// echoReflector answers every reflection at once with guidance that names the task.
type echoReflector struct{ calls atomic.Int64 }

func (m *echoReflector) Chat(_ context.Context, req *trainer.Request) (*trainer.Reply, error) {
	m.calls.Add(1)
	user := req.Messages[0].Text
	task := user
	if i := strings.Index(user, "# Task"); i >= 0 {
		task = user[i:]
	}
	first := strings.Fields(task)
	return &trainer.Reply{Text: "<guidance>Learned for: " + strings.Join(first[:min(12, len(first))], " ") + "</guidance>",
		Usage: trainer.Usage{Input: 100, Output: 10}}, nil
}

func mixedTaskIDs(b *replay.Buffer) map[string]bool {
	ok, fail := map[string]bool{}, map[string]bool{}
	for _, ep := range b.Episodes {
		if ep.Reward == nil {
			continue
		}
		if trainer.Succeeded(ep) {
			ok[ep.TaskID] = true
		} else {
			fail[ep.TaskID] = true
		}
	}
	mixed := map[string]bool{}
	for id := range ok {
		if fail[id] {
			mixed[id] = true
		}
	}
	return mixed
}

func readRecords(t *testing.T, path string) []trainer.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []trainer.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r trainer.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%v: %q", err, sc.Text())
		}
		out = append(out, r)
	}
	return out
}

// The mixed-outcome tasks without guidance get one record each, appended to the rag
// store; tasks that already have guidance are left alone; a rerun calls nothing; a
// rag augmenter over the file serves the new guidance.
func TestRefreshGuidance(t *testing.T) {
	b := tauBuffer(t)
	mixed := mixedTaskIDs(b)
	if len(mixed) != 26 {
		t.Fatalf("the airline data has %d mixed tasks, the data README says 26", len(mixed))
	}
	var already string
	for id := range mixed {
		already = id
		break
	}
	file := filepath.Join(t.TempDir(), "guidance.jsonl")
	seedRec, _ := json.Marshal(trainer.Record{TaskID: already, TaskDescription: "kept as it is", Guidance: "written by hand"})
	if err := os.WriteFile(file, append(seedRec, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	m := &echoReflector{}
	opts := GuidanceOptions{File: file, Reflect: trainer.Options{Model: m, ModelName: "openai/scripted", Concurrency: 2, WorkDir: t.TempDir()}}
	res, err := RefreshGuidance(context.Background(), b.Tasks(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Qualified != 25 || res.Stats.Done != 25 || m.calls.Load() != 25 {
		t.Fatalf("qualified %d, done %d, calls %d; want 25 (26 mixed tasks, one already guided)", res.Qualified, res.Stats.Done, m.calls.Load())
	}
	recs := readRecords(t, file)
	if len(recs) != 26 || recs[0].Guidance != "written by hand" {
		t.Fatalf("%d records, first %+v", len(recs), recs[0])
	}
	seen := map[string]bool{}
	for _, r := range recs[1:] {
		if !mixed[r.TaskID] || r.TaskID == already || seen[r.TaskID] {
			t.Errorf("record for task %s: not a mixed task without guidance, or twice", r.TaskID)
		}
		seen[r.TaskID] = true
		if !strings.HasPrefix(r.Guidance, "Learned for:") || len(r.SourceEpisodes) < 2 {
			t.Errorf("record %+v", r)
		}
	}

	// Nothing new qualifies: no call.
	res, err = RefreshGuidance(context.Background(), b.Tasks(), opts)
	if err != nil || res.Qualified != 0 || m.calls.Load() != 25 {
		t.Fatalf("rerun: %+v %v, calls %d", res, err, m.calls.Load())
	}

	// The rag arm serves it.
	rag, err := augment.NewRAG(context.Background(), augment.RAGOptions{Name: "rag", GuidanceFile: file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := recs[5]
	got, err := rag.Augment(context.Background(), augment.Request{Task: r.TaskDescription})
	if err != nil || got != r.Guidance {
		t.Errorf("rag served %q (%v) for task %s; want its new guidance %q", got, err, r.TaskID, r.Guidance)
	}
}

func TestRefreshGuidanceLimits(t *testing.T) {
	b := tauBuffer(t)
	file := filepath.Join(t.TempDir(), "g.jsonl")
	m := &echoReflector{}
	res, err := RefreshGuidance(context.Background(), b.Tasks(), GuidanceOptions{File: file, MaxTasks: 3,
		Reflect: trainer.Options{Model: m, WorkDir: t.TempDir()}})
	if err != nil || res.Qualified != 3 || len(readRecords(t, file)) != 3 {
		t.Fatalf("%+v %v", res, err)
	}
	if _, err := RefreshGuidance(context.Background(), b.Tasks(), GuidanceOptions{}); err == nil {
		t.Error("no file: no error")
	}
}
