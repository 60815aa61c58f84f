package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/learn/learntest"
	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/playbook/storage"
	"github.com/camproxy/camproxy/replay"
)

// eventually polls cond for up to 45 s (slow under -race on a loaded machine), failing with what.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, what, cond)
}

// learnConfig turns on the learner with a fast clock: a baseline arm (the control),
// and the champion "ace", a playbook arm.
func learnConfig(t *testing.T, store string) func(*config.Config) {
	pbFile := filepath.Join(t.TempDir(), "ace.txt")
	if err := os.WriteFile(pbFile, []byte("## policy\n- Check the fare class before rebooking.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return func(c *config.Config) {
		c.Experiment.Name = fmt.Sprintf("learn-%d", time.Now().UnixNano())
		c.Experiment.AllowOverride = true
		ace := config.DefaultAugmenter()
		ace.Type, ace.File = config.AugmenterPlaybook, pbFile
		c.Augmenters["ace"] = ace
		c.Experiment.Arms = []config.Arm{{Name: "baseline", Weight: 1, Augmenter: "none"}, {Name: "ace", Weight: 1, Augmenter: "ace"}}
		// The adaptive guardrail judges late: these tests are about the learner's own verdicts.
		c.Experiment.Adaptive = config.Adaptive{UpdatePeriod: 20 * time.Millisecond, MinShare: 0.05, Alpha: 0.05, MinEpisodes: 1000}
		c.Learn.Enabled = true
		c.Learn.Model = "openai/unused" // the step is the fake
		c.Learn.Champion = "ace"
		c.Learn.Every = 5
		c.Learn.MinEpisodes = 6
		c.Learn.MaxCandidates = 2
		c.Learn.PromoteAlpha = 0.05
		c.Learn.Store = store
		c.Learn.CheckEvery = 20 * time.Millisecond
		c.Learn.LeaseTTL = 600 * time.Millisecond
	}
}

// armTurn runs one call of a new episode forced onto arm and returns the episode id
// and the context the upstream received.
func armTurn(t *testing.T, e *env, arm, task string) (string, string) {
	t.Helper()
	a := newAgent(task, false)
	resp, body := e.post(a.body(""), map[string]string{"X-CAM-Arm": arm})
	if resp.StatusCode != 200 {
		t.Fatalf("call on %s: %d %s", arm, resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-CAM-Arm"); got != arm {
		t.Fatalf("call forced onto %s ran on %q", arm, got)
	}
	return resp.Header.Get("X-CAM-Episode-Id"), strings.TrimPrefix(splicedTask(e.up.Last().Body), task)
}

// rewarded runs n episodes on arm, each rewarded r, and returns their ids.
func rewarded(t *testing.T, e *env, arm string, n int, r float64) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id, _ := armTurn(t, e, arm, fmt.Sprintf("Task %d on %s rewarded %v at %d.", i, arm, r, time.Now().UnixNano()))
		postFeedback(t, e.admin, id, r)
		ids = append(ids, id)
	}
	return ids
}

func status(t *testing.T, e *env) gjson.Result {
	t.Helper()
	resp, err := http.Get(e.admin + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return gjson.ParseBytes(v)
}

func activeArms(st gjson.Result) []string {
	var out []string
	for _, a := range st.Get("arms").Array() {
		if a.Get("active").Bool() {
			out = append(out, a.Get("name").String())
		}
	}
	slices.Sort(out)
	return out
}

func learnEvents(t *testing.T, e *env) []*replay.LearnEvent {
	t.Helper()
	return readBuffer(t, e).Learn
}

// readBuffer reads e's replay buffer (its first sink).
func readBuffer(t *testing.T, e *env) *replay.Buffer {
	t.Helper()
	ctx := context.Background()
	src, err := replay.OpenSource(ctx, e.cfg.Replay.Sinks[0])
	if err != nil {
		t.Fatal(err)
	}
	b, err := replay.Read(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hasEvent(evs []*replay.LearnEvent, action, arm string) *replay.LearnEvent {
	for _, ev := range evs {
		if ev.Action == action && ev.Arm == arm {
			return ev
		}
	}
	return nil
}

// TestLearnerPromotesAndStops drives the learner of one camproxy through feedback:
// the champion's rewarded episodes trigger a step, the version is written and tried
// as a candidate arm that gets traffic and serves its playbook; a better candidate is
// promoted (the old champion leaves, the control stays, live episodes keep their
// arm); a worse one is stopped. Every decision is a learn event in the buffer.
func TestLearnerPromotesAndStops(t *testing.T) {
	storeDir := filepath.Join(t.TempDir(), "playbook")
	fake := &learntest.Step{}
	e := newEnvWith(t, learnConfig(t, storeDir), Options{Logger: testLogger(t), LearnStep: fake.Step})
	versions := &storage.Versions{Store: mustDirStore(t, storeDir)}

	// The seed: the champion's playbook is version 1.
	eventually(t, "the seed version", func() bool {
		m, err := versions.Manifest(context.Background())
		return err == nil && m.Latest() == 1
	})
	if pb, err := versions.Load(context.Background(), 1); err != nil || len(pb.Entries) != 1 || !strings.Contains(pb.Entries[0].Content, "fare class") {
		t.Fatalf("seed version: %v %+v", err, pb)
	}

	// Four rewarded episodes of the champion are not enough; the fifth triggers a step.
	aceIDs := rewarded(t, e, "ace", 4, 0)
	time.Sleep(100 * time.Millisecond) // five rounds of the learner: it must not step yet
	if n := len(fake.Calls()); n != 0 {
		t.Fatalf("%d steps after 4 of every 5 episodes", n)
	}
	aceIDs = append(aceIDs, rewarded(t, e, "ace", 1, 0)...)
	eventually(t, "candidate learn-v2 in /v1/status", func() bool {
		return slices.Contains(activeArms(status(t, e)), "learn-v2")
	})
	calls := fake.Calls()
	if len(calls) != 1 || calls[0].Version != 2 || calls[0].Batch.Iteration != 1 || len(calls[0].Base.Entries) != 1 {
		t.Fatalf("first step: %d calls, %+v", len(calls), calls)
	}
	var batchIDs []string
	for _, it := range calls[0].Batch.Items {
		for _, ep := range []*replay.Episode{it.Failure, it.Success} {
			if ep == nil {
				continue
			}
			if ep.Arm != "ace" || ep.Reward == nil {
				t.Fatalf("the batch holds episode %s of arm %s (reward %v), not a rewarded champion episode", ep.ID, ep.Arm, ep.Reward)
			}
			batchIDs = append(batchIDs, ep.ID)
		}
	}
	slices.Sort(batchIDs)
	slices.Sort(aceIDs)
	if !slices.Equal(batchIDs, aceIDs) {
		t.Fatalf("batch %v, want the champion's rewarded episodes %v", batchIDs, aceIDs)
	}
	v2, err := versions.Load(context.Background(), 2)
	if err != nil || v2.Index("learnt-2") < 0 {
		t.Fatalf("version 2 in the store: %v %+v", err, v2)
	}
	m, _ := versions.Manifest(context.Background())
	if row, ok := m.Get(2); !ok || row.Parent != 1 || row.Iteration != 1 || row.Summary != "summary of step 1" {
		t.Fatalf("manifest row of v2: %+v", row)
	}
	st := status(t, e)
	if got := activeArms(st); !slices.Equal(got, []string{"ace", "baseline", "learn-v2"}) {
		t.Fatalf("arms %v", got)
	}
	if l := st.Get("learn"); l.Get("champion").String() != "ace" || l.Get("champion_version").Int() != 1 || !l.Get("leader").Bool() ||
		l.Get(`versions.#(arm=="learn-v2").status`).String() != "candidate" {
		t.Fatalf("learn status: %s", l.Raw)
	}

	// The candidate gets traffic from the policy and serves its version.
	var onV2 string
	eventually(t, "an unforced episode on learn-v2", func() bool {
		a := newAgent(fmt.Sprintf("Unforced task %d.", time.Now().UnixNano()), false)
		h := e.turn(a)
		if h.Get("X-CAM-Arm") == "learn-v2" {
			onV2 = splicedTask(e.up.Last().Body)
			return true
		}
		return false
	})
	if !strings.Contains(onV2, "Rule learnt for version 2.") || !strings.Contains(onV2, "Check the fare class") {
		t.Fatalf("learn-v2's episode got context %q", onV2)
	}

	// A live episode of the champion, one turn in, survives the promotion.
	live := newAgent("A long task on the old champion.", true)
	resp, body := e.post(live.body(""), map[string]string{"X-CAM-Arm": "ace"})
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	live.episode = resp.Header.Get("X-CAM-Episode-Id")
	live.msgs = append(live.msgs, json.RawMessage(gjson.GetBytes(body, "choices.0.message").Raw))
	live.add(map[string]any{"role": "user", "content": "go on"})

	// The candidate does better: 6 of 6 against the champion's 0 of 6.
	rewarded(t, e, "learn-v2", 6, 1)
	rewarded(t, e, "ace", 1, 0)
	eventually(t, "learn-v2 promoted", func() bool {
		return status(t, e).Get("learn.champion").String() == "learn-v2"
	})
	st = status(t, e)
	if got := activeArms(st); slices.Contains(got, "ace") || !slices.Contains(got, "baseline") || !slices.Contains(got, "learn-v2") {
		t.Fatalf("after the promotion the arms are %v: the old champion must leave, the control stay", got)
	}
	if h := e.turn(live); h.Get("X-CAM-Arm") != "ace" || h.Get("X-CAM-Context") != "episode" {
		t.Fatalf("the live episode moved: arm %q context %q", h.Get("X-CAM-Arm"), h.Get("X-CAM-Context"))
	}
	if got := splicedTask(e.up.Last().Body); !strings.Contains(got, "fare class") || strings.Contains(got, "Rule learnt") {
		t.Fatalf("the live episode's context changed: %q", got)
	}

	// The new champion's episodes feed the next step at once: v3, from v2.
	eventually(t, "candidate learn-v3", func() bool { return slices.Contains(activeArms(status(t, e)), "learn-v3") })
	calls = fake.Calls()
	if last := calls[len(calls)-1]; last.Version != 3 || last.Base.Index("learnt-2") < 0 {
		t.Fatalf("the step after the promotion did not start from v2: %+v", last)
	}
	// v3 does worse than its champion: stopped.
	rewarded(t, e, "learn-v3", 6, 0)
	eventually(t, "learn-v3 stopped", func() bool {
		return status(t, e).Get(`learn.versions.#(arm=="learn-v3").status`).String() == "stopped"
	})
	// The version is marked stopped, then the experiment without it is served: the
	// status may show the first a moment before the second.
	eventually(t, "learn-v3 no longer served", func() bool { return !slices.Contains(activeArms(status(t, e)), "learn-v3") })

	var evs []*replay.LearnEvent
	eventually(t, "the learn events in the buffer", func() bool {
		evs = learnEvents(t, e)
		return hasEvent(evs, replay.LearnStopped, "learn-v3") != nil
	})
	for _, want := range []struct{ action, arm string }{{"version", "ace"}, {"version", "learn-v2"}, {"candidate", "learn-v2"},
		{"promoted", "learn-v2"}, {"version", "learn-v3"}, {"candidate", "learn-v3"}, {"stopped", "learn-v3"}} {
		if hasEvent(evs, want.action, want.arm) == nil {
			t.Errorf("no %s event for %s in %d learn events", want.action, want.arm, len(evs))
		}
	}
	if p := hasEvent(evs, "promoted", "learn-v2"); p != nil {
		if p.Champion != "learn-v2" || p.ChampionVersion != 2 || p.Parent != 1 || p.PBetter == nil || *p.PBetter < 0.95 ||
			p.Stats["learn-v2"].N != 6 || p.Stats["ace"].N != 6 || *p.Stats["learn-v2"].Mean != 1 {
			t.Errorf("promoted event: %+v", p)
		}
	}
	if s := hasEvent(evs, "stopped", "learn-v3"); s != nil && (s.Champion != "learn-v2" || s.PBetter == nil || *s.PBetter > 0.05) {
		t.Errorf("stopped event: %+v", s)
	}
	if m := e.metric("camproxy_learn_version"); !strings.Contains(m, `camproxy_learn_version{experiment="`+e.cfg.Experiment.Name+`"} 2`) {
		t.Errorf("metrics: %s", m)
	}
	if m := e.metric("camproxy_learn_steps_total"); !strings.Contains(m, `camproxy_learn_steps_total{experiment="`+e.cfg.Experiment.Name+`"} 2`) {
		t.Errorf("metrics: %s", m)
	}
}

func mustDirStore(t *testing.T, dir string) *storage.DirStore {
	t.Helper()
	s, err := storage.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLearnerFleetOnRedis: two camproxy processes share one Redis (reward statistics,
// episodes, the replay stream and the playbook store). Exactly one holds the learner
// lease and runs the steps; both serve the candidate and the promoted version; when
// the holder shuts down, the other takes the lease over and goes on learning.
func TestLearnerFleetOnRedis(t *testing.T) {
	rdb := requireRedis(t)
	prefix := fmt.Sprintf("camproxy-test:learn:%d", time.Now().UnixNano())
	t.Cleanup(func() {
		ctx := context.Background()
		for _, pattern := range []string{prefix + "*", "camproxy:exp:{" + prefix + "*"} {
			keys, _ := rdb.Keys(ctx, pattern).Result()
			if len(keys) > 0 {
				rdb.Del(ctx, keys...)
			}
		}
	})
	shared := func(c *config.Config) {
		learnConfig(t, "redis://127.0.0.1:6379/0?key="+prefix+":playbook")(c)
		c.Experiment.Name = prefix // the statistics' keys
		c.Cache.RedisURL = "redis://127.0.0.1:6379/0"
		c.Episodes.Store = "redis"
		c.Replay.Sinks = []string{"redis://127.0.0.1:6379/0?stream=" + prefix + ":replay"}
		// Renewed every 2 s with a 2 s budget per renewal: a loaded machine must not
		// lose the lease to a slow Redis call (at 300 ms it did, and the follower
		// stepped too). The handover below follows a release, not an expiry.
		c.Learn.LeaseTTL = 6 * time.Second
	}
	fakes := []*learntest.Step{{}, {}}
	e1 := newEnvWith(t, shared, Options{Logger: testLogger(t), LearnStep: fakes[0].Step})
	cfg2 := *e1.cfg
	cfg2.Replay.SpoolDir = t.TempDir()
	a2 := startAppWith(t, &cfg2, Options{Logger: testLogger(t), LearnStep: fakes[1].Step})
	e2 := &env{t: t, up: e1.up, cam: e1.cam, app: a2, cfg: &cfg2, base: "http://" + a2.Addr(), admin: "http://" + a2.AdminAddr()}
	envs := []*env{e1, e2}
	leaseKey := prefix + ":playbook:learn-lease"
	idOf := func(e *env) string { return e.app.learnerFor(e.cfg.Experiment.Name).Replica() }

	// Exactly one leader, the one whose id the lease key holds.
	var leader int
	eventually(t, "one lease holder", func() bool {
		holder, _ := rdb.Get(context.Background(), leaseKey).Result()
		l0, l1 := status(t, e1).Get("learn.leader").Bool(), status(t, e2).Get("learn.leader").Bool()
		switch {
		case l0 && !l1 && holder == idOf(e1):
			leader = 0
		case l1 && !l0 && holder == idOf(e2):
			leader = 1
		default:
			return false
		}
		return true
	})
	follower := 1 - leader

	// Traffic and rewards go through the follower: the statistics are shared.
	rewarded(t, envs[follower], "ace", 5, 0)
	for _, e := range envs {
		eventually(t, "learn-v2 served by both", func() bool { return slices.Contains(activeArms(status(t, e)), "learn-v2") })
	}
	if n := len(fakes[follower].Calls()); n != 0 || len(fakes[leader].Calls()) != 1 {
		t.Fatalf("steps: leader %d, follower %d; want 1 and 0", len(fakes[leader].Calls()), n)
	}

	rewarded(t, envs[follower], "learn-v2", 6, 1)
	rewarded(t, envs[leader], "ace", 1, 0)
	for _, e := range envs {
		eventually(t, "learn-v2 champion on both", func() bool {
			st := status(t, e)
			return st.Get("learn.champion").String() == "learn-v2" && !slices.Contains(activeArms(st), "ace")
		})
		_, ctx := armTurn(t, e, "learn-v2", fmt.Sprintf("A task for the promoted version %d.", time.Now().UnixNano()))
		if !strings.Contains(ctx, "Rule learnt for version 2.") {
			t.Fatalf("the promoted arm's context on %s: %q", e.base, ctx)
		}
	}
	// The new champion's episodes make v3 at once, on the leader only.
	eventually(t, "learn-v3 on the follower", func() bool { return slices.Contains(activeArms(status(t, envs[follower])), "learn-v3") })
	if n := len(fakes[follower].Calls()); n != 0 {
		t.Fatalf("the follower ran %d steps", n)
	}

	// The holder goes away: the other takes the lease and learns on.
	ctx := context.Background() // no deadline of its own: a hang meets go test's -timeout
	if err := envs[leader].app.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// A graceful shutdown gives the lease back at once rather than let it expire.
	if holder, err := rdb.Get(context.Background(), leaseKey).Result(); err == nil && holder == idOf(envs[leader]) {
		t.Fatalf("the lease still names the replica that shut down (%s)", holder)
	}
	eventually(t, "the lease taken over", func() bool {
		holder, _ := rdb.Get(context.Background(), leaseKey).Result()
		return holder == idOf(envs[follower]) && status(t, envs[follower]).Get("learn.leader").Bool()
	})
	// learn-v3 does worse than its champion: the new holder stops it, and with a free
	// candidate slot steps on the champion's next episodes.
	rewarded(t, envs[follower], "learn-v3", 6, 0)
	eventually(t, "learn-v3 stopped by the new holder", func() bool {
		return status(t, envs[follower]).Get(`learn.versions.#(arm=="learn-v3").status`).String() == "stopped"
	})
	rewarded(t, envs[follower], "learn-v2", 5, 1)
	eventually(t, "a step by the new holder", func() bool {
		calls := fakes[follower].Calls()
		return len(calls) == 1 && calls[0].Version == 4 && calls[0].Base.Index("learnt-2") >= 0
	})
	eventually(t, "learn-v4 served", func() bool { return slices.Contains(activeArms(status(t, envs[follower])), "learn-v4") })
}

// TestLearnerThroughModels: without an injected step the learner runs learn.Step with
// the models learn: names (here a scripted OpenAI-compatible optimiser): the
// mutator's add_entry lands in the next version, which its candidate arm serves.
func TestLearnerThroughModels(t *testing.T) {
	opt := testkit.NewUpstream()
	t.Cleanup(opt.Close)
	const rule = "Always confirm the number of passengers before booking."
	opt.Configure(func(u *testkit.Upstream) {
		u.Reply = func(body gjson.Result) testkit.Reply {
			mutator := false
			for _, tool := range body.Get("tools").Array() {
				mutator = mutator || tool.Get("function.name").String() == playbook.ToolAdd
			}
			answered := false
			for _, m := range body.Get("messages").Array() {
				answered = answered || m.Get("role").String() == "tool"
			}
			switch {
			case mutator && !answered:
				return testkit.Reply{ToolCalls: []testkit.ToolCall{{ID: "a1", Name: playbook.ToolAdd,
					Arguments: fmt.Sprintf(`{"section":"booking","content":%q}`, rule)}}}
			default:
				return testkit.Reply{ToolCalls: []testkit.ToolCall{{ID: "f1", Name: playbook.ToolFinish, Arguments: `{"summary":"done"}`}}}
			}
		}
	})
	storeDir := filepath.Join(t.TempDir(), "playbook")
	e := newEnv(t, func(c *config.Config) {
		learnConfig(t, storeDir)(c)
		c.Learn.Model = "openai/optimiser"
		c.Learn.BaseURL = opt.URL + "/v1"
	})
	rewarded(t, e, "ace", 5, 0)
	eventually(t, "candidate learn-v2", func() bool { return slices.Contains(activeArms(status(t, e)), "learn-v2") })
	v2, err := (&storage.Versions{Store: mustDirStore(t, storeDir)}).Load(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(v2.Entries, func(en playbook.Entry) bool { return en.Content == rule })
	if i < 0 || v2.Entries[i].Section != "booking" || v2.Entries[i].Version != 2 || len(v2.Entries) != 2 {
		t.Fatalf("version 2: %+v", v2.Entries)
	}
	if _, ctx := armTurn(t, e, "learn-v2", "Book two seats to Oslo."); !strings.Contains(ctx, rule) || !strings.Contains(ctx, "fare class") {
		t.Fatalf("learn-v2's context: %q", ctx)
	}
	if n := len(opt.Requests()); n < 3 {
		t.Fatalf("the optimiser models got %d calls", n)
	}
}

// With learn.guidance_file, a step also reflects on the tasks whose runs now have
// mixed outcomes and no guidance yet, appends the guidance to the rag store, and the
// rag arm serves it without a restart.
func TestLearnerRefreshesGuidance(t *testing.T) {
	opt := testkit.NewUpstream()
	t.Cleanup(opt.Close)
	const guidance = "Read the booking back to the user before you change it."
	opt.Configure(func(u *testkit.Upstream) {
		u.Reply = func(body gjson.Result) testkit.Reply {
			var tools []string
			for _, tool := range body.Get("tools").Array() {
				tools = append(tools, tool.Get("function.name").String())
			}
			if !slices.Contains(tools, playbook.ToolTag) && !slices.Contains(tools, playbook.ToolAdd) {
				return testkit.Reply{Content: "<guidance>" + guidance + "</guidance>"} // train reflect's agent
			}
			return testkit.Reply{ToolCalls: []testkit.ToolCall{{ID: "f1", Name: playbook.ToolFinish, Arguments: `{"summary":"nothing to change"}`}}}
		}
	})
	dir := t.TempDir()
	gfile := filepath.Join(dir, "guidance.jsonl")
	if err := os.WriteFile(gfile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *config.Config) {
		learnConfig(t, filepath.Join(dir, "playbook"))(c)
		rag := config.DefaultAugmenter()
		rag.Type, rag.GuidanceFile = config.AugmenterRAG, gfile
		c.Augmenters["rag"] = rag
		c.Experiment.Arms = append(c.Experiment.Arms, config.Arm{Name: "rag", Weight: 1, Augmenter: "rag"})
		c.Learn.Model = "openai/optimiser"
		c.Learn.BaseURL = opt.URL + "/v1"
		c.Learn.GuidanceFile = gfile
	})
	const task = "Change the flight of reservation ZFA04Y to the next day."
	for _, r := range []float64{1, 0} { // one task, both outcomes
		id, _ := armTurn(t, e, "ace", task)
		postFeedback(t, e.admin, id, r)
	}
	rewarded(t, e, "ace", 3, 0) // one-run tasks: not eligible
	eventually(t, "a guidance record", func() bool {
		b, _ := os.ReadFile(gfile)
		return strings.Contains(string(b), guidance)
	})
	b, _ := os.ReadFile(gfile)
	if n := strings.Count(string(b), "\n"); n != 1 || !strings.Contains(string(b), `"task_description":"`+task+`"`) {
		t.Fatalf("guidance file:\n%s", b)
	}
	eventually(t, "the rag arm serving the new guidance", func() bool {
		_, ctx := armTurn(t, e, "rag", task)
		return strings.Contains(ctx, guidance)
	})
	// Counted once the refresh returns, which is after the file was written and may be
	// after the rag arm reloaded it.
	want := `camproxy_learn_guidance_total{experiment="` + e.cfg.Experiment.Name + `"} 1`
	eventually(t, "the guidance counted: "+want, func() bool { return strings.Contains(e.metric("camproxy_learn_guidance_total"), want) })
}

// A step that changes only counts gives the agent the same context: its version is
// written and the next step starts from it, but it is not tried as a candidate (a
// trial could only tie). A candidate still without a verdict after learn.max_trial
// rewarded episodes is stopped as inconclusive, freeing its slot.
func TestLearnerCountsOnlyAndInconclusive(t *testing.T) {
	storeDir := filepath.Join(t.TempDir(), "playbook")
	fake := &learntest.Step{Mode: learntest.CountsOnly}
	e := newEnvWith(t, func(c *config.Config) {
		learnConfig(t, storeDir)(c)
		c.Learn.MaxTrial = 8
	}, Options{Logger: testLogger(t), LearnStep: fake.Step})
	versions := &storage.Versions{Store: mustDirStore(t, storeDir)}

	rewarded(t, e, "ace", 5, 0)
	eventually(t, "version 2 (counts only)", func() bool {
		m, err := versions.Manifest(context.Background())
		return err == nil && m.Latest() == 2
	})
	eventually(t, "the version event of v2", func() bool {
		ev := hasEvent(learnEvents(t, e), replay.LearnVersion, "")
		return ev != nil && ev.Version == 2 && strings.Contains(ev.Reason, "only counts changed")
	})
	if arms := activeArms(status(t, e)); slices.Contains(arms, "learn-v2") {
		t.Fatalf("a counts-only version is tried as an arm: %v", arms)
	}

	// The next step starts from v2's counts, and its candidate names v2 as parent.
	fake.Set(func(s *learntest.Step) { s.Mode = learntest.AddRule })
	rewarded(t, e, "ace", 5, 0)
	eventually(t, "candidate learn-v3", func() bool { return slices.Contains(activeArms(status(t, e)), "learn-v3") })
	calls := fake.Calls()
	last := calls[len(calls)-1]
	if last.Version != 3 || last.Base.Entries[0].Helpful != 1 {
		t.Fatalf("the second step started from %+v (version %d); want v2's counts", last.Base.Entries, last.Version)
	}
	m, _ := versions.Manifest(context.Background())
	if row, _ := m.Get(3); row == nil || row.Parent != 2 {
		t.Fatalf("manifest row of v3: %+v", row)
	}

	// As good as the champion (every reward 0 on both): no verdict, until max_trial.
	rewarded(t, e, "learn-v3", 8, 0)
	eventually(t, "learn-v3 stopped as inconclusive", func() bool {
		ev := hasEvent(learnEvents(t, e), replay.LearnStopped, "learn-v3")
		return ev != nil && strings.Contains(ev.Reason, "inconclusive after 8 rewarded episodes") && ev.PBetter != nil &&
			*ev.PBetter > 0.05 && *ev.PBetter < 0.95
	})
	if hasEvent(learnEvents(t, e), replay.LearnPromoted, "learn-v3") != nil {
		t.Fatal("a tie was promoted")
	}
	eventually(t, "learn-v3 out of the experiment", func() bool { return !slices.Contains(activeArms(status(t, e)), "learn-v3") })
}
