package app

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
)

// splicedTask is the task message the upstream received in a call.
func splicedTask(body []byte) string {
	return gjson.GetBytes(body, "messages.1.content").String()
}

// TestFiveTurnsOneContext: every turn of an episode gets byte-identical context and the
// CAM is asked once, whether the agent names the episode or camproxy stitches it.
func TestFiveTurnsOneContext(t *testing.T) {
	for _, header := range []bool{true, false} {
		t.Run(fmt.Sprintf("header=%v", header), func(t *testing.T) {
			e := newEnv(t, nil)
			a := newAgent("Cancel reservation 4WQ150 for Ethan.", header)
			if header {
				a.episode = "ep-five-turns"
			}
			var ctxs []string
			for i := range 5 {
				h := e.turn(a)
				want := "episode"
				if i == 0 {
					want = "miss"
				}
				if got := h.Get("X-CAM-Context"); got != want {
					t.Fatalf("turn %d: X-CAM-Context %q, want %q", i, got, want)
				}
				if h.Get("X-CAM-Episode-Id") != a.episode {
					t.Fatalf("turn %d moved to episode %s (was %s)", i, h.Get("X-CAM-Episode-Id"), a.episode)
				}
				ctxs = append(ctxs, splicedTask(e.up.Last().Body))
			}
			for i, c := range ctxs {
				if c != ctxs[0] {
					t.Fatalf("turn %d context differs:\n%q\n%q", i, c, ctxs[0])
				}
			}
			if e.cam.Calls() != 1 {
				t.Fatalf("CAM called %d times, want 1", e.cam.Calls())
			}
			// The cache is flushed and the CAM now says something else: the live episode
			// keeps its context.
			e.app.Cache.Flush(context.Background())
			e.cam.SetContext(func(string) string { return "NEW CONTEXT" })
			e.turn(a)
			if got := splicedTask(e.up.Last().Body); got != ctxs[0] {
				t.Fatalf("after flush the episode's context changed to %q", got)
			}
		})
	}
}

// TestSixParallelRuns: six runs of one task start together: six episodes, one CAM call,
// and each run's next turn continues its own episode even though their histories are
// identical.
func TestSixParallelRuns(t *testing.T) {
	e := newEnv(t, nil)
	e.cam.SetDelay(100 * time.Millisecond)
	agents := make([]*agent, 6)
	var wg sync.WaitGroup
	for i := range agents {
		agents[i] = newAgent("Book the cheapest flight from SFO to JFK on May 20.", false)
		wg.Go(func() { e.turn(agents[i]) })
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, a := range agents {
		seen[a.episode] = true
	}
	if len(seen) != 6 {
		t.Fatalf("six runs became %d episodes", len(seen))
	}
	if e.cam.Calls() != 1 {
		t.Fatalf("CAM called %d times for six concurrent first turns, want 1", e.cam.Calls())
	}
	var mu sync.Mutex
	continued := map[string]int{}
	for _, a := range agents {
		wg.Go(func() {
			before := a.episode
			a.episode = ""
			e.turn(a)
			if !seen[a.episode] {
				t.Errorf("turn 2 started a new episode %s instead of continuing one of the six (was %s)", a.episode, before)
			}
			mu.Lock()
			continued[a.episode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	for id, n := range continued {
		if n != 1 {
			t.Fatalf("episode %s continued by %d runs", id, n)
		}
	}
}

// TestTwoProcessesShareRedis: two camproxy processes on one Redis make one CAM call
// between them, and an episode started on one continues on the other.
func TestTwoProcessesShareRedis(t *testing.T) {
	requireRedis(t)
	// A slow moment of a loaded machine (make test runs packages side by side) is not
	// a Redis outage: the cache would fall back to local and call the CAM twice.
	o := Options{Logger: testLogger(t), CacheRedisTimeout: 3 * time.Second}
	e := newEnvWith(t, func(c *config.Config) {
		c.Cache.RedisURL = "redis://127.0.0.1:6379/0"
		c.Episodes.Store = "redis"
	}, o)
	e.cam.SetDelay(100 * time.Millisecond)
	cfg2 := *e.cfg
	dir := t.TempDir()
	cfg2.Replay.Sinks = []string{"file://" + dir + "/replay"}
	cfg2.Replay.SpoolDir = dir + "/spool"
	second := startAppWith(t, &cfg2, o)
	e2 := &env{t: t, up: e.up, cam: e.cam, app: second, base: "http://" + second.Addr()}

	task := fmt.Sprintf("Upgrade reservation %d to business class.", time.Now().UnixNano())
	// Same task (one cache key), different agents: their histories differ from the
	// system prompt on, so stitching cannot confuse them.
	a1, a2 := newAgent(task, false), newAgent(task, false)
	a2.msgs[0] = json.RawMessage(`{"role":"system","content":"You are the second agent."}`)
	var wg sync.WaitGroup
	wg.Go(func() { e.turn(a1) })
	wg.Go(func() { e2.turn(a2) })
	wg.Wait()
	if e.cam.Calls() != 1 {
		t.Fatalf("two processes made %d CAM calls, want 1", e.cam.Calls())
	}
	first := a1.episode
	a1.episode = ""
	h := e2.turn(a1) // turn 2 lands on the other process
	if h.Get("X-CAM-Episode-Id") != first || h.Get("X-CAM-Context") != "episode" {
		t.Fatalf("turn 2 on process 2: episode %s context %s, want %s/episode", h.Get("X-CAM-Episode-Id"), h.Get("X-CAM-Context"), first)
	}
	if got := splicedTask(e.up.Last().Body); got != task+"\n\nGuidance for: "+task+"\n- check the policy first." {
		t.Fatalf("turn 2 context = %q", got)
	}
}

// TestFailedTurnReleasesItsClaim: two runs with identical histories; run A's second
// call fails and is retried. The retry must continue A's episode, not take B's.
func TestFailedTurnReleasesItsClaim(t *testing.T) {
	e := newEnv(t, nil)
	var mu sync.Mutex
	failNext := false
	e.up.Configure(func(u *testkit.Upstream) {
		u.Reply = func(body gjson.Result) testkit.Reply {
			mu.Lock()
			defer mu.Unlock()
			if failNext {
				failNext = false
				return testkit.Reply{Status: 429, ErrorMsg: "slow down"}
			}
			return testkit.DefaultReply(body)
		}
	})
	a, b := newAgent("Same task for two runs", false), newAgent("Same task for two runs", false)
	e.turn(a)
	e.turn(b)
	epA, epB := a.episode, b.episode
	mu.Lock()
	failNext = true
	mu.Unlock()
	if resp, _ := e.post(a.body(""), nil); resp.StatusCode != 429 {
		t.Fatalf("expected the scripted 429, got %d", resp.StatusCode)
	}
	a.episode, b.episode = "", ""
	e.turn(a)
	e.turn(b)
	if a.episode != epA || b.episode != epB {
		t.Fatalf("after a failed turn and its retry: run A in %s (was %s), run B in %s (was %s)", a.episode, epA, b.episode, epB)
	}
}
