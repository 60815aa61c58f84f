package replay

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/metrics"
	"github.com/camproxy/camproxy/protocol"
)

// gateSink fails while down, and blocks every Write until released while held.
type gateSink struct {
	mu      sync.Mutex
	down    bool
	hold    chan struct{}
	held    chan struct{} // if set, told (without blocking) when a Write waits for hold
	written atomic.Int64
	ids     sync.Map
}

func (g *gateSink) Name() string { return "gate" }
func (g *gateSink) Close() error { return nil }
func (g *gateSink) Write(ctx context.Context, lines [][]byte) error {
	g.mu.Lock()
	down, hold, held := g.down, g.hold, g.held
	g.mu.Unlock()
	if hold != nil {
		select {
		case held <- struct{}{}:
		default:
		}
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if down {
		return errors.New("sink down")
	}
	for _, l := range lines {
		ev, err := Decode(l)
		if err == nil {
			g.ids.Store(ev.(*RewardEvent).ID, true)
		}
	}
	g.written.Add(int64(len(lines)))
	return nil
}

func reward(i int) *RewardEvent {
	return &RewardEvent{V: Version, Type: TypeReward, ID: NewEventID(), EpisodeID: "ep", Reward: float64(i), At: time.Now()}
}

// TestRecorderNeverWaitsForASlowSink: while a sink hangs in the middle of draining
// its spool, Add still returns at once (overflowing to the spool), and after the sink
// recovers every event arrives.
func TestRecorderNeverWaitsForASlowSink(t *testing.T) {
	g := &gateSink{down: true}
	r, err := NewRecorder([]Named{{Sink: g, URI: "gate://"}}, RecorderOptions{Queue: 4, SpoolDir: t.TempDir(),
		RetryEvery: 20 * time.Millisecond, WriteTimeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		r.Add(reward(i))
	}
	// The sink comes back but hangs: the writer is now stuck inside a drain.
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	g.mu.Lock()
	g.down, g.hold, g.held = false, hold, held
	g.mu.Unlock()
	testkit.Await(t, held, "the writer never wrote to the recovered sink")
	added := make(chan struct{})
	go func() {
		for i := range 2000 {
			r.Add(reward(300 + i))
		}
		close(added)
	}()
	// Add never waits for the sink: were it to, it would wait for hold, which only
	// closes below.
	testkit.Await(t, added, "Add blocked behind a sink that hangs")
	close(hold)
	waitFor(t, "2300 events written", func() bool { return g.written.Load() >= 2300 })
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := 0
	g.ids.Range(func(any, any) bool { n++; return true })
	if n != 2300 {
		t.Fatalf("%d distinct events delivered, want 2300", n)
	}
}

// TestRecorderMedia: a step's inline image is recorded as its SHA-256 and media type,
// or as its bytes with KeepMedia; the request's own messages are left as they were.
func TestRecorderMedia(t *testing.T) {
	for _, keep := range []bool{false, true} {
		dir := t.TempDir()
		sink, err := NewFileSink(dir, FileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewRecorder([]Named{{Sink: sink, URI: "file://" + dir}}, RecorderOptions{SpoolDir: t.TempDir(), KeepMedia: keep,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		img := protocol.Part{Type: "image_url", Media: &protocol.Media{MediaType: "image/png", Data: "aGVsbG8="}}
		msgs := []protocol.Message{{Role: "user", Content: "what is it?", Parts: []protocol.Part{{Type: "text", Text: "what is it?"}, img}}}
		resp := protocol.Message{Role: "assistant", Parts: []protocol.Part{img}}
		r.Add(&EpisodeEvent{V: Version, Type: TypeEpisode, ID: NewEventID(), EpisodeID: "ep-m", StartedAt: time.Now()})
		r.Add(&StepEvent{V: Version, Type: TypeStep, ID: NewEventID(), EpisodeID: "ep-m", Messages: msgs, Response: &resp, Status: 200, At: time.Now()})
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if msgs[0].Parts[1].Media.Data == "" || resp.Parts[0].Media.Data == "" {
			t.Fatal("the recorder modified the request's messages")
		}
		b, err := Read(context.Background(), NewFileSource(dir))
		if err != nil || len(b.Episodes) != 1 {
			t.Fatalf("%v %+v", err, b)
		}
		got := b.Episodes[0].Messages
		if len(got) != 2 || len(got[0].Parts) != 2 || got[0].Content != "what is it?" {
			t.Fatalf("keep=%v messages %+v", keep, got)
		}
		for _, m := range []*protocol.Media{got[0].Parts[1].Media, got[1].Parts[0].Media} {
			switch {
			case keep && (m.Data != "aGVsbG8=" || m.MediaType != "image/png"):
				t.Errorf("keep_media: %+v", m)
			case !keep && (m.Data != "" || m.MediaType != "image/png" ||
				m.SHA256 != "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"):
				t.Errorf("media not reduced to its hash: %+v", m)
			}
		}
	}
}

// TestRecorderBacklog: events a down sink cannot take show in the backlog under the
// sink's name, summed over the sinks of that name; once they are delivered the
// backlog is empty again.
func TestRecorderBacklog(t *testing.T) {
	a, b := &gateSink{down: true}, &gateSink{down: true}
	r, err := NewRecorder([]Named{{Sink: a, URI: "gate://a"}, {Sink: b, URI: "gate://b"}}, RecorderOptions{SpoolDir: t.TempDir(),
		RetryEvery: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if bl := r.Backlog(); bl.Queue != 0 || len(bl.Spooled) != 1 || bl.Spooled["gate"] != 0 {
		t.Fatalf("a new recorder's backlog: %+v", bl)
	}
	for i := range 5 {
		r.Add(reward(i))
	}
	waitFor(t, "10 events spooled", func() bool { return r.Backlog().Spooled["gate"] == 10 })
	for _, g := range []*gateSink{a, b} {
		g.mu.Lock()
		g.down = false
		g.mu.Unlock()
	}
	waitFor(t, "the spools delivered", func() bool { bl := r.Backlog(); return bl.Spooled["gate"] == 0 && bl.Queue == 0 })
	if a.written.Load() != 5 || b.written.Load() != 5 {
		t.Fatalf("written %d and %d, want 5 each", a.written.Load(), b.written.Load())
	}
}

// waitFor polls cond until it holds, bounded only by go test's -timeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, what, cond)
}

// TestRecorderCountsEventsByType: a batch's events are counted by type and result,
// each event once, however the batch mixes them.
func TestRecorderCountsEventsByType(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	dir := t.TempDir()
	sink, err := NewFileSink(dir, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRecorder([]Named{{Sink: sink, URI: "file://" + dir}}, RecorderOptions{SpoolDir: t.TempDir(), Metrics: m,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if i%2 == 0 {
			r.Add(&EpisodeEvent{V: Version, Type: TypeEpisode, ID: NewEventID(), EpisodeID: "ep", StartedAt: time.Now()})
		}
		r.Add(&StepEvent{V: Version, Type: TypeStep, ID: NewEventID(), EpisodeID: "ep", Turn: i, Messages: []protocol.Message{}, Status: 200, At: time.Now()})
		r.Add(&StepEvent{V: Version, Type: TypeStep, ID: NewEventID(), EpisodeID: "ep", Turn: i, Messages: []protocol.Message{}, Status: 200, At: time.Now()})
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for typ, want := range map[string]float64{TypeEpisode: 3, TypeStep: 10} {
		if got := testutil.ToFloat64(m.ReplayEvents.WithLabelValues(typ, sink.Name(), "written")); got != want {
			t.Errorf("%s events written: %v, want %v", typ, got, want)
		}
	}
}

// TestRecorderReusesRoundsSafely: with two sinks that copy their lines (file sinks,
// so the recorder reuses the buffers lines are encoded into), every step reaches
// both sinks byte for byte as it was encoded on its own, whatever rounds, batch
// sizes and reuses it went through; a buffer given back while a writer still had
// a line of it would show as a corrupt or duplicated line.
func TestRecorderReusesRoundsSafely(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir()}
	var named []Named
	for _, d := range dirs {
		sink, err := NewFileSink(d, FileOptions{})
		if err != nil {
			t.Fatal(err)
		}
		named = append(named, Named{Sink: sink, URI: "file://" + d})
	}
	r, err := NewRecorder(named, RecorderOptions{SpoolDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if r.pool == nil {
		t.Fatal("file sinks copy their lines: the recorder should reuse its buffers")
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	want := map[string]string{}
	for i := range 3000 {
		s := &StepEvent{V: Version, Type: TypeStep, ID: NewEventID(), EpisodeID: "ep", Turn: i, Status: 200, At: at,
			Messages: []protocol.Message{{Role: "user", Content: strings.Repeat(string(rune('a'+i%26)), i%700)}}}
		want[s.ID] = string(appendStep(nil, s))
		r.Add(s)
		if i%97 == 0 {
			runtime.Gosched() // let the writers take rounds of many sizes
		}
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		got := map[string]bool{}
		err := NewFileSource(d).Scan(context.Background(), func(line []byte) error {
			id := gjson.GetBytes(line, "id").String()
			if w, ok := want[id]; !ok || w != string(line) || got[id] {
				t.Fatalf("%s: line %.120q is not the step %s as encoded (or came twice)", d, line, id)
			}
			got[id] = true
			return nil
		})
		if err != nil || len(got) != len(want) {
			t.Fatalf("%s: %d of %d steps read back, %v", d, len(got), len(want), err)
		}
	}
}
