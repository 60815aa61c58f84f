package trainer

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Stats is where a reflection run stands.
type Stats struct {
	Jobs     int   // jobs planned
	Resumed  int   // of which already in the output when the run started
	Done     int   // written by this run
	Failed   int   // failed this run (logged; a rerun retries them)
	Calls    int   // model calls
	Retries  int   // model calls retried
	Tokens   Usage // this run's
	Started  time.Time
	Finished time.Time
}

// Pending is how many jobs this run set out to do.
func (s Stats) Pending() int { return s.Jobs - s.Resumed }

// eta guesses the time left from the pace so far.
func (s Stats) eta(now time.Time) (time.Duration, bool) {
	n := s.Done + s.Failed
	if n == 0 {
		return 0, false
	}
	per := now.Sub(s.Started) / time.Duration(n)
	return per * time.Duration(max(0, s.Pending()-n)), true
}

// Progress modes.
const (
	ProgressBar   = "bar"   // one line redrawn in place (a terminal)
	ProgressLines = "lines" // one plain line per finished job (logs, CI)
	ProgressOff   = "off"
)

// Progress shows a run's progress on w. Logs written through it (it is an
// io.Writer) clear the bar first, so that the two never garble each other.
type Progress struct {
	mu    sync.Mutex
	w     io.Writer
	mode  string
	shown bool // a bar is on screen
	last  time.Time
	stats Stats
	now   func() time.Time
}

// NewProgress shows progress on w in mode ProgressBar, ProgressLines or ProgressOff;
// "" or "auto" picks a bar on a terminal and lines elsewhere.
func NewProgress(w io.Writer, mode string) *Progress {
	if mode == "" || mode == "auto" {
		mode = ProgressLines
		if IsTerminal(w) {
			mode = ProgressBar
		}
	}
	return &Progress{w: w, mode: mode, now: time.Now}
}

// IsTerminal reports whether w is a character device (and TERM is not dumb).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Mode is the mode in use.
func (p *Progress) Mode() string { return p.mode }

// Write passes a log line through, above the bar.
func (p *Progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == ProgressBar && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
	n, err := p.w.Write(b)
	if p.mode == ProgressBar && p.shown {
		fmt.Fprint(p.w, p.bar(p.stats))
	}
	return n, err
}

// update records the stats; event, when set, is a job that just finished.
func (p *Progress) update(s Stats, event string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats = s
	switch p.mode {
	case ProgressBar:
		now := p.now()
		if event == "" && now.Sub(p.last) < 100*time.Millisecond {
			return
		}
		p.last = now
		fmt.Fprint(p.w, "\r\033[K"+p.bar(s))
		p.shown = true
	case ProgressLines:
		if event != "" {
			fmt.Fprintf(p.w, "%s  %s\n", p.counters(s), event)
		}
	}
}

// finish ends the bar's line.
func (p *Progress) finish(s Stats) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats = s
	if p.mode == ProgressBar {
		fmt.Fprint(p.w, "\r\033[K"+p.bar(s)+"\n")
		p.shown = false
	}
}

const barWidth = 24

func (p *Progress) bar(s Stats) string {
	n, total := s.Done+s.Failed, s.Pending()
	filled := barWidth
	if total > 0 {
		filled = barWidth * n / total
	}
	return "[" + strings.Repeat("█", filled) + strings.Repeat("░", barWidth-filled) + "] " + p.counters(s)
}

func (p *Progress) counters(s Stats) string {
	n, total := s.Done+s.Failed, s.Pending()
	pct := 100
	if total > 0 {
		pct = 100 * n / total
	}
	eta := "ETA --"
	if d, ok := s.eta(p.now()); ok {
		eta = "ETA " + d.Round(time.Second).String()
	}
	return fmt.Sprintf("%d/%d %3d%%  %s  tokens %s  failed %d  retries %d",
		n, total, pct, eta, FormatTokens(s.Tokens.Input+s.Tokens.Output), s.Failed, s.Retries)
}

// FormatTokens writes a token count short: 950, 12.3k, 4.56M.
func FormatTokens(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprint(n)
	case n < 1_000_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	default:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	}
}
