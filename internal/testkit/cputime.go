package testkit

import (
	"testing"
	"time"
)

// CPUPerOp runs fn b.N times and reports, besides ns/op, "cpu-ns/op": the process's
// CPU time (user and system, the garbage collector's included) per call. On a shared
// machine wall time per op swings with the neighbours' load; the CPU the process
// spent does much less, so before/after comparisons read this figure.
func CPUPerOp(b *testing.B, fn func()) {
	b.Helper()
	b.ReportAllocs()
	b.ResetTimer()
	c0 := processCPU()
	for range b.N {
		fn()
	}
	c1 := processCPU()
	b.StopTimer()
	if c0 >= 0 && c1 >= 0 {
		b.ReportMetric(float64(c1-c0)/float64(b.N), "cpu-ns/op")
	}
}

// cpuUnknown is processCPU where the platform has no getrusage.
const cpuUnknown = time.Duration(-1)
