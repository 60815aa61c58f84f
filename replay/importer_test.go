package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
)

const tauAirline = "../../shared/data/tau-bench/gpt-4o-airline.json"

// openTauAirline opens the real tau-bench file, or skips: it lives outside the repo.
func openTauAirline(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Open(tauAirline)
	if err != nil {
		t.Skipf("tau-bench data not available (%v): see shared/data/README.md", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// importInto runs an importer into a fresh FileSink in dir, in batches of 500 lines
// as the CLI writes them (a Write is an fsync).
func importInto(t *testing.T, dir string, run func(emit func([]byte) error) error) {
	t.Helper()
	sink, err := NewFileSink(dir, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var batch [][]byte
	flush := func() error {
		err := sink.Write(context.Background(), batch)
		batch = nil
		return err
	}
	err = run(func(line []byte) error {
		if batch = append(batch, line); len(batch) == 500 {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if cerr := sink.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

func readDir(t *testing.T, dir string) *Buffer {
	t.Helper()
	b, err := Read(context.Background(), NewFileSource(dir))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// refMessage normalises a raw tau-bench message independently of the importer, from
// a generic map, so the test does not share the importer's decoding.
func refMessage(m map[string]any) protocol.Message {
	out := protocol.Message{Role: m["role"].(string)}
	if c, ok := m["content"].(string); ok {
		out.Content = c
	}
	out.ToolCallID, _ = m["tool_call_id"].(string)
	out.Name, _ = m["name"].(string)
	calls, _ := m["tool_calls"].([]any)
	for _, c := range calls {
		cm := c.(map[string]any)
		fn := cm["function"].(map[string]any)
		out.ToolCalls = append(out.ToolCalls, protocol.ToolCall{
			ID: cm["id"].(string), Type: cm["type"].(string), Name: fn["name"].(string), Arguments: fn["arguments"].(string),
		})
	}
	return out
}

func TestImportTauBenchAirline(t *testing.T) {
	raw, err := os.ReadFile(tauAirline)
	if err != nil {
		t.Skipf("tau-bench data not available (%v): see shared/data/README.md", err)
	}
	var runs []map[string]any
	if err := json.Unmarshal(raw, &runs); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var n int
	importInto(t, dir, func(emit func([]byte) error) error {
		n, err = ImportTauBench(bytes.NewReader(raw), ImportOptions{Domain: DomainFromPath(tauAirline)}, emit)
		return err
	})
	if n != 200 {
		t.Fatalf("imported %d episodes, want 200", n)
	}
	b := readDir(t, dir)
	if len(b.Episodes) != 200 || len(b.Tasks()) != 50 || b.Skipped != 0 || b.Duplicates != 0 {
		t.Fatalf("read %d episodes, %d tasks, %d skipped, %d duplicates; want 200, 50, 0, 0",
			len(b.Episodes), len(b.Tasks()), b.Skipped, b.Duplicates)
	}
	successes := 0
	for _, run := range runs {
		successes += checkTauEpisode(t, b, run)
	}
	if successes != 84 {
		t.Errorf("%d successes, want 84", successes)
	}

	importInto(t, dir, func(emit func([]byte) error) error {
		_, err := ImportTauBench(bytes.NewReader(raw), ImportOptions{Domain: "airline"}, emit)
		return err
	})
	again := readDir(t, dir)
	if len(again.Episodes) != 200 || again.Duplicates == 0 {
		t.Errorf("after re-import: %d episodes, %d duplicates; want 200 and > 0", len(again.Episodes), again.Duplicates)
	}
}

// checkTauEpisode compares one original run with its episode read back, and reports
// whether it succeeded.
func checkTauEpisode(t *testing.T, b *Buffer, run map[string]any) int {
	t.Helper()
	id := "tau-airline-" + jsonText(run["task_id"]) + "-" + jsonText(run["trial"])
	ep := b.Episode(id)
	if ep == nil {
		t.Fatalf("episode %s not read back", id)
	}
	instruction := run["info"].(map[string]any)["task"].(map[string]any)["instruction"].(string)
	if ep.Task != instruction || ep.Arm != "imported" || ep.TaskID != "tau-airline-"+jsonText(run["task_id"]) ||
		ep.ContextSource != "none" || ep.Protocol != "openai" {
		t.Errorf("%s: task %.30q arm %q task_id %q source %q protocol %q", id, ep.Task, ep.Arm, ep.TaskID, ep.ContextSource, ep.Protocol)
	}
	traj := run["traj"].([]any)
	if len(ep.Messages) != len(traj) {
		t.Fatalf("%s: %d messages, want %d", id, len(ep.Messages), len(traj))
	}
	for i, m := range traj {
		if want := refMessage(m.(map[string]any)); !reflect.DeepEqual(ep.Messages[i], want) {
			t.Fatalf("%s message %d:\n got %+v\nwant %+v", id, i, ep.Messages[i], want)
		}
	}
	reward := run["reward"].(float64)
	if ep.Reward == nil || *ep.Reward != reward || ep.Success == nil || *ep.Success != (reward >= 1) {
		t.Errorf("%s: reward %v success %v, want %v", id, ep.Reward, ep.Success, reward)
	}
	if reward >= 1 {
		return 1
	}
	return 0
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// collect runs an importer into memory and decodes every event.
func collect(t *testing.T, run func(emit func([]byte) error) error) []any {
	t.Helper()
	var events []any
	err := run(func(line []byte) error {
		if bytes.ContainsRune(line, '\n') {
			t.Errorf("event line holds a newline: %s", line)
		}
		ev, err := Decode(line)
		if err != nil {
			t.Fatalf("importer emitted an undecodable line: %v\n%s", err, line)
		}
		events = append(events, ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return events
}

func importSmall(t *testing.T, o ImportOptions) []any {
	t.Helper()
	return collect(t, func(emit func([]byte) error) error {
		f, err := os.Open("testdata/cli_tau_small.json")
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := ImportTauBench(f, o, emit)
		if err == nil && n != 2 {
			t.Errorf("imported %d episodes, want 2", n)
		}
		return err
	})
}

func TestImportTauBenchSteps(t *testing.T) {
	events := importSmall(t, ImportOptions{Arm: "history", Domain: "airline"})
	// Run 0: episode, 3 answered steps, a last step holding the trailing tool
	// message, reward. Run 1: episode, 1 step, reward.
	if len(events) != 6+3 {
		t.Fatalf("%d events, want 9", len(events))
	}
	ep := events[0].(*EpisodeEvent)
	if ep.EpisodeID != "tau-airline-7-0" || ep.TaskID != "tau-airline-7" || ep.Arm != "history" || ep.Task != "Cancel reservation ABC123." {
		t.Errorf("episode event %+v", ep)
	}
	first := events[1].(*StepEvent)
	if first.Turn != 0 || len(first.Messages) != 2 || first.Response == nil || len(first.Response.ToolCalls) != 2 {
		t.Fatalf("first step %+v", first)
	}
	wantCall := protocol.ToolCall{ID: "call_2", Type: "function", Name: "get_user_details", Arguments: `{"user_id":"u1"}`}
	if first.Response.ToolCalls[1] != wantCall || first.Response.Content != "" {
		t.Errorf("tool call %+v content %q", first.Response.ToolCalls[1], first.Response.Content)
	}
	last := events[4].(*StepEvent)
	if last.Turn != 3 || last.Response != nil || last.Status != 200 || len(last.Messages) != 1 ||
		last.Messages[0].Role != "tool" || last.Messages[0].ToolCallID != "call_3" || last.Messages[0].Name != "cancel_reservation" {
		t.Errorf("trailing step %+v", last)
	}
	rw := events[5].(*RewardEvent)
	if rw.Reward != 1 || rw.Success == nil || !*rw.Success {
		t.Errorf("reward %+v", rw)
	}
	user := events[7].(*StepEvent).Messages[1]
	if user.Content != "Please cancel ABC123." {
		t.Errorf("content parts flattened to %q", user.Content)
	}
	if rw := events[8].(*RewardEvent); *rw.Success {
		t.Errorf("reward 0 marked a success")
	}
}

func TestImportTauBenchDeterministic(t *testing.T) {
	a := importSmall(t, ImportOptions{Domain: "airline"})
	b := importSmall(t, ImportOptions{Domain: "airline"})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two imports of one file differ")
	}
	ids := map[string]bool{}
	for _, ev := range a {
		id := readEventID(ev)
		if id == "" || ids[id] {
			t.Errorf("event id %q empty or repeated", id)
		}
		ids[id] = true
	}
	if a[0].(*EpisodeEvent).Arm != "imported" {
		t.Errorf("default arm %q", a[0].(*EpisodeEvent).Arm)
	}
}

func TestImportTauBenchErrors(t *testing.T) {
	for name, in := range map[string]string{
		"not an array": `{"task_id": 1}`,
		"bad run":      `[{"task_id": 1, "traj": 5}]`,
		"truncated":    `[{"task_id": 1, "trial": 0, "reward": 1, "traj": []}`,
		"no task id":   `[{"trial": 0, "reward": 1, "traj": []}]`,
	} {
		_, err := ImportTauBench(strings.NewReader(in), ImportOptions{}, func([]byte) error { return nil })
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	boom := errors.New("sink down")
	_, err := ImportTauBench(strings.NewReader(`[{"task_id":1,"trial":0,"reward":1,"traj":[]}]`), ImportOptions{},
		func([]byte) error { return boom })
	if !errors.Is(err, boom) {
		t.Errorf("emit error not passed through: %v", err)
	}
}

func TestDomainFromPath(t *testing.T) {
	for in, want := range map[string]string{
		"../data/gpt-4o-airline.json": "airline",
		"retail.json":                 "retail",
		"x/claude-3-5-sonnet-retail":  "retail",
		"":                            "tau",
	} {
		if got := DomainFromPath(in); got != want {
			t.Errorf("DomainFromPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestImportJSONL(t *testing.T) {
	f, err := os.Open("testdata/cli_events.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines [][]byte
	n, err := ImportJSONL(f, func(line []byte) error { lines = append(lines, line); return nil })
	if err != nil || n != 3 || len(lines) != 3 {
		t.Fatalf("ImportJSONL = %d, %v; %d lines; want 3 events", n, err, len(lines))
	}
	rw, err := Decode(lines[2])
	if err != nil {
		t.Fatal(err)
	}
	if rw.(*RewardEvent).ID == "" {
		t.Error("event without an id was not given one")
	}
	if ev, _ := Decode(lines[0]); ev.(*EpisodeEvent).ID != "e1" {
		t.Error("existing event id changed")
	}

	dir := t.TempDir()
	for range 2 {
		importInto(t, dir, func(emit func([]byte) error) error {
			f, err := os.Open("testdata/cli_events.jsonl")
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = ImportJSONL(f, emit)
			return err
		})
	}
	b := readDir(t, dir)
	if len(b.Episodes) != 1 || b.Duplicates != 3 || len(b.Episodes[0].Messages) != 2 || *b.Episodes[0].Reward != 0.5 {
		t.Errorf("read back %d episodes, %d duplicates: %+v", len(b.Episodes), b.Duplicates, b.Episodes)
	}
}

func TestImportJSONLBadLine(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "cli_events_bad.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := ImportJSONL(f, func([]byte) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "line 3") || n != 2 {
		t.Fatalf("ImportJSONL = %d, %v; want 2 events and an error naming line 3", n, err)
	}
	_, err = ImportJSONL(strings.NewReader("{\"v\":2,\"type\":\"step\",\"episode_id\":\"x\"}\n"), func([]byte) error { return nil })
	if !errors.Is(err, ErrUnknownEvent) || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("unknown version: %v", err)
	}
}
