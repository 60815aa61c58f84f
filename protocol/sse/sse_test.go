package sse

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// event is what a reader handed on: an event, or (cut) what it kept of one.
type event struct {
	name, data string // data: the head of a cut event
	cut        bool
	tail       string
	size       int64
}

// read feeds stream to a reader bounded by max (0: the default) in chunks of the
// sizes chunk gives, and returns the events and the lines Data saw.
func read(t testing.TB, stream string, bound int, chunk func() int) (got []event, lines []string, r *Reader) {
	t.Helper()
	r = &Reader{Max: bound,
		Event: func(name, data []byte) { got = append(got, event{name: string(name), data: string(data)}) },
		Oversized: func(name []byte, c Cut) {
			got = append(got, event{name: string(name), data: string(c.Head), cut: true, tail: string(c.Tail), size: c.Size})
		},
		Data: func(v []byte) { lines = append(lines, string(v)) },
	}
	b := []byte(stream)
	for len(b) > 0 {
		n := min(max(chunk(), 1), len(b))
		_, _ = r.Write(b[:n])
		b = b[n:]
	}
	return got, lines, r
}

// chunkings are the ways a test feeds a stream: whole, byte by byte, in small random
// pieces and in pieces of 64 KiB.
func chunkings(stream string) map[string]func() int {
	rng := rand.New(rand.NewPCG(1, 2))
	return map[string]func() int{
		"whole": func() int { return len(stream) }, "bytes": func() int { return 1 },
		"random": func() int { return rng.IntN(7) + 1 }, "64KiB": func() int { return 64 << 10 },
	}
}

func TestFramingIsChunkingIndependent(t *testing.T) {
	stream := "\uFEFFevent: message_start\r\ndata: {\"a\":1}\r\n\r\n: keep-alive\n\ndata: line1\ndata: line2\n\nevent: x\rdata:no-space\r\rid: 7\nretry: 10\ndata: last\n\n" +
		"event: " + strings.Repeat("n", maxName+1) + "\ndata\n\nevent\ndata:  two spaces\nlong-unknown-field: v\n\n"
	want := []event{{name: "message_start", data: `{"a":1}`}, {data: "line1\nline2"}, {name: "x", data: "no-space"}, {data: "last"},
		{data: ""}, {data: " two spaces"}}
	wantLines := []string{`{"a":1}`, "line1", "line2", "no-space", "last", "", " two spaces"}
	for how, chunk := range chunkings(stream) {
		got, lines, _ := read(t, stream, 0, chunk)
		if !equal(got, want) || strings.Join(lines, "|") != strings.Join(wantLines, "|") {
			t.Fatalf("%s: events %s (data lines %q), want %s (%q)", how, describe(got), lines, describe(want), wantLines)
		}
	}
}

// TestOversizedEvent: an event whose data outgrows Max is handed on as its head, tail
// and size, and the events after it arrive as if it had been small; its lines are not
// handed to Data.
func TestOversizedEvent(t *testing.T) {
	const max = 1000
	big := strings.Repeat("0123456789", 20<<10) // 200 KiB: past the head and tail kept
	head, tail := big[:HeadBytes], big[len(big)-TailBytes:]
	for _, c := range []struct {
		name   string
		stream string
		want   []event
		lines  []string
	}{{
		name:   "one line past the bound, then small events",
		stream: "data: before\n\nevent: response.completed\ndata: " + big + "\n\nevent: after\ndata: a\n\ndata: b\n\n",
		want: []event{{data: "before"}, {name: "response.completed", data: head, cut: true, tail: tail, size: int64(len(big))},
			{name: "after", data: "a"}, {data: "b"}},
		lines: []string{"before", "a", "b"},
	}, {
		name:   "data lines that add up past the bound",
		stream: strings.Repeat("data: "+strings.Repeat("y", 600)+"\n", 3) + "\ndata: next\n\n",
		want:   []event{{data: strings.Join([]string{strings.Repeat("y", 600), strings.Repeat("y", 600), strings.Repeat("y", 600)}, "\n"), cut: true, size: 1802}, {data: "next"}},
		// The first line was read before the event outgrew the bound.
		lines: []string{strings.Repeat("y", 600), "next"},
	}, {
		name:   "exactly the bound is read whole",
		stream: "data: " + strings.Repeat("z", max) + "\n\ndata: " + strings.Repeat("z", max+1) + "\n\n",
		want:   []event{{data: strings.Repeat("z", max)}, {data: strings.Repeat("z", max+1), cut: true, size: max + 1}},
		lines:  []string{strings.Repeat("z", max)},
	}, {
		name:   "a cut event that never ends hands nothing on",
		stream: "data: " + big,
	}} {
		for how, chunk := range chunkings(c.stream) {
			got, lines, _ := read(t, c.stream, max, chunk)
			if !equal(got, c.want) || strings.Join(lines, "|") != strings.Join(c.lines, "|") {
				t.Fatalf("%s, fed %s:\n got %s (data lines %d)\nwant %s (%d)", c.name, how, describe(got), len(lines), describe(c.want), len(c.lines))
			}
		}
	}
}

// TestBoundedMemory: what a reader holds, and allocates, is bounded by Max whatever
// the length of an event or a line.
func TestBoundedMemory(t *testing.T) {
	const max = 256 << 10
	huge := strings.Repeat("x", 32<<20)
	for _, stream := range []string{
		"data: " + huge + "\n\ndata: after\n\n",                                       // one line
		strings.Repeat("data: "+huge[:1<<20]+"\n", 32) + "\ndata: after\n\n",          // many lines
		": " + huge + "\nx-unknown" + huge + "\nevent: " + huge + "\ndata: after\n\n", // lines the reader skips
	} {
		var got []event
		r := Reader{Max: max, Event: func(_, data []byte) { got = append(got, event{data: string(data)}) }}
		b := []byte(stream)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for len(b) > 0 {
			n := min(64<<10, len(b))
			_, _ = r.Write(b[:n])
			b = b[n:]
			if cap(r.data) > max || cap(r.head) > HeadBytes || cap(r.tail) > 2*TailBytes || cap(r.field) > 2*maxField || cap(r.name) > 2*maxName {
				t.Fatalf("buffers past their bounds: data %d, head %d, tail %d, field %d, name %d", cap(r.data), cap(r.head), cap(r.tail), cap(r.field), cap(r.name))
			}
		}
		runtime.ReadMemStats(&after)
		// The data buffer grows by doubling to Max (2×), plus the head and tail.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*max {
			t.Errorf("reading %d MiB allocated %d KiB, bound %d KiB", len(stream)>>20, alloc>>10, max>>10)
		}
		if len(got) != 1 || got[0].data != "after" {
			t.Fatalf("the event after a huge one: %s", describe(got))
		}
	}
	var r2 Reader
	r2.Event = func(_, data []byte) {}
	big := "data: " + strings.Repeat("z", 1<<20) + "\n\n"
	for i := 0; i < len(big); i += 1000 {
		_, _ = r2.Write([]byte(big[i:min(i+1000, len(big))]))
	}
	if cap(r2.data) > keepBuf {
		t.Fatalf("a 1 MiB event pinned its buffer: data %d", cap(r2.data))
	}
}

// FuzzReader: the events do not depend on how the stream is chunked, and a reader
// bounded by Max hands on what an unbounded one does: each event within the bound,
// and each past it as its head, tail and length.
func FuzzReader(f *testing.F) {
	f.Add([]byte("event: a\ndata: b\n\ndata: c\r\n\r\n"), uint8(3), uint16(2))
	f.Add([]byte("\uFEFFdata: "+strings.Repeat("x", 70<<10)+"\ndata:y\r\n\r\nevent: e\rdata: z\r\r"), uint8(5), uint16(100))
	f.Fuzz(func(t *testing.T, stream []byte, step uint8, bound uint16) {
		s := string(stream)
		all, _, _ := read(t, s, 1<<30, func() int { return len(s) })
		limit := int(bound) + 1
		for _, chunk := range []func() int{func() int { return len(s) }, func() int { return int(step%16) + 1 }} {
			got, _, _ := read(t, s, limit, chunk)
			if len(got) != len(all) {
				t.Fatalf("bounded by %d: %d events, unbounded %d", limit, len(got), len(all))
			}
			for i, e := range all {
				want := e
				if len(e.data) > limit {
					rest := e.data[min(HeadBytes, len(e.data)):]
					want = event{name: e.name, data: e.data[:len(e.data)-len(rest)], cut: true, tail: rest[len(rest)-min(TailBytes, len(rest)):], size: int64(len(e.data))}
				}
				if got[i] != want || strings.Contains(got[i].name, "\n") {
					t.Fatalf("bounded by %d, event %d: %s, want %s", limit, i, describe(got[i:i+1]), describe([]event{want}))
				}
			}
		}
	})
}

func equal(a, b []event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// describe names events without printing megabytes.
func describe(evs []event) string {
	var b bytes.Buffer
	for _, e := range evs {
		b.WriteString("{" + e.name + " " + trim(e.data))
		if e.cut {
			b.WriteString(" cut tail " + trim(e.tail) + " size " + itoa(e.size))
		}
		b.WriteString("} ")
	}
	return b.String()
}

func trim(s string) string {
	if len(s) > 20 {
		return "(" + itoa(int64(len(s))) + " bytes) " + s[:20] + "…"
	}
	return s
}

func itoa(n int64) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
