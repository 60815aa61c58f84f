package lake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/replay"
)

// tauLines is the tau-bench airline runs imported as event lines (Domain airline),
// or skips; the lines are shared, read-only, the slice the caller's.
func tauLines(t testing.TB) [][]byte {
	t.Helper()
	return testkit.TauBenchLines(t, func(r io.Reader, emit func([]byte) error) error {
		_, err := ImportTauBench(r, ImportOptions{Domain: "airline"}, emit)
		return err
	})
}

// importInto runs an importer into a fresh FileSink in dir, in batches of 500 lines
// as the CLI writes them (a Write is an fsync).
func importInto(t *testing.T, dir string, run func(emit func([]byte) error) error) {
	t.Helper()
	sink, err := replay.NewFileSink(dir, replay.FileOptions{})
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

// importLines writes lines into a fresh FileSink in dir as importInto does.
func importLines(t *testing.T, dir string, lines [][]byte) {
	t.Helper()
	importInto(t, dir, func(emit func([]byte) error) error {
		for _, l := range lines {
			if err := emit(l); err != nil {
				return err
			}
		}
		return nil
	})
}

// episodeOf is the episode of b with this id, or nil.
func episodeOf(b *replay.Buffer, id string) *replay.Episode {
	if i := slices.IndexFunc(b.Episodes, func(ep *replay.Episode) bool { return ep.ID == id }); i >= 0 {
		return b.Episodes[i]
	}
	return nil
}

func readDir(t *testing.T, dir string) *replay.Buffer {
	t.Helper()
	b, err := replay.Read(context.Background(), replay.NewFileSource(dir))
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
	t.Parallel() // its own directories and data: it overlaps the package's other heavy tests
	raw, err := os.ReadFile(testkit.TauBenchAirline())
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
		n, err = ImportTauBench(bytes.NewReader(raw), ImportOptions{Domain: DomainFromPath(testkit.TauBenchAirline())}, emit)
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

	// The same file imported again, with Domain airline: every event is one already
	// there, counted as a duplicate, and the episodes read back are unchanged. An
	// eighth of it (a run's events are contiguous: whole episodes and a cut one)
	// shows that as all of it would, and the read after it reads 9/8 of the events,
	// not twice them.
	lines := tauLines(t)
	lines = lines[:len(lines)/8]
	importLines(t, dir, lines)
	again := readDir(t, dir)
	if len(again.Episodes) != 200 || again.Duplicates != len(lines) || again.Skipped != 0 {
		t.Errorf("after re-import of %d events: %d episodes, %d duplicates, %d skipped; want 200, %d, 0",
			len(lines), len(again.Episodes), again.Duplicates, again.Skipped, len(lines))
	}
	if !reflect.DeepEqual(again.Episodes, b.Episodes) {
		t.Error("re-importing events already there changed the episodes read back")
	}
}

// checkTauEpisode compares one original run with its episode read back, and reports
// whether it succeeded.
func checkTauEpisode(t *testing.T, b *replay.Buffer, run map[string]any) int {
	t.Helper()
	id := "tau-airline-" + jsonText(run["task_id"]) + "-" + jsonText(run["trial"])
	ep := episodeOf(b, id)
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
		ev, err := replay.Decode(line)
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
	ep := events[0].(*replay.EpisodeEvent)
	if ep.EpisodeID != "tau-airline-7-0" || ep.TaskID != "tau-airline-7" || ep.Arm != "history" || ep.Task != "Cancel reservation ABC123." {
		t.Errorf("episode event %+v", ep)
	}
	first := events[1].(*replay.StepEvent)
	if first.Turn != 0 || len(first.Messages) != 2 || first.Response == nil || len(first.Response.ToolCalls) != 2 {
		t.Fatalf("first step %+v", first)
	}
	wantCall := protocol.ToolCall{ID: "call_2", Type: "function", Name: "get_user_details", Arguments: `{"user_id":"u1"}`}
	if first.Response.ToolCalls[1] != wantCall || first.Response.Content != "" {
		t.Errorf("tool call %+v content %q", first.Response.ToolCalls[1], first.Response.Content)
	}
	last := events[4].(*replay.StepEvent)
	if last.Turn != 3 || last.Response != nil || last.Status != 200 || len(last.Messages) != 1 ||
		last.Messages[0].Role != "tool" || last.Messages[0].ToolCallID != "call_3" || last.Messages[0].Name != "cancel_reservation" {
		t.Errorf("trailing step %+v", last)
	}
	rw := events[5].(*replay.RewardEvent)
	if rw.Reward != 1 || rw.Success == nil || !*rw.Success {
		t.Errorf("reward %+v", rw)
	}
	user := events[7].(*replay.StepEvent).Messages[1]
	if user.Content != "Please cancel ABC123." {
		t.Errorf("content parts flattened to %q", user.Content)
	}
	if rw := events[8].(*replay.RewardEvent); *rw.Success {
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
		var id string
		switch e := ev.(type) {
		case *replay.EpisodeEvent:
			id = e.ID
		case *replay.StepEvent:
			id = e.ID
		case *replay.RewardEvent:
			id = e.ID
		}
		if id == "" || ids[id] {
			t.Errorf("event id %q empty or repeated", id)
		}
		ids[id] = true
	}
	if a[0].(*replay.EpisodeEvent).Arm != "imported" {
		t.Errorf("default arm %q", a[0].(*replay.EpisodeEvent).Arm)
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
	rw, err := replay.Decode(lines[2])
	if err != nil {
		t.Fatal(err)
	}
	if rw.(*replay.RewardEvent).ID == "" {
		t.Error("event without an id was not given one")
	}
	if ev, _ := replay.Decode(lines[0]); ev.(*replay.EpisodeEvent).ID != "e1" {
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
	if !errors.Is(err, replay.ErrUnknownEvent) || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("unknown version: %v", err)
	}
}

// roundTripBuffer is exportBuffer plus episodes whose turns are not one per
// assistant answer: a failed-then-empty call (more turns than answers) and an answer
// whose step also carried the next one (fewer turns than answers).
func roundTripBuffer() *replay.Buffer {
	b := exportBuffer()
	t0 := b.Episodes[0].StartedAt
	msgs := []protocol.Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "a"}, {Role: "user", Content: "more"}, {Role: "assistant", Content: "b"}}
	b.Episodes = append(b.Episodes,
		&replay.Episode{ID: "ep-3", TaskID: "t2", Task: "hi", Arm: "cam", StartedAt: t0.Add(2 * time.Minute), Steps: 4, Messages: msgs, Reward: ptr(0.25)},
		&replay.Episode{ID: "ep-4", TaskID: "t2", Task: "hi", Arm: "cam", StartedAt: t0.Add(3 * time.Minute), Steps: 1, Messages: msgs, Reward: ptr(0.0), Success: ptr(false)},
	)
	return b
}

var exporters = []struct {
	format string
	export func(io.Writer, *replay.Buffer) error
	load   func(t *testing.T, data []byte, emit func([]byte) error) error
}{
	{FormatJSONL, ExportJSONL, func(t *testing.T, data []byte, emit func([]byte) error) error {
		_, err := ImportJSONL(bytes.NewReader(data), emit)
		return err
	}},
	{FormatParquet, ExportParquet, func(t *testing.T, data []byte, emit func([]byte) error) error {
		_, _, err := importParquet(bytes.NewReader(data), int64(len(data)), nil, emit)
		return err
	}},
}

// exportImportExport exports b, imports the export into a fresh buffer, reads it
// and exports it again.
func exportImportExport(t *testing.T, b *replay.Buffer, format string) (first, second []byte, back *replay.Buffer) {
	t.Helper()
	for _, e := range exporters {
		if e.format != format {
			continue
		}
		var out bytes.Buffer
		if err := e.export(&out, b); err != nil {
			t.Fatal(err)
		}
		if got, err := DetectFormat(out.Bytes()); err != nil || got != format {
			t.Fatalf("DetectFormat of a %s export = %q, %v", format, got, err)
		}
		dir := t.TempDir()
		importInto(t, dir, func(emit func([]byte) error) error { return e.load(t, out.Bytes(), emit) })
		back = readDir(t, dir)
		var again bytes.Buffer
		if err := e.export(&again, back); err != nil {
			t.Fatal(err)
		}
		return out.Bytes(), again.Bytes(), back
	}
	t.Fatalf("no exporter %q", format)
	return nil, nil, nil
}

func TestImportExportRoundTrip(t *testing.T) {
	for _, e := range exporters {
		t.Run(e.format, func(t *testing.T) {
			b := roundTripBuffer()
			first, second, back := exportImportExport(t, b, e.format)
			if !bytes.Equal(first, second) {
				t.Errorf("export → import → export is not a fixed point:\n%s\n---\n%s", first, second)
			}
			if back.Skipped != 0 || back.Duplicates != 0 || len(back.Episodes) != len(b.Episodes) {
				t.Fatalf("read back %d episodes, %d skipped, %d duplicates", len(back.Episodes), back.Skipped, back.Duplicates)
			}
			want, got := Rows(b), Rows(back)
			for i := range want {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], want[i])
				}
				if ep := back.Episodes[i]; ep.Steps > 0 && !replay.SynthesisedSpan(ep) {
					t.Errorf("%s: imported steps at %v…%v are not marked synthesised", ep.ID, ep.StartedAt, ep.EndedAt)
				}
			}
		})
	}
}

// TestImportExportTauBench: on the real data, an export of a tau-bench import
// comes back as the same export, and importing it into the buffer it came from adds
// nothing (the ids are the tau-bench import's).
func TestImportExportTauBench(t *testing.T) {
	lines := tauLines(t)
	dir := t.TempDir()
	importLines(t, dir, lines)
	b := readDir(t, dir)
	for _, e := range exporters {
		t.Run(e.format, func(t *testing.T) {
			// The formats side by side: each only reads b and lines, and its own
			// round trip is seconds of one core under -race.
			t.Parallel()
			first, second, back := exportImportExport(t, b, e.format)
			if len(back.Episodes) != 200 || !bytes.Equal(first, second) {
				t.Fatalf("%d episodes; fixed point %v", len(back.Episodes), bytes.Equal(first, second))
			}
			// Into a copy of the source buffer, without the other format's re-import:
			// its first eighth (whole episodes and a cut one) holds events the export
			// carries as well as all of it would, and the read is of 9/8 of the data,
			// not twice it.
			dir := t.TempDir()
			importLines(t, dir, lines[:len(lines)/8])
			importInto(t, dir, func(emit func([]byte) error) error { return e.load(t, first, emit) })
			if again := readDir(t, dir); len(again.Episodes) != 200 || again.Duplicates == 0 {
				t.Errorf("re-import into the source: %d episodes, %d duplicates", len(again.Episodes), again.Duplicates)
			}
		})
	}
}

func TestDetectFormat(t *testing.T) {
	for _, tc := range []struct {
		head, want string
	}{
		{"PAR1\x15\x04", FormatParquet},
		{"\n  [{\"task_id\":0", FormatTauBench},
		{"\xef\xbb\xbf{\"v\":1", FormatJSONL},
		{"{\"episode_id\":\"e\"", FormatJSONL},
		{"", ""},
		{"episode_id,task_id\n", ""},
	} {
		got, err := DetectFormat([]byte(tc.head))
		if got != tc.want || (tc.want == "") != errors.Is(err, ErrUnknownFormat) {
			t.Errorf("DetectFormat(%q) = %q, %v; want %q", tc.head, got, err, tc.want)
		}
	}
}

func TestImportJSONLNeitherEventNorRow(t *testing.T) {
	_, err := ImportJSONL(strings.NewReader(`{"episode_id":"e","turns":1}`+"\n"), func([]byte) error { return nil })
	if !errors.Is(err, replay.ErrUnknownEvent) || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("err %v", err)
	}
}
