package augment

import (
	"math"
	"sync/atomic"
	"time"
)

// latencyBounds are the upper bounds, in seconds, of Latency's buckets: the buckets of
// camproxy_augment_duration_seconds (100 µs × 2.5ⁿ, 16 of them), so the dashboard
// and Prometheus estimate the same percentiles.
var latencyBounds = func() [16]float64 {
	var b [16]float64
	for i := range b {
		b[i] = 0.0001 * math.Pow(2.5, float64(i))
	}
	return b
}()

// Latency is a histogram of call durations that is safe for concurrent use without
// a lock: an observation is two atomic adds. The zero value is ready.
type Latency struct {
	sum     atomic.Int64                          // nanoseconds
	buckets [len(latencyBounds) + 1]atomic.Uint64 // not cumulative; the last is +Inf
}

// Observe counts one call that took d.
func (l *Latency) Observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(latencyBounds) && s > latencyBounds[i] {
		i++
	}
	l.buckets[i].Add(1)
	l.sum.Add(int64(d))
}

// LatencySnapshot is a Latency at one moment.
type LatencySnapshot struct {
	Count   uint64
	Sum     time.Duration
	Buckets []LatencyBucket // ascending, cumulative; the +Inf bucket is Count
}

// LatencyBucket is one bucket of a LatencySnapshot: the calls that took at most
// UpperBound seconds.
type LatencyBucket struct {
	UpperBound float64 // seconds
	Count      uint64  // cumulative
}

// Snapshot reads the histogram. Count is the buckets' total, so the two always
// agree; an observation concurrent with the read may be in Sum and not yet counted.
func (l *Latency) Snapshot() LatencySnapshot {
	s := LatencySnapshot{Sum: time.Duration(l.sum.Load()), Buckets: make([]LatencyBucket, len(latencyBounds))}
	var cum uint64
	for i, ub := range latencyBounds {
		cum += l.buckets[i].Load()
		s.Buckets[i] = LatencyBucket{UpperBound: ub, Count: cum}
	}
	s.Count = cum + l.buckets[len(latencyBounds)].Load()
	return s
}
