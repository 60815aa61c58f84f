package replay

import (
	"fmt"
	"io"
	"time"
)

// Progress is where a long read is. The scan phase moves Events and Bytes; the
// assembly phase (episodes back from the spill) moves Episodes.
type Progress struct {
	Events     int64         // lines scanned
	Bytes      int64         // bytes of those lines, newlines included
	TotalBytes int64         // what the whole scan reads, when the source is a Sizer; else 0
	Episodes   int64         // episodes delivered so far
	Elapsed    time.Duration // since the read started
	Done       bool          // the last report of a read that completed
}

// Rate is the scan's throughput in bytes per second.
func (p Progress) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Bytes) / p.Elapsed.Seconds()
}

// ETA estimates the time left of the scan from its rate so far; 0 when unknown
// (no total, nothing read yet) or when the scan is done.
func (p Progress) ETA() time.Duration {
	r := p.Rate()
	if p.TotalBytes <= 0 || r <= 0 || p.Bytes >= p.TotalBytes {
		return 0
	}
	return time.Duration(float64(p.TotalBytes-p.Bytes) / r * float64(time.Second))
}

// progressEvery is the least time between two progress reports: a few a second
// is what a terminal line can show.
const progressEvery = 250 * time.Millisecond

// progress throttles a Progress callback. It is used from one goroutine.
type progress struct {
	fn    func(Progress)
	now   func() time.Time
	start time.Time
	last  time.Time
	p     Progress
}

func newProgress(fn func(Progress), now func() time.Time, total int64) *progress {
	if now == nil {
		now = time.Now
	}
	t := now()
	return &progress{fn: fn, now: now, start: t, last: t, p: Progress{TotalBytes: total}}
}

// tick reports if progressEvery has passed since the last report.
func (g *progress) tick() {
	if g.fn == nil {
		return
	}
	t := g.now()
	if t.Sub(g.last) < progressEvery {
		return
	}
	g.last = t
	g.p.Elapsed = t.Sub(g.start)
	g.fn(g.p)
}

// done sends the final report.
func (g *progress) done() {
	if g.fn == nil {
		return
	}
	g.p.Elapsed, g.p.Done = g.now().Sub(g.start), true
	g.fn(g.p)
}

// ProgressLines reports a long read on w, each line prefixed with cmd: nothing for a read shorter than after,
// then a line every few seconds and one at the end, so a log keeps the story.
func ProgressLines(w io.Writer, cmd string, after time.Duration) func(Progress) {
	var next time.Duration = after
	shown := false
	return func(p Progress) {
		if !p.Done && p.Elapsed < next {
			return
		}
		if p.Done && !shown {
			return
		}
		shown = true
		next = p.Elapsed + 5*time.Second
		line := fmt.Sprintf("%s: read %s", cmd, formatBytes(p.Bytes))
		if p.TotalBytes > 0 {
			line += fmt.Sprintf(" of %s (%.0f%%)", formatBytes(p.TotalBytes), 100*float64(p.Bytes)/float64(p.TotalBytes))
		}
		line += fmt.Sprintf(", %d events, %s/s", p.Events, formatBytes(int64(p.Rate())))
		if p.Episodes > 0 {
			line += fmt.Sprintf(", %d episodes out", p.Episodes)
		}
		switch eta := p.ETA(); {
		case p.Done:
			line += fmt.Sprintf(", done in %s", p.Elapsed.Round(time.Millisecond))
		case eta > 0:
			line += fmt.Sprintf(", about %s left", eta.Round(time.Second))
		}
		fmt.Fprintln(w, line)
	}
}

// formatBytes is n in B, kB, MB or GB (powers of 1000, as disks and rates are told).
func formatBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
