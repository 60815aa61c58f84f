package proxy

import (
	"math"
	"runtime/metrics"
	"sync"
	"time"
)

// schedLatency is the Go scheduler's histogram of how long goroutines that were ready
// to run waited for a core: the runtime's own measure of a CPU that cannot keep up
// (a saturated box, or a container throttled to its CPU quota).
const schedLatency = "/sched/latencies:seconds"

// cpuWaiter reads schedLatency: each wait returns the 90th percentile of the waits
// since its previous call.
type cpuWaiter struct {
	mu     sync.Mutex
	sample []metrics.Sample
	prev   []uint64
}

// newCPUWait returns the admission limit's default measure of the CPU (Options.CPUWait).
func newCPUWait() func() time.Duration {
	w := &cpuWaiter{sample: []metrics.Sample{{Name: schedLatency}}}
	w.wait() // the first interval starts now
	return w.wait
}

func (w *cpuWaiter) wait() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	metrics.Read(w.sample)
	v := w.sample[0].Value
	if v.Kind() != metrics.KindFloat64Histogram {
		return 0 // not this runtime's: never adapts
	}
	h := v.Float64Histogram()
	if len(w.prev) != len(h.Counts) {
		w.prev = make([]uint64, len(h.Counts))
		copy(w.prev, h.Counts)
		return 0
	}
	return quantile(h.Buckets, h.Counts, w.prev, 0.9)
}

// quantile is the upper bound of the bucket holding the q quantile of the counts
// added since prev (which it updates to counts); 0 when none were added.
func quantile(buckets []float64, counts, prev []uint64, q float64) time.Duration {
	var total uint64
	for i, c := range counts {
		total += c - prev[i]
	}
	if total == 0 {
		return 0
	}
	rank := max(1, uint64(math.Ceil(q*float64(total))))
	var seen uint64
	at := -1
	for i, c := range counts {
		seen += c - prev[i]
		prev[i] = c
		if at < 0 && seen >= rank {
			at = i
		}
	}
	upper := buckets[at+1] // bucket i is [buckets[i], buckets[i+1])
	if upper > 3600 {      // the last bucket is open-ended (+Inf)
		upper = buckets[at]
	}
	return time.Duration(upper * float64(time.Second))
}

func cpuWaitOr(f func() time.Duration) func() time.Duration {
	if f != nil {
		return f
	}
	return newCPUWait()
}
