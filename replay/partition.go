package replay

import (
	"strconv"
	"strings"
	"time"
)

// Time partitions of the file and S3 sinks: a batch goes under
//
//	dt=YYYY-MM-DD/hr=HH/
//
// (UTC) of the time the writer writes it, so that a reader of a time window lists
// and opens only the hours that overlap it. Data written before partitioning (files
// or keys directly under the root) and the S3 sink's earlier YYYY/MM/DD/HH/ keys are
// still read; the earlier S3 layout is windowed as well.
const (
	partDay  = "dt"
	partHour = "hr"
)

// partitionPath is the partition of a batch written at t: "dt=YYYY-MM-DD/hr=HH".
func partitionPath(t time.Time) string {
	t = t.UTC()
	return partDay + "=" + t.Format(time.DateOnly) + "/" + partHour + "=" + twoDigits(t.Hour())
}

func twoDigits(n int) string {
	if n < 10 {
		return "0" + strconv.Itoa(n)
	}
	return strconv.Itoa(n)
}

// parsePartition returns the hours a partition directory covers, from its path
// segments below the root: ["dt=2026-03-04"] is that day, ["dt=2026-03-04",
// "hr=05"] that hour; the S3 sink's earlier ["2026"], ["2026","03"],
// ["2026","03","04"], ["2026","03","04","05"] likewise. ok is false for anything
// else (no segment at all, an unknown name, a value that is not a date, an hour
// without its day), which readers treat as unpartitioned data.
func parsePartition(segs []string) (start, end time.Time, ok bool) {
	if len(segs) == 0 {
		return time.Time{}, time.Time{}, false
	}
	if day, ok := strings.CutPrefix(segs[0], partDay+"="); ok {
		d, err := time.Parse(time.DateOnly, day)
		if err != nil || d.Format(time.DateOnly) != day {
			return time.Time{}, time.Time{}, false
		}
		switch len(segs) {
		case 1:
			return d, d.AddDate(0, 0, 1), true
		case 2:
			hr, ok := strings.CutPrefix(segs[1], partHour+"=")
			h, valid := parseFixed(hr, 2, 0, 23)
			if !ok || !valid {
				return time.Time{}, time.Time{}, false
			}
			start := d.Add(time.Duration(h) * time.Hour)
			return start, start.Add(time.Hour), true
		}
		return time.Time{}, time.Time{}, false
	}
	return parseLegacyPartition(segs)
}

// parseLegacyPartition reads the S3 sink's keys before dt=/hr=: YYYY/MM/DD/HH.
func parseLegacyPartition(segs []string) (start, end time.Time, ok bool) {
	if len(segs) > 4 {
		return time.Time{}, time.Time{}, false
	}
	var v [4]int
	widths, lows, highs := [4]int{4, 2, 2, 2}, [4]int{0, 1, 1, 0}, [4]int{9999, 12, 31, 23}
	for i, s := range segs {
		n, valid := parseFixed(s, widths[i], lows[i], highs[i])
		if !valid {
			return time.Time{}, time.Time{}, false
		}
		v[i] = n
	}
	month, day := max(v[1], 1), max(v[2], 1)
	start = time.Date(v[0], time.Month(month), day, v[3], 0, 0, 0, time.UTC)
	if start.Day() != day { // 2026/02/31
		return time.Time{}, time.Time{}, false
	}
	switch len(segs) {
	case 1:
		return start, start.AddDate(1, 0, 0), true
	case 2:
		return start, start.AddDate(0, 1, 0), true
	case 3:
		return start, start.AddDate(0, 0, 1), true
	default:
		return start, start.Add(time.Hour), true
	}
}

// parseFixed parses exactly width ASCII digits into [lo, hi].
func parseFixed(s string, width, lo, hi int) (int, bool) {
	if len(s) != width {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, lo <= n && n <= hi
}

// window is a time range [from, to); a zero bound is open.
type window struct{ from, to time.Time }

func (w window) all() bool { return w.from.IsZero() && w.to.IsZero() }

// overlaps reports whether [start, end) meets the window.
func (w window) overlaps(start, end time.Time) bool {
	return (w.to.IsZero() || start.Before(w.to)) && (w.from.IsZero() || end.After(w.from))
}

// keep reports whether data under the partition segs is read for the window:
// unpartitioned data always is, since nothing says when it was written.
func (w window) keep(segs []string) bool {
	if w.all() {
		return true
	}
	start, end, ok := parsePartition(segs)
	return !ok || w.overlaps(start, end)
}
