package replay

import (
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
