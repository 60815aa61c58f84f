package when

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
		bad  bool
	}{
		{in: "2026-11-20", want: time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)},
		{in: "2026-11-20T08", want: time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)},
		{in: "2026-11-20T08:15", want: time.Date(2026, 11, 20, 8, 15, 0, 0, time.UTC)},
		{in: "2026-11-20T08:15:00+02:00", want: time.Date(2026, 11, 20, 6, 15, 0, 0, time.UTC)},
		{in: "36h", want: now.Add(-36 * time.Hour)},
		{in: "90m", want: now.Add(-90 * time.Minute)},
		{in: "7d", want: now.Add(-7 * 24 * time.Hour)},
		{in: "1.5d", want: now.Add(-36 * time.Hour)},
		{in: "yesterday", bad: true},
		{in: "-3h", bad: true}, // an age is never negative: a time in the future is written as a time
		{in: "", bad: true},
		{in: "2026-13-01", bad: true},
		{in: "99999d", bad: true},
	} {
		got, err := Parse(tc.in, now)
		if tc.bad {
			if err == nil {
				t.Errorf("Parse(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"2026-11-20", "7d", "36h", "2026-11-20T08:15:00Z", "1e9d", "-0d", "NaNd"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 24, 12, 30, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Parse(s, now)
		if err == nil && got.Location() != time.UTC {
			t.Fatalf("Parse(%q) = %v: not UTC", s, got)
		}
		if err == nil && got.After(now) && !looksAbsolute(s) {
			t.Fatalf("Parse(%q) = %v: an age after now", s, got)
		}
	})
}

func looksAbsolute(s string) bool { return len(s) >= 10 && s[4] == '-' }
