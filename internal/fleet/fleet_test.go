package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/app"
	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
)

// childEnv marks a run of this test binary as one camproxy process of the fleet.
const childEnv = "CAMPROXY_FLEET_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(serveChild())
	}
	testkit.QuietRedis() // the tests kill masters on purpose
	os.Exit(m.Run())
}

// serveChild is one camproxy process: the config comes from the environment, the
// bound addresses go to stdout as one READY line, SIGTERM shuts it down.
func serveChild() int {
	cfg := config.Default()
	cfg.Server.Listen, cfg.Server.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstreams["openai"].BaseURL = os.Getenv("FLEET_UPSTREAM")
	ac := config.DefaultAugmenter()
	ac.Type, ac.BaseURL, ac.Timeout = config.AugmenterCAM, os.Getenv("FLEET_CAM")+"/v1", 30*time.Second
	cfg.Augmenters = map[string]config.Augmenter{"cam": ac}
	// Two arms on one augmenter: every task costs one CAM call whatever its arm, and
	// adaptive allocation keeps reward statistics (shared through Redis).
	cfg.Experiment.Name = os.Getenv("FLEET_EXPERIMENT")
	cfg.Experiment.Arms = []config.Arm{{Name: "cam-a", Weight: 1, Augmenter: "cam"}, {Name: "cam-b", Weight: 1, Augmenter: "cam"}}
	cfg.Experiment.Adaptive.Enabled = true
	cfg.Experiment.Adaptive.MinEpisodes = 1000
	cfg.Cache.RedisURL = os.Getenv("FLEET_REDIS")
	cfg.Episodes.Store = config.StoreRedis
	dir := os.Getenv("FLEET_DIR")
	cfg.Replay.Sinks = []string{"file://" + dir + "/replay"}
	cfg.Replay.SpoolDir = dir + "/spool"
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := app.New(cfg, app.Options{Logger: log, RedisCooldown: 300 * time.Millisecond,
		// The fleet's checks count one CAM call per task across processes: a context
		// cache read that outlived the 500 ms default on a loaded CI machine was taken
		// for an outage, and that process called the CAM again. Outages here are
		// killed masters, which fail at once or within this.
		CacheRedisTimeout: 3 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := a.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("READY %s %s\n", a.Addr(), a.AdminAddr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		return 1
	}
	return 0
}

// proc is one camproxy process of the fleet.
type proc struct {
	cmd         *exec.Cmd
	base, admin string
}

// fleet is three camproxy processes sharing redisURL, a scripted upstream and a CAM
// whose every answer is numbered (two CAM calls for one task give two contexts).
type fleet struct {
	t     *testing.T
	procs []*proc
	up    *testkit.Upstream
	cam   *testkit.CAM
	exp   string
	seq   atomic.Int64
}

func startFleet(t *testing.T, redisURL string) *fleet {
	t.Helper()
	f := &fleet{t: t, up: testkit.NewUpstream(), cam: testkit.NewCAM(), exp: "fleet-" + strings.ToLower(t.Name())}
	t.Cleanup(f.up.Close)
	t.Cleanup(f.cam.Close)
	f.cam.SetDelay(100 * time.Millisecond) // concurrent first turns overlap
	f.cam.SetContext(func(task string) string { return fmt.Sprintf("Guidance #%d for: %s", f.seq.Add(1), task) })
	t.Cleanup(f.stop)
	for i := range 3 {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		// GORACE: a race binary sleeps a second at exit to catch late race reports; a
		// camproxy process has none left to make once it has shut down. (The caller's
		// own GORACE options are kept.)
		cmd.Env = append(os.Environ(), childEnv+"=1", "FLEET_UPSTREAM="+f.up.URL, "FLEET_CAM="+f.cam.URL,
			"FLEET_REDIS="+redisURL, "FLEET_DIR="+dir, "FLEET_EXPERIMENT="+f.exp,
			"GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
		cmd.Stderr = &testkit.SyncBuffer{}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &proc{cmd: cmd}
		f.procs = append(f.procs, p)
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			t.Fatalf("camproxy %d did not start: %v\n%s", i, err, cmd.Stderr.(*testkit.SyncBuffer).String())
		}
		var data, admin string
		if _, err := fmt.Sscanf(line, "READY %s %s", &data, &admin); err != nil {
			t.Fatalf("camproxy %d: %q", i, line)
		}
		go func() { _, _ = io.Copy(io.Discard, stdout) }()
		p.base, p.admin = "http://"+data, "http://"+admin
	}
	return f
}

// stop shuts the processes down together and fails the test if one did not exit
// cleanly: a failed shutdown exits 1, a data race 66.
func (f *fleet) stop() {
	for _, p := range f.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for i, p := range f.procs {
		err := p.cmd.Wait()
		if err != nil {
			f.t.Errorf("camproxy %d: %v", i, err)
		}
		if f.t.Failed() {
			f.t.Logf("camproxy %d stderr:\n%s", i, p.cmd.Stderr.(*testkit.SyncBuffer).String())
		}
	}
}

// run is one agent run: a conversation whose turns any process may serve.
type run struct {
	task    string
	msgs    []json.RawMessage
	episode string
	context string // the task message as the upstream saw it on the first turn
}

func newRun(task string, n int) *run {
	r := &run{task: task}
	r.add(map[string]any{"role": "system", "content": fmt.Sprintf("You are an airline agent (run %d). Follow the policy.", n)})
	r.add(map[string]any{"role": "user", "content": task})
	return r
}

func (r *run) add(m any) {
	b, _ := json.Marshal(m)
	r.msgs = append(r.msgs, b)
}

// turn sends the run's conversation to process p and checks the fleet's promises:
// a 200, the same episode as the run's earlier turns and the same task message
// (task ⊕ context). It reports an error instead of failing, so runs may go in
// parallel; check says whether to compare with the earlier turns (false during an
// outage, when a run may lose its episode).
func (f *fleet) turn(r *run, p *proc, check bool) error {
	body, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": r.msgs,
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "lookup", "parameters": map[string]any{"type": "object"}}}}})
	req, _ := http.NewRequest(http.MethodPost, p.base+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-client")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		return fmt.Errorf("status %d: %s %v", resp.StatusCode, b, err)
	}
	ep := resp.Header.Get("X-CAM-Episode-Id")
	first := r.episode == ""
	if !first && check && ep != r.episode {
		return fmt.Errorf("%q turn %d: episode %s, was %s (X-CAM-Context %s)", r.task, len(r.msgs)/2, ep, r.episode, resp.Header.Get("X-CAM-Context"))
	}
	// The task message the upstream got for this conversation: the one request whose
	// messages are exactly ours but with the context spliced into the task.
	sent := f.sentTask(r)
	if first {
		r.episode, r.context = ep, sent
	} else if check && sent != r.context {
		return fmt.Errorf("%q: the task message changed:\n%q\nwas\n%q", r.task, sent, r.context)
	}
	msg := gjson.GetBytes(b, "choices.0.message")
	r.msgs = append(r.msgs, json.RawMessage(msg.Raw))
	if calls := msg.Get("tool_calls").Array(); len(calls) > 0 {
		r.add(map[string]any{"role": "tool", "tool_call_id": calls[0].Get("id").String(), "content": `{"status":"on time"}`})
	} else {
		r.add(map[string]any{"role": "user", "content": "thanks, one more thing"})
	}
	return nil
}

// sentTask finds the upstream request of r's latest turn (its system message and
// length identify it) and returns its task message.
func (f *fleet) sentTask(r *run) string {
	sys := gjson.GetBytes(r.msgs[0], "content").String()
	reqs := f.up.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		b := reqs[i].Body
		task := gjson.GetBytes(b, "messages.1.content").String()
		if gjson.GetBytes(b, "messages.0.content").String() == sys && strings.HasPrefix(task, r.task) &&
			int(gjson.GetBytes(b, "messages.#").Int()) == len(r.msgs) {
			return task
		}
	}
	return ""
}

// conversations runs tasks×2 runs of 3 turns: both runs of a task start at once on
// different processes, and every later turn goes to the next process. It returns
// the runs; errors fail the test.
func (f *fleet) conversations(prefix string, tasks int) []*run {
	f.t.Helper()
	var runs []*run
	var wg sync.WaitGroup
	errs := make(chan error, 2*tasks)
	for i := range tasks {
		task := fmt.Sprintf("%s task %d: move my flight to Friday", prefix, i)
		for k := range 2 {
			r := newRun(task, k)
			runs = append(runs, r)
			wg.Go(func() {
				for turn := range 3 {
					if err := f.turn(r, f.procs[(i+k+turn)%3], true); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		f.t.Error(err)
	}
	if f.t.Failed() {
		f.t.FailNow()
	}
	for i := 0; i < len(runs); i += 2 {
		if runs[i].context != runs[i+1].context || !strings.Contains(runs[i].context, "Guidance #") {
			f.t.Fatalf("two runs of one task got different contexts (two CAM calls?):\n%q\n%q", runs[i].context, runs[i+1].context)
		}
	}
	return runs
}

func (p *proc) metric(t *testing.T, name string) string {
	return testkit.MetricLines(t, p.admin, name)
}

// allReady waits until every process says ready with every Redis part up.
func (f *fleet) allReady() {
	f.t.Helper()
	testkit.Eventually(f.t, "every process ready, no part on fallback", func() bool {
		for _, p := range f.procs {
			if code, status, _ := testkit.Readyz(p.admin); code != 200 || status != "ready" {
				return false
			}
			if strings.Contains(p.metric(f.t, "camproxy_dependency_up"), "} 0") {
				return false
			}
		}
		return true
	})
}

// feedback posts a reward for each run to a process other than its last turn's:
// the episode must be known fleet-wide.
func (f *fleet) feedback(runs []*run) {
	f.t.Helper()
	for i, r := range runs {
		body := fmt.Sprintf(`{"episode_id":%q,"reward":1,"success":true}`, r.episode)
		resp, err := http.Post(f.procs[i%3].admin+"/v1/feedback", "application/json", strings.NewReader(body))
		if err != nil {
			f.t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 202 {
			f.t.Fatalf("feedback for %s on process %d: %d", r.episode, i%3, resp.StatusCode)
		}
	}
}

// rewardsCounted is what the shared statistics hold for the experiment: rewarded
// episodes over both arms.
func (f *fleet) rewardsCounted(ctx context.Context, rdb redis.UniversalClient) int {
	n := 0
	for _, arm := range []string{"cam-a", "cam-b"} {
		v, _ := rdb.HGet(ctx, "camproxy:exp:{"+f.exp+"}:arm:"+arm, "n").Float64()
		n += int(v)
	}
	return n
}

// checkFleet is the fleet's promises on 8 new tasks: every run one episode with one
// context across the three processes, one CAM call per task, statistics shared.
func (f *fleet) checkFleet(ctx context.Context, prefix string, rdb redis.UniversalClient) string {
	f.t.Helper()
	calls, counted := f.cam.Calls(), f.rewardsCounted(ctx, rdb)
	runs := f.conversations(prefix, 8)
	if n := f.cam.Calls() - calls; n != 8 {
		f.t.Fatalf("%s: %d CAM calls for 8 tasks on 3 processes, want 8", prefix, n)
	}
	f.feedback(runs)
	rewards := f.rewardsCounted(ctx, rdb) - counted
	if rewards != len(runs) {
		f.t.Fatalf("%s: shared statistics counted %d rewards posted to 3 processes, want %d", prefix, rewards, len(runs))
	}
	return fmt.Sprintf("%s: 8 tasks, %d runs → %d CAM calls, one episode and context per run, %d rewards counted",
		prefix, len(runs), f.cam.Calls()-calls, rewards)
}

// outage runs conversations on the fleet until done() while a Redis master is down:
// every call must still answer 200 (episodes may split meanwhile), and a process must
// say degraded naming a part.
func (f *fleet) outage(prefix string, done func() bool) (seen map[string]string, calls int) {
	f.t.Helper()
	seen = map[string]string{}
	for i := 0; ; i++ {
		r := newRun(fmt.Sprintf("%s task %d", prefix, i), 0)
		for turn := range 2 {
			if err := f.turn(r, f.procs[(i+turn)%3], false); err != nil {
				f.t.Fatalf("a call failed during the outage: %v", err)
			}
			calls++
		}
		for _, p := range f.procs {
			if code, status, deg := testkit.Readyz(p.admin); status == "degraded" {
				if code != 200 {
					f.t.Fatalf("degraded but %d: Redis down must not take a process out of service", code)
				}
				for k, v := range deg {
					seen[k] = v
				}
			}
		}
		if done() && len(seen) > 0 {
			return seen, calls
		}
	}
}

// TestFleetOnCluster: three camproxy processes on a real 6-node Redis Cluster. 8
// tasks, 2 runs each, every turn on another process: one CAM call per task, each
// run one episode with one context, rewards counted once in the shared statistics.
// Then the master holding the stitching tips is killed mid-run: calls keep
// answering, /readyz says degraded naming the part while it is on its fallback,
// then every process is ready again and the same checks pass.
func TestFleetOnCluster(t *testing.T) {
	t.Parallel() // with TestFleetOnSentinel: each waits on its own Redis processes
	c := testkit.StartRedisCluster(t)
	rdb := c.Client()
	defer rdb.Close()
	ctx := t.Context()
	f := startFleet(t, c.URL())
	f.allReady()
	f.checkFleet(ctx, "before", rdb)

	m, err := c.MasterOf(ctx, "{camproxy:tip}")
	if err != nil {
		t.Fatal(err)
	}
	m.Kill()
	seen, calls := f.outage("outage", func() bool { return c.Healthy(ctx) })
	if _, ok := seen["redis:episodes"]; !ok {
		t.Fatalf("readyz never named the episode store while its master was down: %v", seen)
	}
	t.Logf("degraded during the failover: %v", seen)
	f.allReady()
	faultRow(t, "Redis Cluster", seen, calls, f.checkFleet(ctx, "after", rdb))
}

// faultRow is the fault matrix's row (make faults) of a failover: what was measured.
func faultRow(t *testing.T, what string, seen map[string]string, calls int, after string) {
	parts := slices.Sorted(maps.Keys(seen))
	testkit.FaultRow(t, "redis", what+" master killed, 3 processes",
		fmt.Sprintf("%d calls during the election, all 200; readyz degraded naming %s, then ready", calls, strings.Join(parts, ", ")),
		after)
}

// TestFleetOnSentinel: the same fleet on a Sentinel setup (a master, its replica,
// three sentinels); the master is killed and the sentinels promote the replica.
func TestFleetOnSentinel(t *testing.T) {
	t.Parallel()
	s := testkit.StartRedisSentinel(t)
	rdb := testkit.RedisURLClient(t, s.URL())
	ctx := t.Context()
	f := startFleet(t, s.URL())
	f.allReady()
	f.checkFleet(ctx, "before", rdb)

	m, err := s.CurrentMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m.Kill()
	seen, calls := f.outage("outage", func() bool {
		now, err := s.CurrentMaster(ctx)
		return err == nil && now != m
	})
	t.Logf("degraded during the failover: %v", seen)
	f.allReady()
	faultRow(t, "Sentinel", seen, calls, f.checkFleet(ctx, "after", rdb))
}
