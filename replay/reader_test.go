package replay

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/protocol"
)

// readerSource is an in-memory Source over encoded lines.
type readerSource [][]byte

func (s readerSource) Scan(ctx context.Context, fn func([]byte) error) error {
	for _, l := range s {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(l); err != nil {
			return err
		}
	}
	return nil
}

var readerT0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func readerAt(sec int) time.Time { return readerT0.Add(time.Duration(sec) * time.Second) }

func readerEpisode(ep, task string, sec int) *EpisodeEvent {
	return &EpisodeEvent{V: Version, Type: TypeEpisode, ID: NewEventID(), EpisodeID: ep,
		TaskID: "t-" + task, Task: task, Arm: "cam", Context: "ctx of " + task, ContextSource: "miss",
		Protocol: "openai", Model: "gpt-4o", StartedAt: readerAt(sec)}
}

// readerStep is a successful call: the new messages given as "role:content", answered
// by the assistant with "answer <turn>".
func readerStep(ep string, turn, sec int, msgs ...string) *StepEvent {
	s := &StepEvent{V: Version, Type: TypeStep, ID: NewEventID(), EpisodeID: ep, Turn: turn,
		Usage: protocol.Usage{InputTokens: 100, OutputTokens: 10}, Timing: Timing{Augment: float64(10 + turn)},
		Status: 200, At: readerAt(sec)}
	for _, m := range msgs {
		role, content, _ := strings.Cut(m, ":")
		s.Messages = append(s.Messages, protocol.Message{Role: role, Content: content})
	}
	s.Response = &protocol.Message{Role: "assistant", Content: "answer " + strconv.Itoa(turn)}
	return s
}

func readerFailed(s *StepEvent, status int, errText string) *StepEvent {
	s.Status, s.Error = status, errText
	if status/100 != 2 {
		s.Response = nil
	}
	return s
}

func readerReward(ep string, r float64, sec int, success *bool, meta string) *RewardEvent {
	ev := &RewardEvent{V: Version, Type: TypeReward, ID: NewEventID(), EpisodeID: ep, Reward: r,
		Success: success, At: readerAt(sec)}
	if meta != "" {
		ev.Metadata = json.RawMessage(meta)
	}
	return ev
}

// episodeOf is the episode of b with this id, or nil.
func episodeOf(b *Buffer, id string) *Episode {
	if i := slices.IndexFunc(b.Episodes, func(ep *Episode) bool { return ep.ID == id }); i >= 0 {
		return b.Episodes[i]
	}
	return nil
}

func readerPtr[T any](v T) *T { return &v }

// readerEncode marshals events; a []byte is taken as a raw line.
func readerEncode(t testing.TB, evs ...any) readerSource {
	t.Helper()
	var src readerSource
	for _, ev := range evs {
		if raw, ok := ev.([]byte); ok {
			src = append(src, raw)
			continue
		}
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b)
	}
	return src
}

// readerTranscript renders messages as "role:content" for comparison.
func readerTranscript(msgs []protocol.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Role + ":" + m.Content
	}
	return out
}

func readerOne(t *testing.T, b *Buffer) *Episode {
	t.Helper()
	if len(b.Episodes) != 1 {
		t.Fatalf("want 1 episode, got %d", len(b.Episodes))
	}
	return b.Episodes[0]
}

func readerWantMessages(t *testing.T, ep *Episode, want ...string) {
	t.Helper()
	if got := readerTranscript(ep.Messages); !slices.Equal(got, want) {
		t.Fatalf("messages\n got %q\nwant %q", got, want)
	}
}

func TestRead(t *testing.T) {
	full := []string{"system:policy", "user:book a flight", "assistant:answer 0", "tool:ok", "assistant:answer 1", "user:thanks", "assistant:answer 2"}
	s0 := func() *StepEvent { return readerStep("e1", 0, 1, "system:policy", "user:book a flight") }
	s1 := func() *StepEvent { return readerStep("e1", 1, 2, "tool:ok") }
	s2 := func() *StepEvent { return readerStep("e1", 2, 3, "user:thanks") }
	dup := s1()
	dupEp := readerEpisode("e1", "book", 0)
	tie1, tie2 := readerReward("e1", 0.1, 9, nil, ""), readerReward("e1", 0.7, 9, nil, "")

	cases := []struct {
		name   string
		events []any
		check  func(t *testing.T, b *Buffer)
	}{
		{"in order", []any{readerEpisode("e1", "book", 0), s0(), s1(), s2()}, func(t *testing.T, b *Buffer) {
			ep := readerOne(t, b)
			readerWantMessages(t, ep, full...)
			if ep.ID != "e1" || ep.TaskID != "t-book" || ep.Task != "book" || ep.Arm != "cam" || ep.Context != "ctx of book" ||
				ep.ContextSource != "miss" || ep.Protocol != "openai" || ep.Model != "gpt-4o" {
				t.Fatalf("episode fields %+v", ep)
			}
			if ep.Steps != 3 || ep.Usage != (protocol.Usage{InputTokens: 300, OutputTokens: 30}) || ep.AugmentMs != 10 {
				t.Fatalf("steps %d usage %+v augment %v", ep.Steps, ep.Usage, ep.AugmentMs)
			}
			if !ep.StartedAt.Equal(readerAt(0)) || !ep.EndedAt.Equal(readerAt(3)) || ep.Reward != nil {
				t.Fatalf("started %v ended %v reward %v", ep.StartedAt, ep.EndedAt, ep.Reward)
			}
		}},
		{"steps out of order and before the episode event", []any{s2(), s0(), s1(), readerEpisode("e1", "book", 0)}, func(t *testing.T, b *Buffer) {
			ep := readerOne(t, b)
			readerWantMessages(t, ep, full...)
			if ep.Arm != "cam" || ep.AugmentMs != 10 {
				t.Fatalf("episode %+v", ep)
			}
		}},
		{"same turn ordered by time", []any{readerStep("e1", 1, 5, "user:late"), readerStep("e1", 1, 4, "user:early")}, func(t *testing.T, b *Buffer) {
			readerWantMessages(t, readerOne(t, b), "user:early", "assistant:answer 1", "user:late", "assistant:answer 1")
		}},
		{"duplicate event ids are dropped", []any{dupEp, s0(), dup, dupEp, dup, s2()}, func(t *testing.T, b *Buffer) {
			readerWantMessages(t, readerOne(t, b), full...)
			if b.Duplicates != 2 || b.Episodes[0].Steps != 3 {
				t.Fatalf("duplicates %d steps %d", b.Duplicates, b.Episodes[0].Steps)
			}
		}},
		{"failed step then its retry", []any{
			readerEpisode("e1", "book", 0), s0(),
			readerFailed(readerStep("e1", 1, 2, "tool:ok"), 500, "upstream 500"),
			readerStep("e1", 2, 3, "tool:ok"),
		}, func(t *testing.T, b *Buffer) {
			ep := readerOne(t, b)
			readerWantMessages(t, ep, "system:policy", "user:book a flight", "assistant:answer 0", "tool:ok", "assistant:answer 2")
			if ep.Steps != 2 || ep.Usage.InputTokens != 200 || !ep.EndedAt.Equal(readerAt(3)) {
				t.Fatalf("steps %d usage %+v ended %v", ep.Steps, ep.Usage, ep.EndedAt)
			}
		}},
		{"broken-off stream is ignored", []any{
			readerEpisode("e1", "book", 0), s0(),
			readerFailed(readerStep("e1", 1, 2, "tool:ok"), 200, "stream broken off"),
			readerStep("e1", 2, 3, "tool:ok"),
		}, func(t *testing.T, b *Buffer) {
			readerWantMessages(t, readerOne(t, b), "system:policy", "user:book a flight", "assistant:answer 0", "tool:ok", "assistant:answer 2")
		}},
		{"first step failed: its augment latency still counts", []any{
			readerFailed(readerStep("e1", 0, 1, "user:hi"), 502, "bad gateway"), readerStep("e1", 1, 2, "user:hi"),
		}, func(t *testing.T, b *Buffer) {
			ep := readerOne(t, b)
			if ep.AugmentMs != 10 || ep.Steps != 1 || !ep.StartedAt.Equal(readerAt(1)) {
				t.Fatalf("augment %v steps %d started %v", ep.AugmentMs, ep.Steps, ep.StartedAt)
			}
		}},
		{"latest reward wins and replaces", []any{
			readerEpisode("e1", "book", 0), s0(),
			readerReward("e1", 0.2, 10, readerPtr(false), `{"try":1}`),
			readerReward("e1", 0.9, 20, readerPtr(true), `{"try":3}`),
			readerReward("e1", 0.5, 15, nil, `{"try":2}`), // arrives last, happened earlier
		}, func(t *testing.T, b *Buffer) {
			ep := readerOne(t, b)
			if ep.Reward == nil || *ep.Reward != 0.9 || ep.Success == nil || !*ep.Success ||
				string(ep.Metadata) != `{"try":3}` || !ep.RewardAt.Equal(readerAt(20)) {
				t.Fatalf("reward %v success %v meta %s at %v", ep.Reward, ep.Success, ep.Metadata, ep.RewardAt)
			}
		}},
		{"a later reward without success clears it", []any{
			readerEpisode("e1", "book", 0),
			readerReward("e1", 1, 10, readerPtr(true), `{"a":1}`), readerReward("e1", 0, 11, nil, ""),
		}, func(t *testing.T, b *Buffer) {
			ep := readerOne(t, b)
			if *ep.Reward != 0 || ep.Success != nil || ep.Metadata != nil {
				t.Fatalf("reward %v success %v meta %s", *ep.Reward, ep.Success, ep.Metadata)
			}
		}},
		{"reward tie: later in scan order wins", []any{readerEpisode("e1", "book", 0), tie1, tie2}, func(t *testing.T, b *Buffer) {
			if r := *readerOne(t, b).Reward; r != 0.7 {
				t.Fatalf("reward %v", r)
			}
		}},
		{"reward before the episode event and steps", []any{
			readerReward("e1", 0.75, 30, readerPtr(true), ""), readerEpisode("e1", "book", 0), s0(),
		}, func(t *testing.T, b *Buffer) {
			ep := readerOne(t, b)
			if ep.Reward == nil || *ep.Reward != 0.75 || ep.Steps != 1 || ep.Arm != "cam" {
				t.Fatalf("episode %+v", ep)
			}
		}},
		{"steps without episode event", []any{s1(), s0(), readerReward("e1", 1, 9, nil, "")}, func(t *testing.T, b *Buffer) {
			ep := readerOne(t, b)
			readerWantMessages(t, ep, full[:5]...)
			if ep.ID != "e1" || ep.TaskID != "" || ep.Arm != "" || !ep.StartedAt.Equal(readerAt(1)) || *ep.Reward != 1 {
				t.Fatalf("episode %+v", ep)
			}
		}},
		{"episode event without steps", []any{readerEpisode("e1", "book", 0)}, func(t *testing.T, b *Buffer) {
			ep := readerOne(t, b)
			if ep.Steps != 0 || len(ep.Messages) != 0 || !ep.EndedAt.IsZero() {
				t.Fatalf("episode %+v", ep)
			}
		}},
		{"reward alone is an orphan", []any{readerReward("ghost", 1, 0, nil, ""), readerEpisode("e1", "book", 0)}, func(t *testing.T, b *Buffer) {
			if readerOne(t, b).ID != "e1" || b.Orphans != 1 || episodeOf(b, "ghost") != nil {
				t.Fatalf("orphans %d", b.Orphans)
			}
		}},
		{"lines that do not decode are skipped", []any{
			[]byte(`not json`), []byte(`{"v":2,"type":"step","episode_id":"e1"}`), []byte(`{"v":1,"type":"nope","episode_id":"e1"}`),
			[]byte(`{"v":1,"type":"step"}`), []byte(`{"v":1,"type":"step","episode_id":"e1","turn":"x"}`),
			readerEpisode("e1", "book", 0),
		}, func(t *testing.T, b *Buffer) {
			if readerOne(t, b).Steps != 0 || b.Skipped != 5 || b.Duplicates != 0 {
				t.Fatalf("skipped %d duplicates %d", b.Skipped, b.Duplicates)
			}
		}},
		{"episodes sorted by start, then id", []any{
			readerEpisode("b", "x", 5), readerEpisode("c", "x", 1), readerStep("a", 0, 5, "user:a"), readerEpisode("d", "y", 5),
		}, func(t *testing.T, b *Buffer) {
			var ids []string
			for _, ep := range b.Episodes {
				ids = append(ids, ep.ID)
			}
			if !slices.Equal(ids, []string{"c", "a", "b", "d"}) {
				t.Fatalf("order %v", ids)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Read(context.Background(), readerEncode(t, tc.events...))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, b)
		})
	}
}

func TestBufferTasks(t *testing.T) {
	first := readerEpisode("e1", "fly", 1)
	first.Task = "" // the first run's text was lost: the next one names the task
	src := readerEncode(t,
		readerEpisode("e3", "alpha", 3), first, readerEpisode("e2", "fly", 2),
		readerEpisode("e4", "fly", 4), readerStep("loose", 0, 0, "user:?"),
	)
	b, err := Read(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	tasks := b.Tasks()
	type view struct {
		id, text string
		eps      []string
	}
	var got []view
	for _, tk := range tasks {
		v := view{id: tk.ID, text: tk.Text}
		for _, ep := range tk.Episodes {
			v.eps = append(v.eps, ep.ID)
		}
		got = append(got, v)
	}
	want := []view{{"", "", []string{"loose"}}, {"t-alpha", "alpha", []string{"e3"}}, {"t-fly", "fly", []string{"e1", "e2", "e4"}}}
	if len(got) != len(want) {
		t.Fatalf("tasks %+v", got)
	}
	for i := range want {
		if got[i].id != want[i].id || got[i].text != want[i].text || !slices.Equal(got[i].eps, want[i].eps) {
			t.Fatalf("task %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestReadReturnsSourceError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Read(ctx, readerEncode(t, readerEpisode("e1", "a", 0))); !errors.Is(err, context.Canceled) {
		t.Fatalf("Read = %v", err)
	}
	if _, err := Read(context.Background(), NewFileSource(filepath.Join(t.TempDir(), "none"))); err == nil {
		t.Fatal("Read of a missing dir succeeded")
	}
}

// The whole path: events through a FileSink, a crash's torn tail, read back whole.
func TestReadFromFileSink(t *testing.T) {
	dir := t.TempDir()
	s := fileNewSink(t, dir, FileOptions{Writer: "w", SegmentBytes: 512})
	ev := []any{readerEpisode("e1", "book", 0), readerStep("e1", 0, 1, "system:policy", "user:book a flight"),
		readerStep("e1", 1, 2, "tool:ok"), readerReward("e1", 1, 3, readerPtr(true), "")}
	lines := readerEncode(t, ev...)
	fileWrite(t, s, lines[:2])
	fileWrite(t, s, lines[1:]) // at-least-once: line 1 again
	segs := fileSegmentsOf(t, dir)
	fileAppendRaw(t, segs[len(segs)-1], string(lines[0][:20]))

	src := NewFileSource(dir)
	b, err := Read(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	ep := readerOne(t, b)
	readerWantMessages(t, ep, "system:policy", "user:book a flight", "assistant:answer 0", "tool:ok", "assistant:answer 1")
	if b.Duplicates != 1 || src.Skipped() != 1 || *ep.Reward != 1 {
		t.Fatalf("duplicates %d skipped %d reward %v", b.Duplicates, src.Skipped(), *ep.Reward)
	}
}

// FuzzRead feeds arbitrary bytes as a segment: a replay buffer written by crashed or
// foreign processes must never crash the reader.
func FuzzRead(f *testing.F) {
	seed := readerEncode(f, readerEpisode("e1", "book", 0), readerStep("e1", 1, 2, "tool:ok"),
		readerFailed(readerStep("e1", 0, 1, "user:x"), 500, "boom"), readerReward("e1", 0.5, 3, readerPtr(true), `{"k":[1]}`))
	var all []byte
	for _, l := range seed {
		all = append(append(all, l...), '\n')
	}
	f.Add(all)
	f.Add(all[:len(all)-7])
	f.Add([]byte("{\"v\":1,\"type\":\"step\",\"episode_id\":\"e\",\"turn\":-9,\"status\":200,\"response\":null}\n\n\x00\xff\n"))
	f.Add([]byte(`{"v":1,"type":"reward","episode_id":"e","reward":1e308,"at":"bad"}` + "\n"))
	f.Add([]byte(`{"v":1,"type":"learn","id":"l1","action":"promoted","version":3,"stats":{"a":{"n":2,"mean":null}},"at":"2025-01-01T00:00:00Z"}` + "\n"))
	dir := f.TempDir() // one per fuzzing process; its inputs run one at a time
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, "w-00000000000000000001-000000.jsonl"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		b, err := Read(context.Background(), NewFileSource(dir))
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		n := 0
		for _, tk := range b.Tasks() {
			n += len(tk.Episodes)
		}
		if n != len(b.Episodes) {
			t.Fatalf("tasks hold %d episodes, buffer %d", n, len(b.Episodes))
		}
		for _, ep := range b.Episodes {
			if ep.ID == "" || episodeOf(b, ep.ID) != ep || ep.Steps < 0 {
				t.Fatalf("bad episode %+v", ep)
			}
		}
		// The streaming reader, spilling everything, reassembles the same.
		streamSameAsRead(t, NewFileSource(dir), ReadOptions{MemoryBytes: 1, SpillDir: t.TempDir()})
		streamSameAsRead(t, NewFileSource(dir), ReadOptions{Light: true, SpillDir: t.TempDir()})
	})
}
