package lake

import "runtime"

// runtimeMemStats samples the heap for memory benchmarks.
type runtimeMemStats struct{ m runtime.MemStats }

// heapLive is the heap in use after a collection: what the code holds, not garbage
// waiting to be collected.
func (s *runtimeMemStats) heapLive() uint64 {
	runtime.GC()
	runtime.ReadMemStats(&s.m)
	return s.m.HeapInuse
}
