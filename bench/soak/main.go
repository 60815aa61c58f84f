// Command soak runs camproxy (in-process, with its own Redis, a file and a Redis
// replay sink) under a steady open-loop load of multi-turn agents for -duration,
// injecting one fault each -fault-every in turn: upstream 500s, an upstream that
// hangs, a CAM that hangs, Redis killed and restarted, clients that leave
// mid-stream. It ends with a report: requests, errors by cause, replay events
// accepted vs delivered (must be equal), RSS and goroutines at start and end. Exit
// status 1 when events were lost or memory/goroutines grew.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/app"
	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/replay/location"
)

func main() {
	duration := flag.Duration("duration", 20*time.Minute, "how long the load runs")
	every := flag.Duration("fault-every", time.Minute, "a fault is injected this often (each lasts a quarter of it)")
	rate := flag.Float64("rps", 40, "agent turns started per second (open loop)")
	jsonOut := flag.String("json", "", "also write the report as JSON to this file")
	memProfile := flag.String("memprofile", "", "write a heap profile at the end (after a GC) to this file")
	flag.Parse()
	rep, err := run(*duration, *every, *rate, *memProfile)
	if rep != nil {
		rep.print(os.Stdout)
		if *jsonOut != "" {
			b, _ := json.MarshalIndent(rep, "", "  ")
			_ = os.WriteFile(*jsonOut, b, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

type report struct {
	Duration          string         `json:"duration"`
	Requests          int64          `json:"requests"`
	Outcomes          map[string]int `json:"outcomes"` // "200", "502", "client left", "transport: …"
	Faults            []string       `json:"faults"`
	EventsAccepted    int            `json:"events_accepted"`
	EventsDelivered   map[string]int `json:"events_delivered"` // per sink
	EventsLost        int            `json:"events_lost"`
	RSSStartMiB       float64        `json:"rss_start_mib"`
	RSSEndMiB         float64        `json:"rss_end_mib"`
	GoroutinesStart   int            `json:"goroutines_start"`
	GoroutinesEnd     int            `json:"goroutines_end"`
	HeapStartMiB      float64        `json:"heap_start_mib"`
	HeapEndMiB        float64        `json:"heap_end_mib"`
	EpisodesRecorded  int            `json:"episodes_recorded"`
	ContextDecisions  map[string]int `json:"context_decisions"`
	DependencyUpAtEnd float64        `json:"dependency_up_at_end"`
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\nsoak: %s, %d requests\n", r.Duration, r.Requests)
	fmt.Fprintln(w, "outcomes:")
	keys := make([]string, 0, len(r.Outcomes))
	for k := range r.Outcomes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %-40s %d\n", k, r.Outcomes[k])
	}
	fmt.Fprintf(w, "faults injected: %s\n", strings.Join(r.Faults, ", "))
	fmt.Fprintf(w, "replay events: accepted %d, delivered %v, lost %d\n", r.EventsAccepted, r.EventsDelivered, r.EventsLost)
	fmt.Fprintf(w, "episodes recorded: %d; context decisions: %v\n", r.EpisodesRecorded, r.ContextDecisions)
	fmt.Fprintf(w, "RSS %.1f → %.1f MiB, heap %.1f → %.1f MiB, goroutines %d → %d\n",
		r.RSSStartMiB, r.RSSEndMiB, r.HeapStartMiB, r.HeapEndMiB, r.GoroutinesStart, r.GoroutinesEnd)
}

// fault is one injected failure: on starts it, off ends it.
type fault struct {
	name    string
	on, off func()
}

func run(duration, every time.Duration, rate float64, heapProfile string) (*report, error) {
	dir, err := os.MkdirTemp("", "camproxy-soak-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rs, err := testkit.NewRedisServer(dir)
	if err != nil {
		return nil, err
	}
	defer rs.Kill()
	rs.Persist = true // the Redis replay sink must keep what it acknowledged across the kill
	rs.Kill()
	if err := rs.Run(); err != nil {
		return nil, err
	}
	up, cam := testkit.NewUpstream(), testkit.NewCAM()
	defer up.Close()
	defer cam.Close()
	up.KeepLast(100) // the fakes share the process: their logs must not grow with the run
	cam.KeepLast(100)

	cfg := config.Default()
	cfg.Server.Listen, cfg.Server.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstreams["openai"].BaseURL = up.URL
	cfg.Upstreams["openai"].FirstByteTimeout = 2 * time.Second
	cfg.Upstreams["openai"].IdleTimeout = 2 * time.Second
	ac := config.DefaultAugmenter()
	ac.Type, ac.BaseURL, ac.Timeout = config.AugmenterCAM, cam.URL+"/v1", 500*time.Millisecond
	ac.Breaker = config.Breaker{Failures: 5, OpenFor: 2 * time.Second}
	cfg.Augmenters = map[string]config.Augmenter{"cam": ac}
	cfg.Experiment.Arms = []config.Arm{{Name: "baseline", Weight: 1, Augmenter: "none"}, {Name: "cam", Weight: 1, Augmenter: "cam"}}
	cfg.Cache.RedisURL = rs.URL()
	cfg.Episodes.Store = config.StoreRedis
	cfg.Episodes.IdleTimeout = time.Minute // episodes idle out during the run: memory must stay flat
	fileURI, redisURI := "file://"+dir+"/replay", "redis://"+rs.Addr+"/0?stream=camproxy:replay"
	cfg.Replay.Sinks = []string{fileURI, redisURI}
	cfg.Replay.SpoolDir = dir + "/spool"
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Warnings and errors go to stderr: the faults make plenty of them.
	a, err := app.New(cfg, app.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return nil, err
	}
	if err := a.Start(); err != nil {
		return nil, err
	}
	base, admin := "http://"+a.Addr(), "http://"+a.AdminAddr()

	rep := &report{Duration: duration.String(), Outcomes: map[string]int{}, EventsDelivered: map[string]int{}}
	warm(base, admin)
	runtime.GC()
	rep.RSSStartMiB, rep.GoroutinesStart, rep.HeapStartMiB = rssMiB(), runtime.NumGoroutine(), heapMiB()

	faults := []fault{
		{"upstream 500s", func() { setReply(up, 500) }, func() { setReply(up, 0) }},
		{"upstream hangs (first byte never comes)", func() { up.Configure(func(u *testkit.Upstream) { u.Delay = time.Hour }) },
			func() { up.Configure(func(u *testkit.Upstream) { u.Delay = 0 }) }},
		{"CAM hangs", func() { cam.SetMode(testkit.CAMHang) }, func() { cam.SetMode(testkit.CAMOK) }},
		{"Redis killed, then restarted", rs.Kill, func() { _ = rs.Run() }},
		{"upstream resets streams mid-way", func() { up.Configure(func(u *testkit.Upstream) { u.ResetAfter = 2 }) },
			func() { up.Configure(func(u *testkit.Upstream) { u.ResetAfter = 0 }) }},
	}
	var outMu sync.Mutex
	outcome := func(k string) {
		outMu.Lock()
		rep.Outcomes[k]++
		outMu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var wg sync.WaitGroup
	// Faults, in turn, each for a quarter of the period.
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(every):
			}
			f := faults[i%len(faults)]
			rep.Faults = append(rep.Faults, f.name)
			fmt.Fprintf(os.Stderr, "soak: %s: %s\n", time.Now().Format(time.TimeOnly), f.name)
			f.on()
			select {
			case <-ctx.Done():
			case <-time.After(every / 4):
			}
			f.off()
		}
	})
	// Open loop: each tick starts a new agent run of 1–4 turns, one in five streaming,
	// one in twenty leaving mid-stream.
	var requests atomic.Int64
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	client := &http.Client{Timeout: 30 * time.Second}
	progress := time.NewTicker(30 * time.Second)
	defer progress.Stop()
	start := time.Now()
	n := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-progress.C:
			fmt.Fprintf(os.Stderr, "soak: %s elapsed, %d requests, RSS %.1f MiB, %d goroutines\n",
				time.Since(start).Round(time.Second), requests.Load(), rssMiB(), runtime.NumGoroutine())
		case <-tick.C:
			n++
			id := n
			wg.Go(func() { agentRun(client, base, admin, id, &requests, outcome) })
		}
	}
	wg.Wait()
	client.CloseIdleConnections()
	_ = rs.Run() // Redis up for the last delivery, in case the run ended inside its fault
	time.Sleep(2 * time.Second)
	runtime.GC()
	rep.RSSEndMiB, rep.GoroutinesEnd, rep.HeapEndMiB = rssMiB(), runtime.NumGoroutine(), heapMiB()
	if heapProfile != "" {
		if f, err := os.Create(heapProfile); err == nil {
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		}
		if f, err := os.Create(heapProfile + ".goroutines"); err == nil {
			_ = pprof.Lookup("goroutine").WriteTo(f, 1)
			f.Close()
		}
	}
	rep.Requests = requests.Load()
	rep.DependencyUpAtEnd = a.Metrics.Dependencies.Up("redis", "episodes")
	for _, res := range []string{"miss", "hit", "episode", "none", "fail-open", "skip"} {
		for _, arm := range []string{"baseline", "cam"} {
			if v := testutil.ToFloat64(a.Metrics.Context.WithLabelValues(cfg.Experiment.Name, arm, res)); v > 0 {
				if rep.ContextDecisions == nil {
					rep.ContextDecisions = map[string]int{}
				}
				rep.ContextDecisions[arm+"/"+res] = int(v)
			}
		}
	}

	sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
	defer scancel()
	if err := a.Shutdown(sctx); err != nil {
		return rep, fmt.Errorf("shutdown: %w", err)
	}
	for _, t := range []string{replay.TypeEpisode, replay.TypeStep, replay.TypeReward} {
		for _, sink := range []string{"file", "redis"} {
			rep.EventsLost += int(testutil.ToFloat64(a.Metrics.ReplayEvents.WithLabelValues(t, sink, "lost")))
		}
	}
	rep.EventsAccepted = accepted(a)
	for _, uri := range []string{fileURI, redisURI} {
		ids, episodes, err := readIDs(sctx, uri)
		if err != nil {
			return rep, fmt.Errorf("read %s: %w", location.Redact(uri), err)
		}
		rep.EventsDelivered[strings.SplitN(uri, ":", 2)[0]] = ids
		if rep.EpisodesRecorded == 0 {
			rep.EpisodesRecorded = episodes
		}
	}
	var problems []string
	for sink, got := range rep.EventsDelivered {
		if got != rep.EventsAccepted {
			problems = append(problems, fmt.Sprintf("%s sink holds %d events, %d were accepted", sink, got, rep.EventsAccepted))
		}
	}
	if rep.EventsLost > 0 {
		problems = append(problems, fmt.Sprintf("%d events lost", rep.EventsLost))
	}
	if rep.GoroutinesEnd > rep.GoroutinesStart+50 {
		problems = append(problems, fmt.Sprintf("goroutines grew from %d to %d", rep.GoroutinesStart, rep.GoroutinesEnd))
	}
	if rep.HeapEndMiB > 2*rep.HeapStartMiB+64 {
		problems = append(problems, fmt.Sprintf("heap grew from %.1f to %.1f MiB", rep.HeapStartMiB, rep.HeapEndMiB))
	}
	if len(problems) > 0 {
		return rep, errors.New(strings.Join(problems, "; "))
	}
	return rep, nil
}

// setReply makes every upstream answer the status (0 = the scripted default).
func setReply(up *testkit.Upstream, status int) {
	up.Configure(func(u *testkit.Upstream) {
		if status == 0 {
			u.Reply = nil
			return
		}
		u.Reply = func(gjson.Result) testkit.Reply { return testkit.Reply{Status: status, ErrorMsg: "injected"} }
	})
}

func warm(base, admin string) {
	for i := range 20 {
		agentRun(http.DefaultClient, base, admin, -i, new(atomic.Int64), func(string) {})
	}
}

// agentRun plays one agent: turns of a growing conversation without episode headers
// (camproxy stitches them), then a reward.
func agentRun(client *http.Client, base, admin string, id int, requests *atomic.Int64, outcome func(string)) {
	rng := rand.New(rand.NewPCG(uint64(id), 7))
	msgs := []map[string]any{
		{"role": "system", "content": "You are an airline agent."},
		{"role": "user", "content": fmt.Sprintf("Task %d: change reservation %06d to the next flight and keep the seat.", id%500, id)},
	}
	turns := 1 + rng.IntN(4)
	episode := ""
	defer func() {
		if episode == "" {
			return
		}
		fb := fmt.Sprintf(`{"episode_id":%q,"reward":%g}`, episode, float64(rng.IntN(2)))
		if resp, err := client.Post(admin+"/v1/feedback", "application/json", strings.NewReader(fb)); err == nil {
			resp.Body.Close()
		}
	}()
	for turn := range turns {
		stream := rng.IntN(5) == 0
		leave := stream && rng.IntN(4) == 0
		body, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": msgs, "stream": stream})
		requests.Add(1)
		resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			outcome("transport: " + trimErr(err))
			return
		}
		if episode == "" {
			episode = resp.Header.Get("X-CAM-Episode-Id")
		}
		if leave { // read one event and go away
			_, _ = bufio.NewReader(resp.Body).ReadString('\n')
			resp.Body.Close()
			outcome("client left mid-stream")
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			outcome(fmt.Sprintf("%d, body broken (%s)", resp.StatusCode, trimErr(err)))
			return
		case resp.StatusCode != 200:
			outcome(fmt.Sprintf("%d %s", resp.StatusCode, gjson.GetBytes(b, "error.type").String()))
			return
		case stream && !strings.Contains(string(b), "[DONE]"):
			outcome("200, stream cut short")
			return
		}
		outcome("200")
		if stream {
			return // a real agent would assemble the deltas; this one ends its run here
		}
		// The next turn carries the model's answer as it came, as agents do: that is what
		// camproxy stitches the episode by.
		var answer map[string]any
		_ = json.Unmarshal([]byte(gjson.GetBytes(b, "choices.0.message").Raw), &answer)
		msgs = append(msgs, answer)
		if calls := gjson.GetBytes(b, "choices.0.message.tool_calls.0.id"); calls.Exists() {
			msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": calls.String(), "content": `{"status":"ok"}`})
		} else {
			msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("and then? (%d)", turn)})
		}
	}
}

func trimErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}

// readIDs counts the distinct events and the episodes a sink holds.
func readIDs(ctx context.Context, uri string) (int, int, error) {
	src, err := replay.OpenSource(ctx, uri)
	if err != nil {
		return 0, 0, err
	}
	if c, ok := src.(io.Closer); ok {
		defer c.Close()
	}
	ids := map[string]bool{}
	episodes := map[string]bool{}
	err = src.Scan(ctx, func(line []byte) error {
		id := gjson.GetBytes(line, "id").String()
		ids[id] = true
		if gjson.GetBytes(line, "type").String() == replay.TypeEpisode {
			episodes[gjson.GetBytes(line, "episode_id").String()] = true
		}
		return nil
	})
	return len(ids), len(episodes), err
}

// accepted is how many events the recorder took: each is written to each sink or
// spooled for it (or lost); the file sink's count is the total.
func accepted(a *app.App) int {
	total := 0
	for _, t := range []string{replay.TypeEpisode, replay.TypeStep, replay.TypeReward} {
		for _, res := range []string{"written", "spooled", "lost"} {
			total += int(testutil.ToFloat64(a.Metrics.ReplayEvents.WithLabelValues(t, "file", res)))
		}
	}
	return total
}

func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, resident int64
	fmt.Sscan(string(b), &size, &resident)
	return float64(resident*int64(os.Getpagesize())) / (1 << 20)
}

func heapMiB() float64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse) / (1 << 20)
}
