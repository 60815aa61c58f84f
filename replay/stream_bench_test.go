package replay

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// benchFleet is a Source of n episodes synthesised from the tau-bench trajectories:
// each run's events again under a new episode id, one of three arms, a start spread
// over 30 days. It generates lines from templates as it scans (no file: a million
// episodes is ~21 GB), so what is measured is the reader, not a disk.
type benchFleet struct {
	n    int
	runs []benchRun
}

// benchRun is one tau-bench run's event lines with fixed-width placeholders and
// where they are.
type benchRun struct {
	lines [][]byte
	ep    [][]int // offsets of the 10 digits of "ep-0000000000"
	day   [][]int // offsets of "DDTHH" of "2026-01-01T00:"
	arm   [][]int // offset of the letter of "arm-a"
}

func newBenchFleet(t testing.TB, n int) *benchFleet {
	lines := streamTauLines(t)
	f := &benchFleet{n: n}
	byEp := map[string]int{}
	for i, l := range lines {
		id := gjson.GetBytes(l, "episode_id").String()
		r, ok := byEp[id]
		if !ok {
			r = len(f.runs)
			byEp[id] = r
			f.runs = append(f.runs, benchRun{})
		}
		run := &f.runs[r]
		set := func(path string, v any) {
			var err error
			if l, err = sjson.SetBytes(l, path, v); err != nil {
				t.Fatal(err)
			}
		}
		set("episode_id", "ep-0000000000")
		set("id", fmt.Sprintf("ep-0000000000-%d", i))
		at := fmt.Sprintf("2026-01-01T00:%02d:%02d.000Z", len(run.lines)%60, i%60)
		switch gjson.GetBytes(l, "type").String() {
		case TypeEpisode:
			set("started_at", "2026-01-01T00:00:00.000Z")
			set("arm", "arm-a")
		default:
			set("at", at)
		}
		run.lines = append(run.lines, l)
		run.ep = append(run.ep, benchOffsets(l, "ep-0000000000", 3))
		run.day = append(run.day, benchOffsets(l, "2026-01-01T00:", 8))
		run.arm = append(run.arm, benchOffsets(l, `"arm":"arm-a"`, 11))
	}
	return f
}

func benchOffsets(l []byte, pat string, skip int) []int {
	var out []int
	for i := 0; ; {
		j := bytes.Index(l[i:], []byte(pat))
		if j < 0 {
			return out
		}
		out = append(out, i+j+skip)
		i += j + len(pat)
	}
}

func (f *benchFleet) Scan(ctx context.Context, fn func([]byte) error) error {
	var buf []byte
	for k := range f.n {
		if k%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		run := &f.runs[k%len(f.runs)]
		day, hour := 1+(k*7919)%30, (k*31)%24
		for i, l := range run.lines {
			buf = append(buf[:0], l...)
			for _, o := range run.ep[i] {
				benchDigits(buf[o:o+10], k)
			}
			for _, o := range run.day[i] {
				benchDigits(buf[o:o+2], day)
				benchDigits(buf[o+3:o+5], hour)
			}
			for _, o := range run.arm[i] {
				buf[o] = 'a' + byte(k%3)
			}
			if err := fn(buf); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *benchFleet) Size(context.Context) (int64, error) {
	var per int64
	for _, r := range f.runs {
		for _, l := range r.lines {
			per += int64(len(l)) + 1
		}
	}
	return per * int64(f.n) / int64(len(f.runs)), nil
}

// benchDigits writes v zero-padded into b.
func benchDigits(b []byte, v int) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = '0' + byte(v%10)
		v /= 10
	}
}

// benchPeakRSS resets the kernel's high-water mark of this process's RSS and
// returns a func that reads it (Linux; 0 elsewhere).
func benchPeakRSS() func() int64 {
	runtime.GC()
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	return func() int64 {
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			return 0
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				return kb << 10
			}
		}
		return 0
	}
}

// benchPeakHeap samples the Go heap's live objects until stop is called.
func benchPeakHeap() (stop func() int64) {
	var peak atomic.Int64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			if v := int64(s[0].Value.Uint64()); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() int64 {
		close(done)
		<-finished
		return peak.Load()
	}
}

type benchResult struct {
	rss, heap    int64
	mbps, mbpcpu float64 // per second of wall time, per second of CPU time
}

// benchLoad is the 1-minute load average, to read a throughput figure by.
func benchLoad() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// benchCPU is the CPU time this process has used: on a shared machine, MB per
// CPU-second says what the reader costs when wall time says how busy the box was.
func benchCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStatsScale runs StatsOf over synthesised fleets of the sizes in
// REPLAY_BENCH_EPISODES (default "2000,20000"; the targets are
// "100000,1000000") and prints each target as PASS or MISS: peak RSS flat in the
// number of episodes (largest ÷ smallest ≤ 1.2), under 1 GiB, and ≥ 100 MB/s of
// events. Run it with -benchtime=1x: one read per size.
func BenchmarkStatsScale(b *testing.B) {
	sizes := []int{2000, 20000}
	if v := os.Getenv("REPLAY_BENCH_EPISODES"); v != "" {
		sizes = nil
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 {
				b.Fatalf("REPLAY_BENCH_EPISODES=%q: want sizes like 100000,1000000", v)
			}
			sizes = append(sizes, n)
		}
	}
	results := map[int]benchResult{}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("episodes=%d", n), func(b *testing.B) {
			fleet := newBenchFleet(b, n)
			var res benchResult
			for range b.N {
				rss := benchPeakRSS()
				heap := benchPeakHeap()
				start, cpu0 := time.Now(), benchCPU()
				st, sum, err := StatsOf(context.Background(), fleet, ReadOptions{SpillDir: b.TempDir()})
				elapsed, cpu := time.Since(start), benchCPU()-cpu0
				res.heap = heap()
				res.rss = rss()
				if err != nil {
					b.Fatal(err)
				}
				if st.Episodes != n || st.Tasks != 50 || len(st.Arms) != 3 {
					b.Fatalf("stats of %d episodes: %+v", n, st)
				}
				res.mbps = float64(sum.Bytes) / 1e6 / elapsed.Seconds()
				res.mbpcpu = float64(sum.Bytes) / 1e6 / cpu.Seconds()
				b.SetBytes(sum.Bytes)
				b.Logf("%d episodes, %.1f GB of events in %s: spilled %.2f GB", n, float64(sum.Bytes)/1e9, elapsed.Round(time.Millisecond), float64(sum.Spilled)/1e9)
			}
			b.ReportMetric(float64(res.rss)/(1<<20), "peakRSS-MiB")
			b.ReportMetric(float64(res.heap)/(1<<20), "peakHeap-MiB")
			b.ReportMetric(res.mbps, "events-MB/s")
			b.ReportMetric(res.mbpcpu, "events-MB/cpu-s")
			results[n] = res
		})
	}
	small, large := results[sizes[0]], results[sizes[len(sizes)-1]]
	if len(sizes) < 2 || small.rss == 0 || large.rss == 0 {
		return
	}
	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	ratio := float64(large.rss) / float64(small.rss)
	fmt.Printf("%s  RSS flat: %d episodes %.0f MiB ÷ %d episodes %.0f MiB = %.2f (target ≤ 1.2)\n",
		verdict(ratio <= 1.2), sizes[len(sizes)-1], float64(large.rss)/(1<<20), sizes[0], float64(small.rss)/(1<<20), ratio)
	for _, n := range sizes {
		r := results[n]
		fmt.Printf("%s  RSS at %d episodes: %.0f MiB (target < 1024), Go heap peak %.0f MiB\n", verdict(r.rss < 1<<30), n, float64(r.rss)/(1<<20), float64(r.heap)/(1<<20))
		fmt.Printf("%s  stats throughput at %d episodes: %.0f MB/s of events (target ≥ 100; %.0f MB per CPU-second, load average %s)\n",
			verdict(r.mbps >= 100), n, r.mbps, r.mbpcpu, benchLoad())
	}
}

// BenchmarkEpisodes is a full read (messages and all, as an export or a training
// run reads) of 2000 synthesised episodes, spilled to a temporary directory.
//
//	go test -run '^$' -bench '^BenchmarkEpisodes$' ./replay
func BenchmarkEpisodes(b *testing.B) {
	fleet := newBenchFleet(b, 2000)
	var scanned int64
	cpu0 := benchCPU()
	for b.Loop() {
		sum, err := Episodes(context.Background(), fleet, ReadOptions{SpillDir: b.TempDir()}, func(*Episode) error { return nil })
		if err != nil || sum.Episodes != 2000 {
			b.Fatalf("%d episodes, %v", sum.Episodes, err)
		}
		scanned = sum.Bytes
	}
	b.SetBytes(scanned)
	b.ReportMetric(float64(scanned)*float64(b.N)/1e6/(benchCPU()-cpu0).Seconds(), "events-MB/cpu-s")
}
