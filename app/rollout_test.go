package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/metrics"
	"github.com/camproxy/camproxy/replay"
)

// harness is a scripted agent harness: asked to run an episode, it drives a two-turn
// conversation through camproxy's data plane with the headers it was given, then posts
// a reward that depends on what the model answered (the upstream echoes the task
// message it saw, context included).
type harness struct {
	*httptest.Server
	env  atomic.Pointer[env] // set once camproxy runs (it needs the harness's URL first)
	mute atomic.Bool         // accept jobs and never report

	inflight, peak atomic.Int64 // agent runs under way, and the most at once
	// gate, if set, holds every agent run until gate.n runs are under way at once:
	// concurrency shown by an event, not by timing a batch against one run.
	gate atomic.Pointer[barrier]
}

// barrier opens once n runs have arrived. When they cannot all arrive — camproxy
// serves fewer rollouts at a time than n — it gives up instead of waiting for the
// test's deadline, on a signal, not a timeout: the runs that arrived hold every slot
// camproxy gave out (camproxy_rollouts_in_flight) and all the other rollouts wait for
// one (camproxy_rollouts_queued). No more can come then, since a slot frees only when
// a run ends, and the runs are held here. The arrived runs go on (the others follow as
// slots free), and the check fails with what was seen.
type barrier struct {
	n       int64
	arrived atomic.Int64
	open    chan struct{} // n runs arrived
	stuck   chan struct{} // no more can arrive: seen says why
	seen    string
}

func newBarrier(n int) *barrier {
	return &barrier{n: int64(n), open: make(chan struct{}), stuck: make(chan struct{})}
}

// wait blocks until n runs have arrived or no more can. A run held back some other way
// than by a rollout slot still ends the wait at the test's patience (then the run goes
// on and the check fails on the peak it saw).
func (b *barrier) wait(t *testing.T) {
	if b.arrived.Add(1) == b.n {
		close(b.open)
	}
	select {
	case <-b.open:
	case <-b.stuck:
	case <-time.After(testkit.Patience(t)):
	}
}

// watch closes stuck once no more runs can arrive (see barrier), as camproxy's rollout
// gauges m tell; it returns then, once the barrier opened, or once done is closed.
func (b *barrier) watch(t *testing.T, m *metrics.Metrics, done <-chan struct{}) {
	testkit.Poll(t, func() bool {
		select {
		case <-b.open:
			return true
		case <-done:
			return true
		default:
		}
		// Until the barrier opens no run ends, so no slot frees: once every slot holder
		// has arrived and the rest are queued, it stays so.
		arrived := b.arrived.Load()
		inFlight, queued := int64(testutil.ToFloat64(m.RolloutsInFlight)), int64(testutil.ToFloat64(m.RolloutsQueued))
		if arrived == b.n || inFlight != arrived || arrived+queued != b.n {
			return false
		}
		b.seen = fmt.Sprintf("%d of them had their agent run under way, holding every slot camproxy gave out, while the other %d waited for a slot", arrived, queued)
		close(b.stuck)
		return true
	})
}

func newHarness(t *testing.T) *harness {
	h := &harness{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		job := gjson.ParseBytes(body)
		w.WriteHeader(http.StatusAccepted)
		if h.mute.Load() {
			return
		}
		go h.run(t, job)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *harness) run(t *testing.T, job gjson.Result) {
	n := h.inflight.Add(1)
	defer h.inflight.Add(-1)
	for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
	}
	if g := h.gate.Load(); g != nil {
		g.wait(t)
	}
	e := h.env.Load()
	a := newAgent(job.Get("task").String(), true)
	a.episode = job.Get("headers.X-CAM-Episode-Id").String()
	var saw string
	for range 2 {
		resp, body := e.post(a.body(""), map[string]string{"X-CAM-Episode-Id": a.episode, "X-CAM-Task-Id": job.Get("headers.X-CAM-Task-Id").String()})
		if resp.StatusCode != 200 {
			t.Errorf("harness call: %d", resp.StatusCode)
			return
		}
		msg := gjson.GetBytes(body, "choices.0.message")
		saw += msg.Get("content").String()
		a.msgs = append(a.msgs, json.RawMessage(msg.Raw))
		a.add(map[string]any{"role": "user", "content": "go on"})
	}
	reward := 0.25
	if strings.Contains(saw, "GOOD") {
		reward = 1
	}
	postFeedback(t, e.admin, job.Get("episode_id").String(), reward)
}

func postRollout(t *testing.T, admin string, taskID int, context string, timeout float64) (int, gjson.Result) {
	body, _ := json.Marshal(map[string]any{"task_id": fmt.Sprint(taskID), "task": fmt.Sprintf("Task number %d: rebook the flight.", taskID),
		"context": context, "timeout_s": timeout})
	resp, err := http.Post(admin+"/v1/rollouts", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, gjson.Result{}
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, gjson.ParseBytes(out)
}

func newRolloutEnv(t *testing.T) (*env, *harness) { return newRolloutEnvWith(t, 64) }

// newRolloutEnvWith is newRolloutEnv with rollouts.max_in_flight set to maxInFlight.
func newRolloutEnvWith(t *testing.T, maxInFlight int) (*env, *harness) {
	h := newHarness(t)
	e := newEnv(t, func(c *config.Config) {
		c.Rollouts.Runner = h.URL
		c.Rollouts.MaxInFlight = maxInFlight
	})
	h.env.Store(e)
	// The upstream echoes the task message it received: the context is in it.
	e.up.Configure(func(u *testkit.Upstream) {
		u.Reply = func(body gjson.Result) testkit.Reply {
			return testkit.Reply{Content: "I saw: " + body.Get("messages.1.content").String()}
		}
	})
	return e, h
}

// TestRolloutRewardFollowsContext: the reward of a rollout is the reward the harness
// gave the episode that ran with exactly that context.
func TestRolloutRewardFollowsContext(t *testing.T) {
	e, _ := newRolloutEnv(t)
	for _, c := range []struct {
		context string
		want    float64
	}{{"GOOD: check the fare rules first.", 1}, {"BAD: guess.", 0.25}} {
		code, out := postRollout(t, e.admin, 7, c.context, 10)
		if code != 200 || out.Get("reward").Float() != c.want || out.Get("turns").Int() != 2 {
			t.Fatalf("rollout with %q: %d %s", c.context, code, out.Raw)
		}
		if !strings.Contains(string(e.up.Last().Body), jsonText(c.context)) {
			t.Fatalf("the agent's calls did not carry the rollout's context: %s", e.up.Last().Body)
		}
	}
	if e.cam.Calls() != 0 {
		t.Fatal("a rollout's context is fixed: the CAM must not be asked")
	}
	ep := readEpisodeByArm(t, e, "rollout")
	if ep.Context != "BAD: guess." && ep.Context != "GOOD: check the fare rules first." || ep.Steps != 2 || ep.Reward == nil {
		t.Fatalf("recorded rollout episode: %+v", ep)
	}
}

// readEpisodeByArm shuts camproxy down and returns the last recorded episode of arm.
func readEpisodeByArm(t *testing.T, e *env, arm string) *replay.Episode {
	t.Helper()
	ctx := context.Background() // no deadline of its own: a hang meets go test's -timeout
	if err := e.app.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	src, _ := replay.OpenSource(ctx, e.cfg.Replay.Sinks[0])
	buf, err := replay.Read(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	var last *replay.Episode
	for _, ep := range buf.Episodes {
		if ep.Arm == arm {
			last = ep
		}
	}
	if last == nil {
		t.Fatalf("no %s episode recorded", arm)
	}
	return last
}

// TestRolloutsConcurrent: veRL scores a whole batch at once; 32 rollouts are served
// at the same time, not one after another: the harness holds every agent run until
// all 32 are under way, which only concurrent rollouts get to. The same check run
// against rollouts served one at a time (rollouts.max_in_flight: 1) fails, at once,
// saying so — it does not wait for go test's -timeout.
func TestRolloutsConcurrent(t *testing.T) {
	t.Run("concurrent", func(t *testing.T) {
		e, h := newRolloutEnv(t)
		if code, _ := postRollout(t, e.admin, 1, "GOOD", 10); code != 200 {
			t.Fatalf("single rollout: %d", code)
		}
		if err := rolloutsAtOnce(t, e, h, 32); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("one at a time fails the check", func(t *testing.T) {
		e, h := newRolloutEnvWith(t, 1)
		err := rolloutsAtOnce(t, e, h, 32)
		if err == nil || !strings.Contains(err.Error(), "the 32 rollouts were not concurrent") {
			t.Fatalf("rollouts served one at a time: the check said %v", err)
		}
		t.Logf("the check failed as it should: %v", err)
	})
}

// rolloutsAtOnce posts n rollouts at once and says why unless the harness had all n
// agent runs under way at the same time, each rewarded.
func rolloutsAtOnce(t *testing.T, e *env, h *harness, n int) error {
	h.peak.Store(0)
	b := newBarrier(n)
	h.gate.Store(b)
	defer h.gate.Store(nil)
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		b.watch(t, e.app.Metrics, done)
	}()
	// A rollout's timeout_s is camproxy's to enforce; here it only has to outlast a
	// loaded machine, so it is the test's whole patience.
	timeout := testkit.Patience(t).Seconds()
	var wg sync.WaitGroup
	var mu sync.Mutex
	rewards := 0.0
	var failed []string
	for i := range n {
		wg.Go(func() {
			code, out := postRollout(t, e.admin, i, "GOOD", timeout)
			mu.Lock()
			defer mu.Unlock()
			if code != 200 {
				failed = append(failed, fmt.Sprintf("rollout %d: %d %s", i, code, out.Raw))
			}
			rewards += out.Get("reward").Float()
		})
	}
	wg.Wait()
	close(done)
	<-watched
	select {
	case <-b.stuck:
		return fmt.Errorf("the %d rollouts were not concurrent: %s", n, b.seen)
	default:
	}
	switch {
	case len(failed) > 0:
		return errors.New(strings.Join(failed, "; "))
	case rewards != float64(n):
		return fmt.Errorf("rewards summed to %v, want %d", rewards, n)
	case h.peak.Load() != int64(n):
		return fmt.Errorf("at most %d agent runs at once: the %d rollouts were not served concurrently", h.peak.Load(), n)
	}
	return nil
}

// TestRolloutTimeout: a runner that never reports yields a 504 with the reason, not a hang.
func TestRolloutTimeout(t *testing.T) {
	e, h := newRolloutEnv(t)
	h.mute.Store(true)
	code, out := postRollout(t, e.admin, 3, "ctx", 0.5)
	if code != 504 || !strings.Contains(out.Get("error.message").String(), "no reward posted to /v1/feedback within 500ms") {
		t.Fatalf("mute runner: %d %s", code, out.Raw)
	}
}
