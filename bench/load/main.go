// Command load is camproxy's load harness (make bench-load). In one process and one
// run it drives the same fake upstream (fixed latency, SSE events paced apart) three
// ways — directly, through a bare fasthttp reverse proxy (the floor: a proxy that does
// nothing), and through camproxy built with app.New from a config (CAM arm on a warm
// cache, file replay sink on) — open loop at fixed rates and closed loop at
// saturation, with real tau-bench conversations (different episodes, every turn of
// each). The paths take turns in short slices so that machine noise hits them alike;
// every figure is reported against the direct path measured in the same run.
//
// It also checks that stream chunks are neither held back nor coalesced, that the
// 60th turn of an episode costs about what the first does, the replay recorder's rate
// into the file sink, that the episode store empties once episodes idle out, and the
// RSS of 10 000 idle streams (in child processes, see idle.go); it runs proxy's
// whole-pipeline allocation benchmark (pipeline.go), and it times a Responses
// session's turns over camproxy's WebSocket mode against the same turns over HTTP, on
// an upstream serving WebSocket mode and on an HTTP-only one (websocket.go). It ends
// with issue 17's targets, each with its value, bound and PASS/MISS (targets.go).
// -quick is a short run of what those need.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/camproxy/camproxy/app"
	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/internal/testkit"
)

type options struct {
	data         string
	rates        []float64
	modes        []string
	duration     time.Duration
	rounds       int
	satDuration  time.Duration
	satConns     int
	satPath      string
	latency      time.Duration
	interval     time.Duration
	chunks       int
	longTurns    int
	longEpisodes int
	idleStreams  int
	recordSteps  int
	lockStreams  int
	pacedStreams int
	wsSessions   int
	benchTime    string
	quick        bool
	skip         map[string]bool
	jsonPath     string
	cpuprofile   string
	memprofile   string
}

func main() {
	var o options
	var rates, modes, skip string
	role := flag.String("role", "", "internal: serve one part of the idle-stream check in a child process (upstream, floor, camproxy)")
	upAddr := flag.String("upstream", "", "internal: the upstream address of a child role")
	flag.StringVar(&o.data, "data", "../shared/data/tau-bench/gpt-4o-airline.json", "tau-bench trajectories")
	flag.StringVar(&rates, "rates", "250,1000,4000", "open-loop request rates per path (requests/s), comma-separated")
	flag.StringVar(&modes, "modes", "nonstream,stream", "modes to run at each rate: nonstream, stream")
	flag.DurationVar(&o.duration, "duration", 4*time.Second, "time each path runs at each rate and mode")
	flag.IntVar(&o.rounds, "rounds", 4, "slices each path's time is cut into; the paths take turns slice by slice")
	flag.DurationVar(&o.satDuration, "sat-duration", 3*time.Second, "time each path runs closed-loop for the saturation throughput")
	flag.IntVar(&o.satConns, "sat-conns", 64, "concurrent callers at saturation")
	flag.StringVar(&o.satPath, "sat-path", "", "run the saturation part on this path only (direct, floor, camproxy): with -cpuprofile, a profile of that path alone")
	flag.IntVar(&overloadLimit, "max-in-flight", 0, "camproxy's server.max_in_flight (0: its default, derived from GOMAXPROCS); the overload row's targets are for the default")
	flag.DurationVar(&o.latency, "latency", time.Millisecond, "the fake upstream's fixed latency before its answer")
	flag.DurationVar(&o.interval, "chunk-interval", 2*time.Millisecond, "time between SSE events of a streamed answer")
	flag.IntVar(&o.chunks, "stream-chunks", 12, "content pieces of a streamed answer (tool-call arguments get a third)")
	flag.IntVar(&o.longTurns, "long-turns", 60, "turns of the long-episode check")
	flag.IntVar(&o.longEpisodes, "long-episodes", 20, "episodes of the long-episode check (per path)")
	flag.IntVar(&o.idleStreams, "idle-streams", 10000, "concurrent idle streams to hold (capped by the file limit)")
	flag.IntVar(&o.recordSteps, "record-steps", 100000, "step events for the recorder's file-sink rate")
	flag.IntVar(&o.lockStreams, "lockstep-streams", 60, "streams per path in the lockstep check (no chunk held back)")
	flag.IntVar(&o.pacedStreams, "paced-streams", 200, "streams per path in the paced no-coalescing check")
	flag.IntVar(&o.wsSessions, "ws-sessions", 10, "Responses sessions per path (every turn of each, one session at a time) in the WebSocket row")
	flag.StringVar(&o.benchTime, "bench-time", "1s", "-benchtime of the in-process pipeline benchmark (go test -bench BenchmarkPipeline ./proxy)")
	flag.BoolVar(&o.quick, "quick", false, "a short run for development (about a minute): "+quickSummary())
	flag.StringVar(&skip, "skip", "", "parts to skip, comma-separated: open, lockstep, paced, saturation, overload, long, websocket, record, drain, pipeline, idle")
	flag.StringVar(&o.jsonPath, "json", "", "also write the results as JSON to this file")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "CPU profile of the in-process part of the run")
	flag.StringVar(&o.memprofile, "memprofile", "", "allocation profile of the in-process part of the run")
	flag.Parse()
	if o.quick {
		applyQuick()
	}
	if *role != "" {
		if err := runRole(*role, o.data, *upAddr); err != nil {
			fmt.Fprintln(os.Stderr, "bench-load child:", err)
			os.Exit(1)
		}
		return
	}
	for _, s := range strings.Split(rates, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		r, err := strconv.ParseFloat(s, 64)
		if err != nil || r <= 0 {
			fmt.Fprintf(os.Stderr, "bench-load: -rates: %q is not a positive number\n", s)
			os.Exit(2)
		}
		o.rates = append(o.rates, r)
	}
	for _, m := range strings.Split(modes, ",") {
		if m = strings.TrimSpace(m); m == "nonstream" || m == "stream" {
			o.modes = append(o.modes, m)
		} else if m != "" {
			fmt.Fprintf(os.Stderr, "bench-load: -modes: %q is neither nonstream nor stream\n", m)
			os.Exit(2)
		}
	}
	o.skip = map[string]bool{}
	for _, s := range strings.Split(skip, ",") {
		o.skip[strings.TrimSpace(s)] = true
	}
	if err := run(&o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-load:", err)
		os.Exit(1)
	}
}

// Results is the JSON form of a run.
type Results struct {
	Started    string           `json:"started"`
	CPUs       int              `json:"cpus"`
	GoVersion  string           `json:"go_version"`
	Config     map[string]any   `json:"config"`
	Cells      []*Cell          `json:"cells"`
	Lockstep   []LockResult     `json:"lockstep,omitempty"`
	Paced      []PacedResult    `json:"paced,omitempty"`
	Saturation []SatResult      `json:"saturation,omitempty"`
	Overload   *OverloadResult  `json:"overload,omitempty"`
	Long       *LongResult      `json:"long_episode,omitempty"`
	WebSocket  *WSResult        `json:"websocket,omitempty"`
	Recording  *RecordResult    `json:"recording,omitempty"`
	Drain      *DrainResult     `json:"episode_drain,omitempty"`
	Idle       []*IdleResult    `json:"idle_streams,omitempty"`
	Pipeline   *PipelineResult  `json:"pipeline_bench,omitempty"`
	Process    map[string]int64 `json:"process,omitempty"`
	Targets    []Target         `json:"targets"`       // issue 17's
	Checks     []Check          `json:"issue9_checks"` // issue 9's that issue 17 does not restate
}

// Cell is one rate and mode: every path's latency and CPU.
type Cell struct {
	Rate  float64      `json:"rate"`
	Mode  string       `json:"mode"`
	Paths []*PathStats `json:"paths"`
}

// PathStats is one path in one cell. Latencies are µs: total time for non-streamed
// calls, time to the first body byte for streams. Added = this path's percentile minus
// the direct path's.
type PathStats struct {
	Path           string         `json:"path"`
	N              int            `json:"n"`
	Errors         int            `json:"errors"`
	FirstError     string         `json:"first_error,omitempty"`
	AchievedRPS    float64        `json:"achieved_rps"`
	P50            float64        `json:"p50_us"`
	P99            float64        `json:"p99_us"`
	P999           float64        `json:"p999_us"`
	AddedP50       float64        `json:"added_p50_us"`
	AddedP99       float64        `json:"added_p99_us"`
	AddedP999      float64        `json:"added_p999_us"`
	TotalP50       float64        `json:"total_p50_us"`
	CPUPerReq      float64        `json:"cpu_per_req_us"`
	AddedCPUPerReq float64        `json:"added_cpu_per_req_us"`
	RSSMiB         float64        `json:"process_rss_mib"`
	Events         int            `json:"sse_events,omitempty"`
	Coalesced      int            `json:"sse_events_coalesced,omitempty"`
	Contexts       map[string]int `json:"contexts,omitempty"`
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

type env struct {
	o       *options
	convs   []*conv // the trajectories; the long episode is appended last
	long    *conv
	up      *upstream
	upAddr  string
	paths   []*target // direct, floor, camproxy
	norec   *target
	cp      *app.App
	cpNorec *app.App
	res     *Results
	out     io.Writer
	t0      time.Time
}

func (e *env) printf(format string, a ...any) {
	if strings.HasPrefix(format, "== ") {
		fmt.Fprintf(e.out, "[%5.1fs] ", time.Since(e.t0).Seconds())
	}
	fmt.Fprintf(e.out, format, a...)
}

func run(o *options) error {
	convs, err := loadConvs(o.data, o.chunks)
	if err != nil {
		return err
	}
	long, err := longConv(convs, o.longTurns, o.chunks)
	if err != nil {
		return err
	}
	long.id = len(convs)
	all := append(slices.Clone(convs), long)
	e := &env{o: o, convs: convs, long: long, out: os.Stdout, t0: time.Now(), res: &Results{Started: time.Now().UTC().Format(time.RFC3339),
		CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}}
	e.res.Config = map[string]any{"rates": o.rates, "modes": o.modes, "duration_s": o.duration.Seconds(), "rounds": o.rounds,
		"upstream_latency_us": us(o.latency), "chunk_interval_us": us(o.interval), "stream_chunks": o.chunks,
		"sat_conns": o.satConns, "sat_duration_s": o.satDuration.Seconds(), "long_turns": o.longTurns, "long_episodes": o.longEpisodes,
		"idle_streams": o.idleStreams, "conversations": len(convs), "episode_idle_timeout_s": episodeIdle.Seconds(),
		"lockstep_streams": o.lockStreams, "paced_streams": o.pacedStreams, "ws_sessions": o.wsSessions, "bench_time": o.benchTime, "quick": o.quick}

	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if o.memprofile != "" {
		runtime.MemProfileRate = 64 << 10
	}

	e.up = newUpstream(all, o.latency, o.interval)
	locks = &e.up.lock
	if e.upAddr, err = e.up.start("127.0.0.1:0"); err != nil {
		return err
	}
	defer e.up.close()
	cam := testkit.NewCAM()
	defer cam.Close()
	dir, err := os.MkdirTemp("", "camproxy-bench-load-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fl := newFloor(e.upAddr)
	flAddr, err := fl.start("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer fl.close()
	if e.cp, err = startCamproxy(e.upAddr, cam.URL, dir+"/rec", nil); err != nil {
		return err
	}
	defer shutdown(e.cp)
	if e.cpNorec, err = startCamproxy(e.upAddr, cam.URL, dir+"/norec", discard{}); err != nil {
		return err
	}
	defer shutdown(e.cpNorec)
	e.paths = []*target{newTarget("direct", e.upAddr), newTarget("floor", flAddr), newTarget("camproxy", e.cp.Addr())}
	e.norec = newTarget("camproxy-norec", e.cpNorec.Addr())

	e.printf("camproxy load harness — %d CPUs, %s; %d tau-bench conversations (every turn of each, a new episode per replay)\n",
		runtime.NumCPU(), runtime.Version(), len(convs))
	e.printf("fake upstream: %s fixed latency; streams: %d+ SSE events %s apart. camproxy: CAM arm, warm cache, file replay sink on.\n",
		o.latency, o.chunks, o.interval)
	e.printf("latency is measured from when a call was due (open loop); added = path percentile − direct percentile, same run.\n")
	if err := e.warm(); err != nil {
		return err
	}
	e.printf("warm-up done: CAM called %d times (one per task), %d conversations' first turns sent through each path\n\n", cam.Calls(), len(convs))

	if !o.skip["lockstep"] {
		e.lockstepCheck()
	}
	if !o.skip["paced"] {
		e.pacedCheck()
	}
	if !o.skip["open"] {
		for _, rate := range o.rates {
			for _, mode := range o.modes {
				e.cell(rate, mode)
			}
		}
	}
	if !o.skip["saturation"] {
		e.saturation()
	}
	if !o.skip["overload"] {
		e.overload()
	}
	if !o.skip["long"] {
		e.longEpisode()
	}
	if !o.skip["websocket"] && o.wsSessions > 0 {
		t0 := time.Now()
		if e.res.WebSocket, err = wsBench(convs, o.wsSessions, o.latency, cam.URL, dir); err != nil {
			return fmt.Errorf("websocket row: %w", err)
		}
		e.res.WebSocket.Seconds = time.Since(t0).Seconds()
		e.printWS()
	}
	if !o.skip["record"] && o.recordSteps > 0 {
		r, err := recordSteps(convs, o.recordSteps, 25000, 2*time.Second)
		if err != nil {
			return fmt.Errorf("recording: %w", err)
		}
		e.res.Recording = r
		e.printf("== recording: the replay recorder into the file sink (real steps, avg %d B of JSON) ==\n", r.AvgBytes)
		e.printf("sustained: %.0f steps/s for 2 s, open loop: %d written to the sink directly, %d through the spool (%d delivered from it); all in the sink %.1f ms after the last\n",
			r.PacedRate, r.PacedWritten, r.PacedSpooled, r.PacedFromSpool, r.PacedLagMs)
		e.printf("ceiling: %d steps as fast as the queue takes them in %.2fs: %.0f steps/s (%d written to the sink, %d to the spool)\n\n",
			r.Steps, r.Seconds, r.StepsPerSec, r.Written, r.Spooled)
	}
	if !o.skip["drain"] {
		e.drain()
	}
	if !o.skip["pipeline"] {
		// Last of the measurements: the benchmark is a process of its own and would
		// take CPU from the in-process paths.
		e.res.Pipeline = runPipelineBench(o.benchTime)
		e.printPipeline()
	}
	if o.memprofile != "" {
		f, err := os.Create(o.memprofile)
		if err != nil {
			return err
		}
		_ = pprof.Lookup("allocs").WriteTo(f, 0)
		f.Close()
	}
	var rssNow, hwm int64 = procMem(os.Getpid())
	e.res.Process = map[string]int64{"rss_bytes": rssNow, "peak_rss_bytes": hwm}
	// The idle-stream check needs the file descriptors: stop the in-process servers.
	if !o.skip["idle"] && o.idleStreams > 0 {
		for _, p := range append(e.paths, e.norec) {
			p.hc.CloseIdleConnections()
		}
		e.printf("== %d concurrent idle streams (each proxy in a process of its own) ==\n", o.idleStreams)
		upc, err := startChild("-role", "upstream", "-data", o.data)
		if err != nil {
			return err
		}
		for _, role := range []string{"floor", "camproxy"} {
			r, err := idleStreams(role, upc.addr, o.data, convs[0], o.idleStreams)
			if err != nil {
				upc.stop()
				return fmt.Errorf("idle streams through %s: %w", role, err)
			}
			e.res.Idle = append(e.res.Idle, r)
			e.printf("%-9s %5d streams open (%d failed) in %.1fs: RSS %.0f MiB (%.0f before; peak %.0f) = %.1f KiB per stream → %.0f MiB at 10 000\n",
				role, r.Streams, r.Failed, r.OpenSeconds, r.RSSMiB, r.RSSBeforeMiB, r.PeakMiB, r.PerStreamKiB, r.Projected10k)
			if r.Streams < o.idleStreams {
				e.printf("          (file limit %d per process: camproxy holds 2 sockets per stream, so %d is the most one process can hold here; 10 000 is projected linearly)\n",
					r.FileLimit, r.Streams+r.Failed)
			}
		}
		upc.stop()
		e.printf("\n")
	}
	e.targets()
	if o.jsonPath != "" {
		b, err := json.MarshalIndent(e.res, "", "  ")
		if err != nil {
			return fmt.Errorf("results as JSON: %w", err)
		}
		if err := os.WriteFile(o.jsonPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
		e.printf("\nresults written to %s\n", o.jsonPath)
	}
	return nil
}

// warm sends every conversation's first turn through each path (which also warms the
// CAM cache for every task), then a second of load per path.
func (e *env) warm() error {
	for _, p := range append(slices.Clone(e.paths), e.norec) {
		for _, c := range e.convs {
			body := c.body(nil, 0, instances.Add(1), false)
			if r := p.call(body, replyKey(nil, c, 0), false, "", time.Now()); r.err != nil {
				return fmt.Errorf("warm-up through %s: %w", p.name, r.err)
			}
		}
		s := newSample()
		runOpen(p, e.convs, newSlots(32), 500, time.Second, false, s)
		if s.errs > 0 {
			return fmt.Errorf("warm-up through %s: %d errors, first: %v", p.name, s.errs, s.firstErr)
		}
	}
	heapAfterWarm = heapLive()
	return nil
}

func shutdown(a *app.App) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = a.Shutdown(ctx)
}

// cell runs every path at one rate and mode, slice by slice.
func (e *env) cell(rate float64, mode string) {
	stream := mode == "stream"
	paths := e.paths
	if !stream && rate == 1000 {
		paths = append(slices.Clone(paths), e.norec)
	}
	gap := 50 * time.Millisecond // time between turns of one conversation: the agent's own work
	if stream {
		gap = 150 * time.Millisecond
	}
	k := max(8, int(math.Ceil(rate*gap.Seconds())))
	samples := make([]*sample, len(paths))
	slots := make([][]*slot, len(paths))
	for i := range paths {
		samples[i], slots[i] = newSample(), newSlots(k)
	}
	slice := e.o.duration / time.Duration(e.o.rounds)
	for r := range e.o.rounds {
		for j := range paths {
			i := (j + r) % len(paths) // rotate who goes first
			runOpen(paths[i], e.convs, slots[i], rate, slice, stream, samples[i])
		}
	}
	rss, _ := procMem(os.Getpid())
	c := &Cell{Rate: rate, Mode: mode}
	for i, p := range paths {
		s := samples[i]
		s.sorted()
		ps := &PathStats{Path: p.name, N: s.n, Errors: s.errs, P50: us(pct(s.lat, .5)), P99: us(pct(s.lat, .99)), P999: us(pct(s.lat, .999)),
			TotalP50: us(pct(s.total, .5)), CPUPerReq: us(s.cpu) / float64(max(1, s.n)), RSSMiB: mib(rss), Contexts: s.contexts,
			AchievedRPS: float64(s.n) / s.wall.Seconds(), Events: s.events, Coalesced: s.merged}
		if s.firstErr != nil {
			ps.FirstError = s.firstErr.Error()
		}
		c.Paths = append(c.Paths, ps)
	}
	d := c.Paths[0]
	for _, ps := range c.Paths {
		ps.AddedP50, ps.AddedP99, ps.AddedP999 = ps.P50-d.P50, ps.P99-d.P99, ps.P999-d.P999
		ps.AddedCPUPerReq = ps.CPUPerReq - d.CPUPerReq
	}
	e.res.Cells = append(e.res.Cells, c)
	what := "total latency"
	if stream {
		what = "time to first byte"
	}
	e.printf("== %.0f rps, %s (%s), %s per path in %d slices, %d conversations in flight ==\n", rate, mode, what, e.o.duration, e.o.rounds, k)
	e.printf("%-15s %6s %4s %8s %8s %8s %8s %8s %8s %9s %9s %9s\n", "path", "n", "err", "p50", "p99", "p99.9", "+p50", "+p99", "+p99.9", "cpu/req", "+cpu/req", "total p50")
	for _, ps := range c.Paths {
		e.printf("%-15s %6d %4d %8.0f %8.0f %8.0f %8.0f %8.0f %8.0f %9.0f %9.0f %9.0f\n", ps.Path, ps.N, ps.Errors, ps.P50, ps.P99, ps.P999,
			ps.AddedP50, ps.AddedP99, ps.AddedP999, ps.CPUPerReq, ps.AddedCPUPerReq, ps.TotalP50)
		if ps.FirstError != "" {
			e.printf("                first error: %.200s\n", ps.FirstError)
		}
	}
	f, cp := c.Paths[1], c.Paths[2]
	e.printf("(µs) camproxy − floor added: p50 %+.0f, p99 %+.0f, p99.9 %+.0f; added CPU/req camproxy/floor %.2fx; camproxy context: %v; process RSS %.0f MiB\n",
		cp.AddedP50-f.AddedP50, cp.AddedP99-f.AddedP99, cp.AddedP999-f.AddedP999, ratio(cp.AddedCPUPerReq, f.AddedCPUPerReq), cp.Contexts, mib(rss))
	if stream {
		e.printf("SSE events that arrived merged with the one before, under this load:")
		for _, ps := range c.Paths {
			e.printf(" %s %d of %d;", ps.Path, ps.Coalesced, ps.Events)
		}
		e.printf(" (the upstream's own copy falls behind too: see direct)\n")
	}
	if len(c.Paths) > 3 {
		nr := c.Paths[3]
		e.printf("recording on − off (camproxy − camproxy-norec): p50 %+.0f µs, p99 %+.0f µs\n", cp.P50-nr.P50, cp.P99-nr.P99)
	}
	e.printf("\n")
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// LockResult is the lockstep check of one path: no chunk held back.
type LockResult struct {
	Path       string `json:"path"`
	Streams    int    `json:"streams"`
	Chunks     int64  `json:"chunks_checked"`
	Coalesced  int64  `json:"chunks_held_back"`
	Errors     int    `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
}

// PacedResult is the paced no-coalescing check of one path: of the SSE events the
// upstream wrote and flushed one by one chunkInterval apart, how many reached the
// client merged into the same read as the event before them.
type PacedResult struct {
	Path       string  `json:"path"`
	Streams    int     `json:"streams"`
	Events     int     `json:"events"`
	Coalesced  int     `json:"events_coalesced"`
	Fraction   float64 `json:"fraction_coalesced"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
}

// streamTally is what a batch of streams came to.
type streamTally struct {
	events, coalesced, errors int
	firstErr                  string
}

// streams sends n streamed turns through p from 4 callers at a time — few enough
// that the callers, the upstream and the proxy all keep up with events 2 ms apart.
// lock makes the upstream wait, before each event, for the client to have read the
// one before.
func (e *env) streams(p *target, n int, lock bool) streamTally {
	var t streamTally
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int)
	for range 4 {
		wg.Go(func() {
			for i := range work {
				c := e.convs[i%len(e.convs)]
				turn := (i / len(e.convs)) % len(c.turns)
				body := c.body(nil, turn, instances.Add(1), true)
				lockID := ""
				if lock {
					lockID = fmt.Sprintf("%s-%d", p.name, instances.Add(1))
				}
				r := p.call(body, replyKey(nil, c, turn), true, lockID, time.Now())
				mu.Lock()
				t.events += r.events
				t.coalesced += r.coalesced
				if r.err != nil {
					t.errors++
					if t.firstErr == "" {
						t.firstErr = r.err.Error()
					}
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return t
}

// lockstepCheck streams answers whose every next event the upstream sends only once
// the client has read the previous one: a path that holds a chunk back until more
// bytes come shows as a timed-out wait.
func (e *env) lockstepCheck() {
	e.printf("== no chunk held back: the upstream sends event i+1 only once the client has read event i (%s wait) ==\n", lockstepWait)
	for _, p := range e.paths {
		v0, c0 := locks.violations.Load(), locks.checked.Load()
		t := e.streams(p, e.o.lockStreams, true)
		lr := LockResult{Path: p.name, Streams: e.o.lockStreams, Errors: t.errors, FirstError: t.firstErr,
			Chunks: locks.checked.Load() - c0, Coalesced: locks.violations.Load() - v0}
		e.res.Lockstep = append(e.res.Lockstep, lr)
		e.printf("%-9s %d streams, %d chunks: %d held back until the next arrived, %d errors %s\n", p.name, lr.Streams, lr.Chunks, lr.Coalesced, lr.Errors, lr.FirstError)
	}
	e.printf("\n")
}

// pacedCheck streams answers as the upstream normally sends them, each event written
// and flushed on its own chunkInterval after the last, and counts at the client the
// events that arrived in the same read as the one before: a proxy that buffers the
// stream merges them.
func (e *env) pacedCheck() {
	e.printf("== no chunk coalescing: SSE events written %s apart upstream, counted as the client reads them (4 streams at a time) ==\n", e.o.interval)
	for _, p := range e.paths {
		t := e.streams(p, e.o.pacedStreams, false)
		pr := PacedResult{Path: p.name, Streams: e.o.pacedStreams, Events: t.events, Coalesced: t.coalesced,
			Fraction: float64(t.coalesced) / float64(max(1, t.events)), Errors: t.errors, FirstError: t.firstErr}
		e.res.Paced = append(e.res.Paced, pr)
		e.printf("%-9s %d streams, %d events: %d arrived merged with the one before (%.2f%%), %d errors %s\n",
			p.name, pr.Streams, pr.Events, pr.Coalesced, 100*pr.Fraction, pr.Errors, pr.FirstError)
	}
	e.printf("\n")
}

// SatResult is one path's closed-loop throughput.
type SatResult struct {
	Path      string  `json:"path"`
	Calls     int     `json:"calls"`
	Errors    int     `json:"errors"`
	RPS       float64 `json:"rps"`
	CPUPerReq float64 `json:"cpu_per_req_us"`
	// The process CPU per call minus the direct path's: what this path adds, as the
	// open-loop cells' +cpu/req.
	AddedCPUPerReq float64 `json:"added_cpu_per_req_us"`
}

func (e *env) saturation() {
	e.printf("== saturation: %d callers back to back, non-streaming, %s per path in %d slices ==\n", e.o.satConns, e.o.satDuration, e.o.rounds)
	type acc struct {
		calls, errs int
		el, cpu     time.Duration
	}
	accs := make([]acc, len(e.paths))
	slice := e.o.satDuration / time.Duration(e.o.rounds)
	for r := range e.o.rounds {
		for j := range e.paths {
			i := (j + r) % len(e.paths)
			if e.o.satPath != "" && e.o.satPath != e.paths[i].name {
				continue
			}
			n, bad, el, cpu := runClosed(e.paths[i], e.convs, e.o.satConns, slice)
			accs[i].calls += n
			accs[i].errs += bad
			accs[i].el += el
			accs[i].cpu += cpu
		}
	}
	for i, p := range e.paths {
		a := accs[i]
		if a.calls == 0 && e.o.satPath != "" {
			continue // not run: -sat-path names another
		}
		sr := SatResult{Path: p.name, Calls: a.calls, Errors: a.errs, RPS: float64(a.calls) / a.el.Seconds(), CPUPerReq: us(a.cpu) / float64(max(1, a.calls))}
		if accs[0].calls > 0 {
			sr.AddedCPUPerReq = sr.CPUPerReq - us(accs[0].cpu)/float64(accs[0].calls)
		}
		e.res.Saturation = append(e.res.Saturation, sr)
		e.printf("%-9s %7.0f req/s (%d calls, %d errors), process CPU %.0f µs per call, %+.0f µs over direct\n", p.name, sr.RPS, sr.Calls, sr.Errors, sr.CPUPerReq, sr.AddedCPUPerReq)
	}
	s := e.res.Saturation
	if len(s) != 3 {
		e.printf("\n")
		return
	}
	e.printf("camproxy/floor throughput %.2f; floor/direct %.2f; added CPU per call camproxy/floor %.2fx\n\n",
		s[2].RPS/s[1].RPS, s[1].RPS/s[0].RPS, ratio(s[2].AddedCPUPerReq, s[1].AddedCPUPerReq))
}

// LongResult is the long-episode check: added latency by turn.
type LongResult struct {
	Turns      int     `json:"turns"`
	Episodes   int     `json:"episodes"`
	FirstBytes int     `json:"first_body_bytes"`
	LastBytes  int     `json:"last_body_bytes"`
	AddedFirst float64 `json:"camproxy_added_turn1_us"`
	AddedLast  float64 `json:"camproxy_added_last_us"`
	FloorFirst float64 `json:"floor_added_turn1_us"`
	FloorLast  float64 `json:"floor_added_last_us"`
	Ratio      float64 `json:"ratio_last_first"` // of camproxy's added times
	// camproxy's whole round trip (median), turns 1-3 and the last three, for comparison.
	TotalFirst  float64        `json:"camproxy_total_turn1_us"`
	TotalLast   float64        `json:"camproxy_total_last_us"`
	AddedByTurn []float64      `json:"camproxy_added_by_turn_us"`
	Contexts    map[string]int `json:"camproxy_contexts"`
	// Least-squares fit of added latency on body size: µs per KB and the intercept.
	SlopeUsPerKB      float64 `json:"camproxy_us_per_kb"`
	InterceptUs       float64 `json:"camproxy_intercept_us"`
	FloorSlopeUsPerKB float64 `json:"floor_us_per_kb"`
}

// longEpisode replays the long episode turn by turn on every path; per turn, the
// median over episodes of each path, and camproxy's added latency as its median minus
// direct's.
func (e *env) longEpisode() {
	c, o := e.long, e.o
	n := len(c.turns)
	lat := make([][][]time.Duration, len(e.paths)) // path, turn, episode
	for i := range lat {
		lat[i] = make([][]time.Duration, n)
	}
	ctxs := map[string]int{}
	for range o.longEpisodes {
		inst := make([]uint64, len(e.paths))
		for i := range inst {
			inst[i] = instances.Add(1)
		}
		for t := range n {
			for j := range e.paths {
				i := (j + t) % len(e.paths)
				body := c.body(nil, t, inst[i], false)
				r := e.paths[i].call(body, replyKey(nil, c, t), false, "", time.Now())
				if r.err != nil {
					e.printf("long episode, %s turn %d: %v\n", e.paths[i].name, t+1, r.err)
					continue
				}
				lat[i][t] = append(lat[i][t], r.total)
				if i == 2 {
					ctxs[r.context]++
				}
			}
		}
	}
	med := func(i, t int) float64 {
		s := lat[i][t]
		slices.Sort(s)
		return us(pct(s, .5))
	}
	lr := &LongResult{Turns: n, Episodes: o.longEpisodes, FirstBytes: len(c.body(nil, 0, 1, false)), LastBytes: len(c.body(nil, n-1, 1, false)), Contexts: ctxs}
	for t := range n {
		lr.AddedByTurn = append(lr.AddedByTurn, med(2, t)-med(0, t))
	}
	// Turns 1 and n, each as the median of a window of three turns around it, to damp
	// the noise of single medians.
	win := func(i, t0 int) float64 {
		var v []float64
		for t := t0; t < t0+3 && t < n; t++ {
			v = append(v, med(i, t)-med(0, t))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	lr.AddedFirst, lr.AddedLast = win(2, 0), win(2, n-3)
	lr.FloorFirst, lr.FloorLast = win(1, 0), win(1, n-3)
	lr.Ratio = ratio(lr.AddedLast, lr.AddedFirst)
	whole := func(t0 int) float64 {
		var v []float64
		for t := t0; t < t0+3 && t < n; t++ {
			v = append(v, med(2, t))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	lr.TotalFirst, lr.TotalLast = whole(0), whole(n-3)
	kb := make([]float64, n)
	floorBy := make([]float64, n)
	for t := range n {
		kb[t] = float64(len(c.body(nil, t, 1, false))) / 1024
		floorBy[t] = med(1, t) - med(0, t)
	}
	lr.SlopeUsPerKB, lr.InterceptUs = fit(kb, lr.AddedByTurn)
	lr.FloorSlopeUsPerKB, _ = fit(kb, floorBy)
	e.res.Long = lr
	e.printf("== episode of %d turns (%d episodes per path; body %d B at turn 1, %d B at turn %d) ==\n", n, o.longEpisodes, lr.FirstBytes, lr.LastBytes, n)
	e.printf("added latency (median, turns 1-3 vs %d-%d): camproxy %.0f µs → %.0f µs (%.2fx); floor %.0f µs → %.0f µs; camproxy context: %v\n",
		n-2, n, lr.AddedFirst, lr.AddedLast, lr.Ratio, lr.FloorFirst, lr.FloorLast, ctxs)
	e.printf("camproxy's whole round trip (median, same turns): %.0f µs → %.0f µs (%.2fx)\n", lr.TotalFirst, lr.TotalLast, ratio(lr.TotalLast, lr.TotalFirst))
	e.printf("added latency against body size (least squares): camproxy %.0f µs + %.1f µs/KB, floor %.1f µs/KB — linear in the bytes read, no term in turns²\n",
		lr.InterceptUs, lr.SlopeUsPerKB, lr.FloorSlopeUsPerKB)
	e.printf("camproxy added by turn (µs):")
	for t := 0; t < n; t += 6 {
		e.printf(" t%d=%.0f", t+1, lr.AddedByTurn[t])
	}
	e.printf("\n\n")
}

// DrainResult shows the episode store and heap after the episodes idled out.
type DrainResult struct {
	EpisodesLive     int     `json:"episodes_live"`
	TipsLive         int     `json:"tips_live"`
	EpisodesAfter    int     `json:"episodes_after_idle"`
	TipsAfter        int     `json:"tips_after_idle"`
	HeapLiveMiB      float64 `json:"heap_live_mib"`
	HeapAfterMiB     float64 `json:"heap_after_idle_mib"`
	HeapAfterWarmMiB float64 `json:"heap_after_warmup_mib"`
}

var heapAfterWarm float64

func heapLive() float64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return mib(int64(s[0].Value.Uint64()))
}

// drain waits for every episode to idle out and shows the store and the heap empty
// again: no per-episode state outlives its episode.
func (e *env) drain() {
	mem, ok := e.cp.Episodes.(*episode.Memory)
	if !ok {
		return
	}
	d := &DrainResult{HeapAfterWarmMiB: heapAfterWarm}
	d.EpisodesLive, d.TipsLive = mem.Len()
	d.HeapLiveMiB = heapLive()
	deadline := time.Now().Add(episodeIdle + 3*time.Second)
	for time.Now().Before(deadline) {
		if n, t := mem.Len(); n == 0 && t == 0 {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	d.EpisodesAfter, d.TipsAfter = mem.Len()
	debug.FreeOSMemory()
	d.HeapAfterMiB = heapLive()
	e.res.Drain = d
	e.printf("== memory over the run: camproxy's episode store (idle timeout %s) ==\n", episodeIdle)
	e.printf("live heap (whole process: clients, upstream, floor, both camproxies): %.0f MiB after warm-up, %.0f MiB after the load;\n",
		d.HeapAfterWarmMiB, d.HeapLiveMiB)
	e.printf("camproxy's store after the load: %d episodes, %d tips; once idle: %d episodes, %d tips, live heap %.0f MiB\n\n",
		d.EpisodesLive, d.TipsLive, d.EpisodesAfter, d.TipsAfter, d.HeapAfterMiB)
}

// fit is the least-squares line y = a·x + b.
func fit(x, y []float64) (a, b float64) {
	var sx, sy, sxx, sxy float64
	n := float64(len(x))
	for i := range x {
		sx += x[i]
		sy += y[i]
		sxx += x[i] * x[i]
		sxy += x[i] * y[i]
	}
	if d := n*sxx - sx*sx; d != 0 {
		a = (n*sxy - sx*sy) / d
	}
	return a, (sy - a*sx) / n
}
