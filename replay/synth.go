package replay

import "time"

// importEpoch is the fixed start time of imported episodes: imports must be
// byte-for-byte reproducible, so nothing may depend on the clock.
var importEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// Synthesised times. An import has no clock to take times from, so it puts them on
// a grid no recording produces: the i-th run of a tau-bench file starts at
// ImportEpoch + i seconds, and the k-th step of every imported episode is k ms after
// its start. Reports use these to draw no time axis and no wall time from them.

// ImportEpoch is the start of the first episode lake.ImportTauBench writes.
func ImportEpoch() time.Time { return importEpoch }

// SynthesisedStart reports whether a start time is one an import (package lake) made up: a
// whole second within a year of ImportEpoch. (A recorded start has nanoseconds.)
func SynthesisedStart(t time.Time) bool {
	d := t.Sub(importEpoch)
	return d >= 0 && d < 365*24*time.Hour && t.Nanosecond() == 0
}

// SynthesisedSpan reports whether an episode's steps are an import's: its last step
// exactly Steps ms after its start, as no real call takes.
func SynthesisedSpan(ep *Episode) bool {
	return ep.Steps > 0 && ep.EndedAt.Sub(ep.StartedAt) == time.Duration(ep.Steps)*time.Millisecond
}
