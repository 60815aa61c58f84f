package augment

import (
	"sync"
	"testing"
	"time"
)

// TestLatency: an observation lands in the first bucket whose bound it does not
// exceed (a bound is inclusive, as Prometheus's le), buckets are cumulative, and one
// beyond the last bound is counted but in no finite bucket.
func TestLatency(t *testing.T) {
	cases := []struct {
		name  string
		obs   []time.Duration
		count uint64
		sum   time.Duration
		cum   map[int]uint64 // bucket index → cumulative count
	}{
		{"none", nil, 0, 0, map[int]uint64{0: 0, 15: 0}},
		{"zero and exactly the first bound", []time.Duration{0, 100 * time.Microsecond}, 2, 100 * time.Microsecond, map[int]uint64{0: 2, 15: 2}},
		{"just above the first bound", []time.Duration{101 * time.Microsecond}, 1, 101 * time.Microsecond, map[int]uint64{0: 0, 1: 1}},
		{"200 ms: bucket (152.6 ms, 381.5 ms]", []time.Duration{200 * time.Millisecond, 200 * time.Millisecond}, 2, 400 * time.Millisecond,
			map[int]uint64{7: 0, 8: 0, 9: 2, 15: 2}},
		{"beyond the last bound: +Inf only", []time.Duration{time.Hour, time.Millisecond}, 2, time.Hour + time.Millisecond,
			map[int]uint64{2: 0, 3: 1, 15: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var l Latency
			for _, d := range c.obs {
				l.Observe(d)
			}
			s := l.Snapshot()
			if s.Count != c.count || s.Sum != c.sum || len(s.Buckets) != 16 {
				t.Fatalf("count %d sum %v buckets %d, want %d %v 16", s.Count, s.Sum, len(s.Buckets), c.count, c.sum)
			}
			for i, want := range c.cum {
				if s.Buckets[i].Count != want {
					t.Errorf("bucket %d (le %g s): %d, want %d", i, s.Buckets[i].UpperBound, s.Buckets[i].Count, want)
				}
			}
			for i := 1; i < len(s.Buckets); i++ {
				if s.Buckets[i].UpperBound <= s.Buckets[i-1].UpperBound || s.Buckets[i].Count < s.Buckets[i-1].Count {
					t.Fatalf("buckets not ascending and cumulative: %+v", s.Buckets)
				}
			}
		})
	}
}

// TestLatencyConcurrent: observations from many goroutines are all counted (run with
// -race: no lock, no race).
func TestLatencyConcurrent(t *testing.T) {
	var l Latency
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				l.Observe(time.Duration(g*1000+i) * time.Microsecond)
			}
		})
	}
	wg.Go(func() {
		for range 100 {
			if s := l.Snapshot(); s.Count < s.Buckets[len(s.Buckets)-1].Count {
				t.Error("count below the last bucket")
			}
		}
	})
	wg.Wait()
	if s := l.Snapshot(); s.Count != 8000 {
		t.Fatalf("count %d, want 8000", s.Count)
	}
}
