package replay

import (
	"testing"
	"time"
)

func TestSynthesisedTimes(t *testing.T) {
	rec := time.Date(2024, 1, 1, 0, 3, 20, 123456789, time.UTC)
	for _, tc := range []struct {
		name        string
		ep          Episode
		start, wall bool
	}{
		{"tau-bench import", Episode{StartedAt: ImportEpoch().Add(7 * time.Second), EndedAt: ImportEpoch().Add(7*time.Second + 3*time.Millisecond), Steps: 3}, true, true},
		{"recorded", Episode{StartedAt: rec, EndedAt: rec.Add(2300 * time.Millisecond), Steps: 3}, false, false},
		{"export of a recording, re-imported", Episode{StartedAt: rec, EndedAt: rec.Add(2 * time.Millisecond), Steps: 2}, false, true},
		{"whole second, other year", Episode{StartedAt: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}, false, false},
		{"no steps", Episode{StartedAt: rec, EndedAt: rec}, false, false},
	} {
		if got := SynthesisedStart(tc.ep.StartedAt); got != tc.start {
			t.Errorf("%s: SynthesisedStart = %v", tc.name, got)
		}
		if got := SynthesisedSpan(&tc.ep); got != tc.wall {
			t.Errorf("%s: SynthesisedSpan = %v", tc.name, got)
		}
	}
}
