package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/camproxy/camproxy/internal/testkit"
)

// streamCollect reads src with Episodes and returns what Read would: episodes in
// Buffer order.
func streamCollect(t testing.TB, src Source, o ReadOptions) (*Buffer, Summary) {
	t.Helper()
	var eps []*Episode
	sum, err := Episodes(context.Background(), src, o, func(ep *Episode) error {
		eps = append(eps, ep)
		return nil
	})
	if err != nil {
		t.Fatalf("Episodes: %v", err)
	}
	if sum.Episodes != len(eps) {
		t.Fatalf("summary says %d episodes, fn got %d", sum.Episodes, len(eps))
	}
	SortEpisodes(eps)
	return &Buffer{Episodes: eps, Skipped: sum.Skipped, Duplicates: sum.Duplicates, Orphans: sum.Orphans, Learn: sum.Learn}, sum
}

// streamSameAsRead fails unless Episodes with o reassembles src exactly as Read does
// (without Messages, Task and Context when o.Light).
func streamSameAsRead(t testing.TB, src Source, o ReadOptions) Summary {
	t.Helper()
	return streamSameAs(t, streamWant(t, src), src, o)
}

// streamWant is Read of src: what streamSameAs compares with, read once for all
// the options a test reads src with.
func streamWant(t testing.TB, src Source) *Buffer {
	t.Helper()
	want, err := Read(context.Background(), src)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return want
}

// streamSameAs fails unless Episodes with o reassembles src exactly as want, Read's
// buffer of src, has it (without Messages, Task and Context when o.Light). It
// leaves want as it is.
func streamSameAs(t testing.TB, want *Buffer, src Source, o ReadOptions) Summary {
	t.Helper()
	got, sum := streamCollect(t, src, o)
	if len(got.Episodes) != len(want.Episodes) {
		t.Fatalf("stream: %d episodes, Read: %d", len(got.Episodes), len(want.Episodes))
	}
	for i, w := range want.Episodes {
		if o.Light {
			light := *w
			light.Messages, light.Task, light.Context = nil, "", ""
			w = &light
		}
		if !reflect.DeepEqual(got.Episodes[i], w) {
			t.Fatalf("episode %d differs:\nstream %+v\nRead   %+v", i, got.Episodes[i], w)
		}
	}
	if got.Skipped != want.Skipped || got.Duplicates != want.Duplicates || got.Orphans != want.Orphans {
		t.Fatalf("stream skipped/duplicates/orphans %d/%d/%d, Read %d/%d/%d", got.Skipped, got.Duplicates, got.Orphans,
			want.Skipped, want.Duplicates, want.Orphans)
	}
	if !reflect.DeepEqual(got.Learn, want.Learn) {
		t.Fatalf("learn events differ:\nstream %v\nRead   %v", got.Learn, want.Learn)
	}
	return sum
}

// streamTauLines is the tau-bench airline runs imported as event lines (Domain
// airline), or skips; the lines are shared, read-only, the slice the caller's.
func streamTauLines(t testing.TB) [][]byte {
	t.Helper()
	return testkit.TauBenchLines(t, TauBenchImport)
}

// TauBenchImport turns a tau-bench file into replay event lines: package lake's
// ImportTauBench, set by tau_test.go (package replay_test), since lake imports
// replay and these internal tests cannot import it.
var TauBenchImport func(r io.Reader, emit func(line []byte) error) error

// writeLines writes lines into a fresh FileSink in dir, in batches of 500 as
// `replay import` writes them.
func writeLines(t *testing.T, dir string, lines [][]byte) {
	t.Helper()
	sink := fileNewSink(t, dir, FileOptions{})
	for batch := range slices.Chunk(lines, 500) {
		fileWrite(t, sink, batch)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestEpisodesTauBenchSameAsRead(t *testing.T) {
	t.Parallel() // its own directories and data: it overlaps the package's other heavy tests
	dir := t.TempDir()
	writeLines(t, dir, streamTauLines(t))
	want := streamWant(t, NewFileSource(dir))
	for _, o := range []ReadOptions{
		{},                           // all in memory
		{MemoryBytes: 1, Workers: 1}, // spilled, serial decoding
		{MemoryBytes: 1, Workers: 3}, // spilled, parallel decoding
		{MemoryBytes: 1, Workers: 2, Light: true},
	} {
		t.Run(fmt.Sprintf("memory=%d,workers=%d,light=%v", o.MemoryBytes, o.Workers, o.Light), func(t *testing.T) {
			o.SpillDir = t.TempDir()
			sum := streamSameAs(t, want, NewFileSource(dir), o)
			if sum.Episodes != 200 {
				t.Fatalf("%d episodes, want 200", sum.Episodes)
			}
			if o.MemoryBytes == 1 && !o.Light && sum.Spilled == 0 {
				t.Fatal("a 1-byte memory bound spilled nothing")
			}
			if ents, _ := os.ReadDir(o.SpillDir); len(ents) != 0 {
				t.Fatalf("spill directory left behind: %v", ents)
			}
		})
	}
}

// streamMessyBuffer is the tau-bench buffer as a fleet writes it: events shuffled
// across three writers' small segments, their times spread over two days, 10% of
// them delivered twice, rewards re-sent with a new verdict, learn events, orphan
// rewards, torn and foreign lines, an id reused by another episode, and steps
// whose turn and time tie. It takes the first trials of each of the 50 tasks (of
// four): where the mess is the point, one trial's quarter of the bytes still fills
// two dozen segments and several decoding chunks.
func streamMessyBuffer(t *testing.T, trials int) string {
	lines := slices.DeleteFunc(streamTauLines(t), func(l []byte) bool {
		ep := gjson.GetBytes(l, "episode_id").String()
		trial, err := strconv.Atoi(ep[strings.LastIndexByte(ep, '-')+1:])
		return err != nil || trial >= trials
	})
	rng := rand.New(rand.NewPCG(21, 1))
	t0 := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	arms := []string{"baseline", "cam", "learn-v2"}
	var out [][]byte
	set := func(l []byte, path string, v any) []byte {
		b, err := sjson.SetBytes(l, path, v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for i, l := range lines {
		ep := gjson.GetBytes(l, "episode_id").String()
		epHour := time.Duration(len(ep)*7+int(ep[len(ep)-1])) * time.Hour % (48 * time.Hour)
		switch gjson.GetBytes(l, "type").String() {
		case TypeEpisode:
			l = set(l, "started_at", t0.Add(epHour))
			l = set(l, "arm", arms[i%len(arms)])
		case TypeStep:
			turn := gjson.GetBytes(l, "turn").Int()
			l = set(l, "at", t0.Add(epHour+time.Duration(turn)*time.Minute*time.Duration(rng.IntN(90))))
			if i%17 == 0 { // a second step of the same turn at the same time: scan order decides
				tie := set(l, "id", NewEventID())
				out = append(out, tie)
			}
		case TypeReward:
			at := t0.Add(epHour + time.Duration(rng.IntN(6))*time.Hour)
			l = set(l, "at", at)
			l = set(l, "metadata", map[string]any{"experiment": []string{"x1", "x2", ""}[i%3]})
			if i%5 == 0 { // feedback sent again, later or earlier, another verdict
				again := set(set(set(l, "id", NewEventID()), "reward", 0.25), "at", at.Add(time.Duration(rng.IntN(3)-1)*time.Hour))
				out = append(out, again)
			}
		}
		out = append(out, l)
	}
	for i := range 5 {
		out = append(out, []byte(fmt.Sprintf(`{"v":1,"type":"reward","id":"orphan-%d","episode_id":"gone-%d","reward":1,"at":"2026-06-01T00:00:00Z"}`, i, i)))
		out = append(out, []byte(fmt.Sprintf(`{"v":1,"type":"learn","id":"learn-%d","experiment":"x1","action":"version","version":%d,"arm":"learn-v%d","at":"2026-06-0%dT00:00:00Z"}`, i, i, i, 1+i%2)))
	}
	// An id reused by another episode: the first read wins wherever it belongs.
	stolen := gjson.GetBytes(out[3], "id").String()
	out = append(out, set(set(out[len(out)/2], "id", stolen), "episode_id", "thief"))
	out = append(out, []byte(`{"v":1,"type":"step","episode_id":"x","turn":"x"}`), []byte(`{"v":9}`), []byte(`not json`))
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	for i := range len(out) / 10 {
		out = append(out, out[i*7%len(out)])
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })

	dir := t.TempDir()
	var sinks []*FileSink
	for w := range 3 {
		sinks = append(sinks, fileNewSink(t, dir, FileOptions{Writer: fmt.Sprintf("w%d", w), SegmentBytes: 64 << 10}))
	}
	for i := 0; i < len(out); i += 40 {
		fileWrite(t, sinks[rng.IntN(3)], out[i:min(i+40, len(out))])
	}
	for _, s := range sinks {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestEpisodesMessyBufferSameAsRead(t *testing.T) {
	t.Parallel() // its own directories and data: it overlaps the package's other heavy tests
	dir := streamMessyBuffer(t, 1)
	if n := len(fileSegmentsOf(t, dir)); n < 6 {
		t.Fatalf("only %d segments: the test wants an episode's events spread over several", n)
	}
	want := streamWant(t, NewFileSource(dir))
	for _, o := range []ReadOptions{{}, {MemoryBytes: 1, Workers: 1}, {MemoryBytes: 1, Workers: 4}, {MemoryBytes: 1, Light: true}} {
		t.Run(fmt.Sprintf("memory=%d,workers=%d,light=%v", o.MemoryBytes, o.Workers, o.Light), func(t *testing.T) {
			sum := streamSameAs(t, want, NewFileSource(dir), o)
			// "not json" never reaches the reader: FileSource drops lines that are not JSON.
			if sum.Duplicates == 0 || sum.Orphans != 5 || sum.Skipped != 2 || len(sum.Learn) != 5 {
				t.Fatalf("the buffer lost its mess: %+v", sum)
			}
		})
	}
}

// The reader's own cases, each read again by the stream.
func TestEpisodesReaderCasesSameAsRead(t *testing.T) {
	s1 := readerStep("e1", 1, 2, "tool:ok")
	cases := [][]any{
		{readerEpisode("e1", "book", 0), readerStep("e1", 0, 1, "system:policy"), s1, s1, readerEpisode("e1", "other", 3)},
		{readerReward("e1", 0.1, 9, nil, ""), readerReward("e1", 0.7, 9, nil, ""), readerStep("e1", 0, 1, "user:a")},
		{readerFailed(readerStep("e1", 0, 1, "user:x"), 500, "boom"), readerStep("e1", 0, 1, "user:x")},
		{readerReward("lonely", 1, 1, nil, "")},
		{[]byte(`not json`), []byte(`{"v":1,"type":"step","episode_id":"e1","turn":"x"}`), readerEpisode("e1", "book", 0)},
		{readerEpisode("b", "x", 5), readerEpisode("c", "x", 1), readerStep("a", 0, 5, "user:a"), readerEpisode("d", "y", 5)},
	}
	for i, evs := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			streamSameAsRead(t, readerEncode(t, evs...), ReadOptions{MemoryBytes: 1})
		})
	}
}

func TestEpisodesSelection(t *testing.T) {
	ep := func(id, task, arm string, sec int) *EpisodeEvent {
		e := readerEpisode(id, task, sec)
		e.TaskID, e.Arm = task, arm
		return e
	}
	// f and g record their experiment in the events' field (the episode event's
	// wins over a reward read before it); a and b only in the reward's metadata.
	f, g := ep("f", "t1", "cam", 20), ep("g", "t2", "cam", 30)
	f.Experiment, g.Experiment = "x1", "x2"
	rf := readerReward("f", 1, 25, nil, "")
	rf.Experiment = "x9"
	rh := readerReward("h", 1, 45, nil, "")
	rh.Experiment = "x2"
	src := readerEncode(t,
		ep("a", "t1", "cam", 0), ep("b", "t2", "cam", 3600), ep("c", "t1", "baseline", 7200), ep("d", "t2", "baseline", 10800),
		readerReward("a", 1, 5, nil, `{"experiment":"x1"}`), readerReward("b", 1, 3605, nil, `{"experiment":"x2"}`),
		readerStep("e", 0, 3600, "user:no episode event"),
		rf, f, g, rh, ep("h", "t1", "cam", 40),
	)
	cases := []struct {
		name string
		sel  Selection
		want []string
	}{
		{"all", Selection{}, []string{"a", "f", "g", "h", "b", "e", "c", "d"}},
		{"since is inclusive", Selection{Since: readerAt(3600)}, []string{"b", "e", "c", "d"}},
		{"until is exclusive", Selection{Until: readerAt(7200)}, []string{"a", "f", "g", "h", "b", "e"}},
		{"window", Selection{Since: readerAt(21), Until: readerAt(7201)}, []string{"g", "h", "b", "e", "c"}},
		{"arms", Selection{Arms: []string{"baseline"}}, []string{"c", "d"}},
		{"tasks", Selection{Tasks: []string{"t2"}}, []string{"g", "b", "d"}},
		{"arm and task", Selection{Arms: []string{"cam"}, Tasks: []string{"t2", "t1"}}, []string{"a", "f", "g", "h", "b"}},
		{"experiment keeps its own and the unlabelled", Selection{Experiment: "x1"}, []string{"a", "f", "e", "c", "d"}},
		{"experiment nobody records", Selection{Experiment: "x9"}, []string{"e", "c", "d"}},
		{"labelled: its own only", Selection{Experiment: "x2", Labelled: true}, []string{"g", "h", "b"}},
		{"labelled: nobody's", Selection{Experiment: "x9", Labelled: true}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, sum := streamCollect(t, src, ReadOptions{Select: tc.sel})
			var got []string
			for _, ep := range b.Episodes {
				got = append(got, ep.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("selected %v, want %v", got, tc.want)
			}
			if sum.Unselected != 8-len(tc.want) {
				t.Fatalf("unselected %d, want %d", sum.Unselected, 8-len(tc.want))
			}
			if rb, err := Read(context.Background(), src); err != nil || episodeOf(rb, "f").Experiment != "x1" || episodeOf(rb, "h").Experiment != "x2" {
				t.Fatalf("Read: f records %q, h %q (%v); want x1 (its episode event's) and x2 (its reward's)",
					episodeOf(rb, "f").Experiment, episodeOf(rb, "h").Experiment, err)
			}
		})
	}
}

func TestSelectionValidate(t *testing.T) {
	err := Selection{Since: readerAt(10), Until: readerAt(10), Late: -time.Second}.Validate()
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("not before until")) || !bytes.Contains([]byte(err.Error()), []byte("negative")) {
		t.Fatalf("want both problems, got %v", err)
	}
	if _, err := Episodes(context.Background(), readerSource{}, ReadOptions{Select: Selection{Late: -1}}, nil); err == nil {
		t.Fatal("Episodes accepted an invalid selection")
	}
}

// A windowed read of a time-partitioned file buffer: 30 days, three episodes a
// day, each batch written in the hour its events happened. One day's window reads
// its day plus Late, delivers exactly the episodes that started that day (with
// their late rewards), and leaves out an episode that started the evening before.
func TestEpisodesFileWindow(t *testing.T) {
	dir := t.TempDir()
	sink := fileNewSink(t, dir, FileOptions{Writer: "w"})
	t0 := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	write := func(at time.Time, evs ...any) {
		sink.now = func() time.Time { return at }
		fileWrite(t, sink, readerEncode(t, evs...))
	}
	for day := range 30 {
		for k := range 3 {
			id := fmt.Sprintf("d%02d-%d", day, k)
			start := t0.Add(time.Duration(day)*24*time.Hour + time.Duration(k*8+1)*time.Hour)
			ep := readerEpisode(id, "t", 0)
			ep.StartedAt = start
			st := readerStep(id, 0, 0, "user:hi")
			st.At = start.Add(time.Minute)
			rw := readerReward(id, 1, 0, nil, "")
			rw.At = start.Add(5 * time.Hour) // the day's last episode is rewarded after midnight
			write(start, ep)
			write(st.At, st)
			write(rw.At, rw)
		}
	}
	// Started the evening before the window, a step inside it.
	early := readerEpisode("early", "t", 0)
	early.StartedAt = t0.Add(9*24*time.Hour - time.Hour)
	late := readerStep("early", 3, 0, "user:still here")
	late.At = t0.Add(9*24*time.Hour + 30*time.Minute)
	write(early.StartedAt, early)
	write(late.At, late)
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}

	src := NewFileSource(dir)
	total, err := src.Size(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sel := Selection{Since: t0.Add(9 * 24 * time.Hour), Until: t0.Add(10 * 24 * time.Hour)}
	var last Progress
	b, sum := streamCollect(t, src, ReadOptions{Select: sel, Progress: func(p Progress) { last = p }})
	var ids []string
	for _, ep := range b.Episodes {
		ids = append(ids, ep.ID)
		if ep.Reward == nil || ep.Steps != 1 {
			t.Errorf("episode %s lost its step or its late reward: %+v", ep.ID, ep)
		}
	}
	if !slices.Equal(ids, []string{"d09-0", "d09-1", "d09-2"}) {
		t.Fatalf("window selected %v", ids)
	}
	if sum.Partial != 1 {
		t.Fatalf("partial %d, want 1 (the evening-before episode)", sum.Partial)
	}
	// One day plus six hours of Late, of thirty days (plus the early episode's hour).
	if sum.Bytes*20 > total || last.TotalBytes == 0 || last.TotalBytes >= total {
		t.Fatalf("a one-day window read %d of %d bytes (announced %d)", sum.Bytes, total, last.TotalBytes)
	}
	// The whole buffer read without a window has them all.
	if _, all := streamCollect(t, src, ReadOptions{}); all.Episodes != 91 || all.Partial != 0 {
		t.Fatalf("unwindowed read: %+v", all)
	}
}

// streamCancelSource cancels the read half way and keeps going, as a slow source
// would until it next checks its context.
type streamCancelSource struct {
	lines  readerSource
	cancel context.CancelFunc
}

func (s streamCancelSource) Scan(ctx context.Context, fn func([]byte) error) error {
	for i, l := range s.lines {
		if i == len(s.lines)/2 {
			s.cancel()
		}
		if err := fn(l); err != nil {
			return err
		}
	}
	return nil
}

func TestEpisodesCancelRemovesSpill(t *testing.T) {
	lines := readerSource(streamTauLines(t))
	for _, name := range []string{"cancelled scan", "fn error"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var src Source = lines
			boom := errors.New("boom")
			fn := func(*Episode) error { return nil }
			if name == "cancelled scan" {
				src = streamCancelSource{lines, cancel}
			} else {
				fn = func(*Episode) error { return boom }
			}
			_, err := Episodes(ctx, src, ReadOptions{SpillDir: dir, MemoryBytes: 1}, fn)
			if name == "cancelled scan" && !errors.Is(err, context.Canceled) || name == "fn error" && !errors.Is(err, boom) {
				t.Fatalf("err %v", err)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Fatalf("spill directory left behind: %v", ents)
			}
		})
	}
}

// streamSizedSource is a Source that knows its size.
type streamSizedSource struct{ readerSource }

func (s streamSizedSource) Size(context.Context) (int64, error) {
	var n int64
	for _, l := range s.readerSource {
		n += int64(len(l)) + 1
	}
	return n, nil
}

func TestEpisodesProgress(t *testing.T) {
	t.Parallel() // its own directories and data: it overlaps the package's other heavy tests
	lines := streamTauLines(t)
	src := streamSizedSource{readerSource(lines)}
	total, _ := src.Size(context.Background())
	clock := time.Unix(0, 0)
	var got []Progress
	o := ReadOptions{
		Progress: func(p Progress) { got = append(got, p) },
		now: func() time.Time { // every look at the clock is 10 ms later
			clock = clock.Add(10 * time.Millisecond)
			return clock
		},
	}
	if _, sum := streamCollect(t, src, o); sum.Bytes != total {
		t.Fatalf("read %d bytes of %d", sum.Bytes, total)
	}
	if len(got) < 2 {
		t.Fatalf("%d progress reports", len(got))
	}
	last := got[len(got)-1]
	if !last.Done || last.Events != int64(len(lines)) || last.Bytes != total || last.TotalBytes != total || last.Episodes != 200 {
		t.Fatalf("last report %+v", last)
	}
	for i, p := range got[:len(got)-1] {
		if p.Done || i > 0 && p.Elapsed-got[i-1].Elapsed < progressEvery {
			t.Fatalf("report %d: %+v after %+v", i, p, got[max(i-1, 0)])
		}
	}
	mid := Progress{Bytes: 100, TotalBytes: 400, Elapsed: time.Second}
	if mid.Rate() != 100 || mid.ETA() != 3*time.Second {
		t.Fatalf("rate %v eta %v", mid.Rate(), mid.ETA())
	}
}

// FuzzLightStep: whatever lightStep accepts, Decode decodes as a step to the same
// values (it may refuse more: those lines go to Decode), and fullStep decodes to
// what stepOf keeps of Decode's step, messages and answer included.
func FuzzLightStep(f *testing.F) {
	for _, l := range readerEncode(f, readerStep("e1", 2, 5, "user:hi", "tool:ok"), readerFailed(readerStep("e1", 0, 1, "user:x"), 500, "boom"),
		readerReward("e1", 1, 3, nil, ""), readerEpisode("e1", "t", 0)) {
		f.Add(l)
	}
	for _, s := range []string{
		`{"v":1,"type":"step","id":"a","episode_id":"e","turn":1,"Turn":2,"status":200,"at":"2026-01-01T00:00:00Z"}`,
		`{"v":1,"type":"step","id":"a","episode_id":"e","turn":1,"turn":2,"status":200}`,
		`{"v":1,"type":"step","id":"a","episode_id":"e","turn":1.0,"status":200}`,
		`{"v":1,"type":"step","id":"a\u0062","episode_id":"e","turn":1,"status":200}`,
		`{"v":1,"type":"step","episode_id":"e","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"status":200}`,
		`{"v":1,"type":"step","episode_id":"e","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"a":1}}}]}],"status":200}`,
		`{"v":1,"type":"step","episode_id":"e","response":{"role":1},"status":200}`,
		`{"v":1,"type":"step","episode_id":"e","timing_ms":{"augment":1e400},"status":200}`,
		`{"v":1,"type":"step","episode_id":"e","usage":{"input_tokens":9223372036854775808},"status":200}`,
		`{"v":1,"type":"step","episode_id":"e","at":"2026-13-01T00:00:00Z"}`,
		`{"v":1,"type":"step","episode_id":"e","\u212Aurn":3}`,
		`{"v":1,"type":"step","episode_id":"e","messages":[],"response":{"role":"assistant","content":null,"tool_calls":[]},"status":200}`,
		`{"v":1,"type":"step","episode_id":"e","messages":[{"role":"user","content":"a\n\"b\" \ud83d\ude00 \ud800 \u00e9","name":null},{"role":"tool","tool_call_id":"c\u0031","content":"ÿþ"}],"status":200}`,
		`{"v":1,"type":"step","episode_id":"e","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},{"id":"d","custom":{"name":"p","input":"x"}}],"raw":[ {"type":"reasoning"} ,null]}],"status":200}`,
		`{"v":1,"type":"step","episode_id":"e","messages":[{"role":"user","content":"x","Content":"y"}],"status":200}`,
		`{"v":1,"type":"step","episode_id":"e","messages":[null],"status":200}`,
		`{"v":1,"type":"step","episode_id":"e","messages":[{"role":"user","content":"failed"}],"status":500,"error":"boom"}`,
	} {
		f.Add([]byte(s))
	}
	f.Add([]byte("{\"v\":1,\"type\":\"step\",\"episode_id\":\"e\",\"messages\":[{\"role\":\"user\",\"content\":\"bad \xff\xfe utf-8\"}],\"status\":200}"))
	f.Fuzz(func(t *testing.T, line []byte) {
		s, id, ep, ok := lightStep(line)
		if !ok {
			return
		}
		ev, err := Decode(line)
		if err != nil {
			t.Fatalf("lightStep accepted a line Decode refuses (%v): %s", err, line)
		}
		st, isStep := ev.(*StepEvent)
		if !isStep {
			t.Fatalf("lightStep accepted a %T", ev)
		}
		want := stepOf(st)
		want.messages, want.response = nil, nil
		if !reflect.DeepEqual(s, want) || id != st.ID || ep != st.EpisodeID {
			t.Fatalf("lightStep %+v %q %q, Decode %+v %q %q", s, id, ep, want, st.ID, st.EpisodeID)
		}
		back, err := decodeLightStep(appendLightStep(nil, s))
		if err != nil || !reflect.DeepEqual(back, s) {
			t.Fatalf("spilled form: %+v, %v; want %+v", back, err, s)
		}
		full, ok := fullStep(line)
		if want := stepOf(st); !ok || !reflect.DeepEqual(full, want) {
			t.Fatalf("fullStep %+v (ok %v), Decode %+v", full, ok, want)
		}
	})
}

// TestCollectSameAsRead: Collect's Buffer is Read's, episodes in Buffer order and
// the counts on it, whatever the read's memory.
func TestCollectSameAsRead(t *testing.T) {
	t.Parallel() // its own directories and data: it overlaps the package's other heavy tests
	dir := streamMessyBuffer(t, 1)
	want, err := Read(context.Background(), NewFileSource(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []ReadOptions{{}, {MemoryBytes: 1, Workers: 4}} {
		got, sum, err := Collect(context.Background(), NewFileSource(dir), o)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Episodes) != len(want.Episodes) || sum.Episodes != len(want.Episodes) {
			t.Fatalf("%d episodes (summary %d), want %d", len(got.Episodes), sum.Episodes, len(want.Episodes))
		}
		for i := range want.Episodes {
			if got.Episodes[i].ID != want.Episodes[i].ID {
				t.Fatalf("episode %d is %s, want %s (Buffer order)", i, got.Episodes[i].ID, want.Episodes[i].ID)
			}
		}
		if got.Skipped != sum.Skipped || got.Duplicates != want.Duplicates || got.Orphans != want.Orphans || len(got.Learn) != len(want.Learn) {
			t.Errorf("counts skipped %d dup %d orphans %d learn %d, want %d %d %d %d",
				got.Skipped, got.Duplicates, got.Orphans, len(got.Learn), sum.Skipped, want.Duplicates, want.Orphans, len(want.Learn))
		}
	}
}
