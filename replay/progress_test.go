package replay

import (
	"strings"
	"testing"
	"time"
)

// TestProgressLines: a long read reports on stderr — nothing in its first seconds,
// then a line every few seconds with what is read, the rate and the time left, and
// the end; a short read says nothing.
func TestProgressLines(t *testing.T) {
	var b strings.Builder
	report := ProgressLines(&b, "replay stats", 2*time.Second)
	for _, p := range []Progress{
		{Events: 10, Bytes: 1e6, TotalBytes: 1e8, Elapsed: time.Second},
		{Events: 30, Bytes: 2.5e7, TotalBytes: 1e8, Elapsed: 2500 * time.Millisecond},
		{Events: 40, Bytes: 3e7, TotalBytes: 1e8, Elapsed: 3 * time.Second},
		{Events: 90, Bytes: 8e7, TotalBytes: 1e8, Elapsed: 8 * time.Second, Episodes: 5},
		{Events: 100, Bytes: 1e8, TotalBytes: 1e8, Elapsed: 10 * time.Second, Episodes: 9, Done: true},
	} {
		report(p)
	}
	want := "replay stats: read 25.0 MB of 100.0 MB (25%), 30 events, 10.0 MB/s, about 8s left\n" +
		"replay stats: read 80.0 MB of 100.0 MB (80%), 90 events, 10.0 MB/s, 5 episodes out, about 2s left\n" +
		"replay stats: read 100.0 MB of 100.0 MB (100%), 100 events, 10.0 MB/s, 9 episodes out, done in 10s\n"
	if b.String() != want {
		t.Errorf("progress:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	short := ProgressLines(&b, "replay stats", 2*time.Second)
	short(Progress{Events: 1, Bytes: 10, Elapsed: time.Second})
	short(Progress{Events: 2, Bytes: 20, Elapsed: 1500 * time.Millisecond, Done: true})
	if b.Len() != 0 {
		t.Errorf("a short read printed:\n%s", b.String())
	}
}
