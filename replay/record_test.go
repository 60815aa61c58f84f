package replay

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
)

// lineSink keeps every line written to it.
type lineSink struct {
	mu    sync.Mutex
	lines [][]byte
}

func (s *lineSink) Name() string { return "lines" }
func (s *lineSink) Close() error { return nil }
func (s *lineSink) Write(_ context.Context, lines [][]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range lines {
		s.lines = append(s.lines, bytes.Clone(l))
	}
	return nil
}

// recordTurns records turns through a recorder into a lineSink and returns the lines.
func recordTurns(t *testing.T, turns ...*episode.Turn) [][]byte {
	t.Helper()
	sink := &lineSink{}
	r, err := NewRecorder([]Named{{Sink: sink, URI: "lines://"}}, RecorderOptions{SpoolDir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range turns {
		r.Record(tr)
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	return sink.lines
}

// TestRecordTurn: a turn that opens its episode is recorded as the episode event then
// its step; a later turn as its step alone; a failed call has no response and its
// messages are [] rather than null; timings are milliseconds to the microsecond; the
// episode event and every step carry the episode's experiment.
func TestRecordTurn(t *testing.T) {
	at := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	ep := episode.Episode{ID: "ep-1", TaskID: "t-1", Task: "book a flight", Experiment: "support", Arm: "cam", Context: "ctx",
		ContextSource: "miss", Protocol: "openai", Model: "m", StartedAt: at}
	user := []protocol.Message{{Role: "user", Content: "book a flight"}}
	answer := protocol.Message{Role: "assistant", Content: "done"}
	cases := []struct {
		name      string
		turn      episode.Turn
		episode   bool   // an episode event comes first
		response  bool   // the step has a response
		wantInRaw string // a fragment of the step's line
	}{
		{"first turn opens the episode", episode.Turn{Episode: ep, NewEpisode: true, Messages: user, Response: answer, Status: 200,
			Usage: protocol.Usage{InputTokens: 12, OutputTokens: 3}, Augment: 1234567 * time.Nanosecond, TTFB: 20 * time.Millisecond,
			Total: 25*time.Millisecond + 999*time.Nanosecond, At: at}, true, true,
			`"timing_ms":{"augment":1.234,"upstream_ttfb":20,"total":25}`},
		{"a later turn is a step", episode.Turn{Episode: ep, Index: 1, Messages: user, Response: answer, Status: 200, At: at}, false, true, `"turn":1`},
		{"a failed call: no response, messages []", episode.Turn{Episode: ep, Index: 2, Status: 502, Error: "upstream failed", At: at}, false, false,
			`"messages":[]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lines := recordTurns(t, &c.turn)
			want := 1
			if c.episode {
				want = 2
			}
			if len(lines) != want {
				t.Fatalf("%d events, want %d: %q", len(lines), want, lines)
			}
			if c.episode {
				ev, err := Decode(lines[0])
				if err != nil {
					t.Fatal(err)
				}
				e, ok := ev.(*EpisodeEvent)
				if !ok || e.EpisodeID != ep.ID || e.TaskID != ep.TaskID || e.Task != ep.Task || e.Experiment != ep.Experiment || e.Arm != ep.Arm ||
					e.Context != ep.Context || e.ContextSource != ep.ContextSource || e.Protocol != ep.Protocol ||
					e.Model != ep.Model || !e.StartedAt.Equal(at) || e.ID == "" {
					t.Errorf("episode event: %s", lines[0])
				}
			}
			raw := lines[len(lines)-1]
			ev, err := Decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			s, ok := ev.(*StepEvent)
			if !ok || s.EpisodeID != ep.ID || s.Experiment != ep.Experiment || s.Turn != c.turn.Index || s.Status != c.turn.Status || s.Error != c.turn.Error ||
				s.Usage != c.turn.Usage || !s.At.Equal(at) || len(s.Messages) != len(c.turn.Messages) {
				t.Errorf("step: %s", raw)
			}
			if (s.Response != nil) != c.response || (c.response && s.Response.Content != answer.Content) {
				t.Errorf("response: %s", raw)
			}
			if !bytes.Contains(raw, []byte(c.wantInRaw)) {
				t.Errorf("step lacks %s: %s", c.wantInRaw, raw)
			}
		})
	}
}

// TestRecordStepAllocations: a later turn's step costs two allocations on the
// caller's goroutine: the step with its copy of the answer, and the event id.
func TestRecordStepAllocations(t *testing.T) {
	r, err := NewRecorder(nil, RecorderOptions{SpoolDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(t.Context())
	turn := &episode.Turn{Episode: episode.Episode{ID: "ep-1"}, Index: 3, Messages: []protocol.Message{{Role: "user", Content: "hi"}},
		Response: protocol.Message{Role: "assistant", Content: "done"}, Status: 200}
	if n := testing.AllocsPerRun(100, func() { r.Record(turn) }); n > 2 {
		t.Fatalf("Record allocated %.0f times, want 2", n)
	}
}

// TestNewEventID: an event id is 20 lowercase hex digits, made with one allocation
// (the string), and ids differ.
func TestNewEventID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewEventID()
		if len(id) != 20 || strings.Trim(id, "0123456789abcdef") != "" || seen[id] {
			t.Fatalf("id %q: want 20 hex digits, unique", id)
		}
		seen[id] = true
	}
	if n := testing.AllocsPerRun(100, func() { _ = NewEventID() }); n != 1 {
		t.Fatalf("NewEventID: %v allocations, want 1", n)
	}
}
