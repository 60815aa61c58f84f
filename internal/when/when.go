// Package when reads a point in time as people give it on a command line: a time, a
// date or an hour, or an age before now (--since/--until of the commands that read a
// replay buffer).
package when

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Parse reads a --since/--until value: an RFC 3339 time (2026-11-24T08:00:00Z),
// a UTC date or hour (2026-11-24, 2026-11-24T08), or an age before now (90m, 36h,
// 7d: Go durations, plus d for days).
func Parse(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, fmt.Errorf("empty")
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02T15", time.DateOnly} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(d, 64)
		if err != nil || n < 0 || n > 36500 {
			return time.Time{}, fmt.Errorf("want a time (2026-11-24, 2026-11-24T08, RFC 3339) or an age (90m, 36h, 7d)")
		}
		return now.Add(-time.Duration(n * 24 * float64(time.Hour))).UTC(), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("want a time (2026-11-24, 2026-11-24T08, RFC 3339) or an age (90m, 36h, 7d)")
	}
	return now.Add(-d).UTC(), nil
}
