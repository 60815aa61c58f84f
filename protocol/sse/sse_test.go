package sse

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

type event struct{ name, data string }

func read(t *testing.T, stream string, chunk func() int) ([]event, *Reader) {
	t.Helper()
	var got []event
	r := &Reader{Event: func(name, data []byte) { got = append(got, event{string(name), string(data)}) }}
	b := []byte(stream)
	for len(b) > 0 {
		n := min(max(chunk(), 1), len(b))
		_, _ = r.Write(b[:n])
		b = b[n:]
	}
	return got, r
}

func TestFramingIsChunkingIndependent(t *testing.T) {
	stream := "\uFEFFevent: message_start\r\ndata: {\"a\":1}\r\n\r\n: keep-alive\n\ndata: line1\ndata: line2\n\nevent: x\rdata:no-space\r\rid: 7\nretry: 10\ndata: last\n\n"
	want := []event{{"message_start", `{"a":1}`}, {"", "line1\nline2"}, {"x", "no-space"}, {"", "last"}}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, chunk := range []func() int{func() int { return len(stream) }, func() int { return 1 }, func() int { return rng.IntN(7) + 1 }} {
		got, _ := read(t, stream, chunk)
		if len(got) != len(want) {
			t.Fatalf("events %q, want %q", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("event %d = %q, want %q", i, got[i], want[i])
			}
		}
	}
}

func TestBoundedMemory(t *testing.T) {
	huge := "data: " + strings.Repeat("x", MaxLine) + "\n\n"
	_, r := read(t, "data: ok\n\n"+huge+"data: lost\n\n", func() int { return 1 << 16 })
	if !r.Broken() || cap(r.line) > MaxLine || r.data != nil {
		t.Fatalf("past MaxLine: broken %v, line buffer %d", r.Broken(), cap(r.line))
	}
	var r2 Reader
	r2.Event = func(_, data []byte) {}
	big := "data: " + strings.Repeat("z", 1<<20) + "\n\n"
	for i := 0; i < len(big); i += 1000 {
		_, _ = r2.Write([]byte(big[i:min(i+1000, len(big))]))
	}
	if cap(r2.line) > keepBuf || cap(r2.data) > keepBuf {
		t.Fatalf("a 1 MiB event pinned its buffers: line %d, data %d", cap(r2.line), cap(r2.data))
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("event: a\ndata: b\n\ndata: c\r\n\r\n"), uint8(3))
	f.Fuzz(func(t *testing.T, stream []byte, step uint8) {
		whole, _ := read(t, string(stream), func() int { return len(stream) })
		pieces, _ := read(t, string(stream), func() int { return int(step%16) + 1 })
		if len(whole) != len(pieces) {
			t.Fatalf("chunking changed the events: %d vs %d", len(whole), len(pieces))
		}
		for i := range whole {
			if whole[i] != pieces[i] || bytes.Contains([]byte(whole[i].name), []byte("\n")) {
				t.Fatalf("event %d: %q vs %q", i, whole[i], pieces[i])
			}
		}
	})
}
