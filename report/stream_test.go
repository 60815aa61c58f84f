package report

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/tidwall/sjson"

	"github.com/camproxy/camproxy/replay"
)

// streamFixtureDir writes the fixture shuffled, a fifth of it twice, with learn
// events and experiments in some rewards' metadata, into a FileSink.
func streamFixtureDir(t *testing.T) string {
	t.Helper()
	lines := fixtureLines(t)
	for i, l := range lines {
		if bytes.Contains(l, []byte(`"type":"reward"`)) && i%3 != 0 {
			var err error
			if lines[i], err = sjson.SetBytes(l, "metadata.experiment", []string{"x1", "x2"}[i%2]); err != nil {
				t.Fatal(err)
			}
		}
	}
	for v := 1; v <= 3; v++ {
		lines = append(lines, []byte(fmt.Sprintf(`{"v":1,"type":"learn","id":"l%d","experiment":"x1","action":"version","version":%d,"arm":"cam","champion":"baseline","at":"2025-03-0%dT00:00:00Z"}`, v, v, v)))
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range len(lines) / 5 {
		lines = append(lines, lines[i*3%len(lines)])
	}
	rng.Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
	dir := t.TempDir()
	sink, err := replay.NewFileSink(dir, replay.FileOptions{Writer: "fixture", SegmentBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(lines); i += 7 {
		if err := sink.Write(context.Background(), lines[i:min(i+7, len(lines))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// FromStream, spilling everything, reports exactly what New reports on Read's
// buffer: the JSON form, the text, and every arm's curve.
func TestFromStreamSameAsNew(t *testing.T) {
	dir := streamFixtureDir(t)
	src := replay.NewFileSource(dir)
	b, err := replay.Read(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{Source: "s"}, {Source: "s", Experiment: "x1"}, {Source: "s", Control: "cam"}} {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			want, err := New(b, o)
			if err != nil {
				t.Fatal(err)
			}
			got, sum, err := FromStream(context.Background(), src, replay.ReadOptions{MemoryBytes: 1, Workers: 2}, o)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Duplicates == 0 || len(sum.Learn) != 3 {
				t.Fatalf("the buffer lost its duplicates or learn events: %+v", sum)
			}
			for _, form := range []struct {
				name  string
				write func(*Report, *bytes.Buffer) error
			}{
				{"json", func(r *Report, w *bytes.Buffer) error { return r.WriteJSON(w) }},
				{"text", func(r *Report, w *bytes.Buffer) error { return r.WriteText(w) }},
			} {
				var g, w bytes.Buffer
				if err := form.write(got, &g); err != nil {
					t.Fatal(err)
				}
				if err := form.write(want, &w); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(g.Bytes(), w.Bytes()) {
					t.Fatalf("%s\n got %s\nwant %s", form.name, g.Bytes(), w.Bytes())
				}
			}
			for _, a := range want.Arms {
				if !reflect.DeepEqual(got.Series(a.Name), want.Series(a.Name)) {
					t.Fatalf("arm %s curve differs", a.Name)
				}
			}
			if want.Learning == nil {
				t.Fatal("the fixture's learn events made no learning curve")
			}
		})
	}
}

func TestFromStreamSelection(t *testing.T) {
	src := replay.NewFileSource(streamFixtureDir(t))
	r, _, err := FromStream(context.Background(), src, replay.ReadOptions{Select: replay.Selection{Arms: []string{"cam", "baseline"}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Arms) != 2 || r.Arms[0].Name != "baseline" || r.Arms[1].Name != "cam" {
		t.Fatalf("arms %+v", r.Arms)
	}
}
