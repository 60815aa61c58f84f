package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/augment"
	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/demo"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/playbook/storage"
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/replay"
)

// These tests feed each experiment's learner episodes written into the replay buffer
// with their experiment (as the data plane records them) and rewards counted in the
// experiment's statistics (as POST /v1/feedback does), so that a learner's batch,
// versions and decisions are seen to come from its own experiment's runs only.

// experimentsConfig is learnConfig's experiment and learner as an experiments list,
// one entry per name (matched by X-CAM-Agent NAME-bot), each learner on its own store
// (store(name)) and on the scripted optimiser opt, whose lines name the tasks they
// were learnt from.
func experimentsConfig(t *testing.T, opt *testkit.Upstream, store func(string) string, names ...string) func(*config.Config) {
	return func(c *config.Config) {
		learnConfig(t, "")(c)
		c.Learn.Model, c.Learn.BaseURL = "openai/optimiser", opt.URL+"/v1"
		c.Learn.BatchSize = 0 // every new episode: a batch shows all it was given
		demo.AsExperiments(c, names, store)
	}
}

// record writes one run of experiment exp into the replay buffer and waits until
// the buffer has it. Its reward is counted apart (countRewards): a learner counts
// episodes by the statistics and reads them from the buffer, so a test counts the
// rewards of a batch once all of it is there.
func record(t *testing.T, e *env, exp, arm, task string, r float64) {
	t.Helper()
	evs := demo.RewardedRun(exp, arm, task, r, time.Now())
	for _, ev := range evs {
		e.app.record(ev)
	}
	id := evs[0].(*replay.EpisodeEvent).EpisodeID
	eventually(t, "the run in the replay buffer", func() bool {
		ep := episodeOf(readBuffer(t, e), id)
		return ep != nil && ep.Reward != nil
	})
}

// feedRuns records n runs of experiment exp on arm, each of its own task, rewarded r
// (record), and returns the tasks; with count, it then counts their rewards.
func feedRuns(t *testing.T, e *env, exp, arm string, n int, r float64, count bool) []string {
	t.Helper()
	var tasks []string
	for i := range n {
		task := fmt.Sprintf("%s task %d on %s at %d", cmp.Or(exp, "legacy"), i, arm, time.Now().UnixNano())
		record(t, e, exp, arm, task, r)
		tasks = append(tasks, task)
	}
	if count {
		countRewards(t, e, exp, arm, n, r)
	}
	return tasks
}

// countRewards counts n rewards r of arm in exp's statistics, as feedback does.
func countRewards(t *testing.T, e *env, exp, arm string, n int, r float64) {
	t.Helper()
	for range n {
		if err := e.app.stats.Add(context.Background(), exp, arm, policies.Observed(r)); err != nil {
			t.Fatal(err)
		}
	}
}

// learnerOf is experiment exp's learner in /v1/status's learners.
func learnerOf(st gjson.Result, exp string) gjson.Result {
	return st.Get(`learners.#(experiment=="` + exp + `")`)
}

// viewOf is experiment exp's view of cfg.
func viewOf(t *testing.T, cfg *config.Config, exp string) *config.Config {
	t.Helper()
	for _, v := range cfg.PerExperiment() {
		if v.Experiment.Name == exp {
			return v
		}
	}
	t.Fatalf("no experiment %s", exp)
	return nil
}

// TestLearnerPerExperiment: two experiments, each with a learner, in one process
// against scripted reflector and mutator models whose playbook lines name the tasks
// of the runs they learnt from. Both experiments' champions share an arm name (ace),
// and the buffer also holds runs that record no experiment: each learner steps on its
// own experiment's runs only, promotes its own version, and serves it; neither
// playbook holds a line learnt from the other's runs or from the unlabelled ones.
// alpha also refreshes guidance (learn.guidance_file; its step reads the whole
// buffer, beta's streams its champion's episodes): a task whose runs have mixed
// outcomes only across the two experiments gets none.
func TestLearnerPerExperiment(t *testing.T) {
	opt := demo.NewTaskEcho()
	t.Cleanup(opt.Close)
	dir := t.TempDir()
	store := func(name string) string { return filepath.Join(dir, name) }
	guidance := filepath.Join(dir, "alpha-guidance.jsonl")
	if err := os.WriteFile(guidance, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *config.Config) {
		experimentsConfig(t, opt, store, "alpha", "beta")(c)
		c.Experiments[0].Learn.GuidanceFile = guidance
	})
	exps := []string{"alpha", "beta"}

	// Each learner starts on its own store: its seed is version 1 there.
	st := status(t, e)
	for _, exp := range exps {
		eventually(t, exp+"'s seed version", func() bool {
			l := learnerOf(status(t, e), exp)
			return l.Get("champion").String() == "ace" && l.Get("champion_version").Int() == 1
		})
	}
	if st.Get("learn").Exists() {
		t.Fatalf("learn is the one learner's; with two it is left out: %s", st.Get("learn").Raw)
	}

	legacy := feedRuns(t, e, "", "ace", 3, 0, false) // written before episodes carried their experiment
	// Mixed outcomes: alpha's own task, and a task alpha solved and beta failed.
	mixed, shared := "Mixed task of alpha.", "A task both experiments ran."
	tasks := map[string][]string{"alpha": {mixed, shared}, "beta": {shared}}
	for _, run := range []struct {
		exp, task string
		r         float64
	}{{"alpha", mixed, 1}, {"alpha", mixed, 0}, {"alpha", shared, 1}, {"beta", shared, 0}} {
		record(t, e, run.exp, "ace", run.task, run.r)
	}
	for _, exp := range exps {
		tasks[exp] = append(tasks[exp], feedRuns(t, e, exp, "ace", 5, 0, false)...)
	}
	// Every run is in the buffer: now the statistics count them (alpha 8, beta 6).
	for _, run := range []struct {
		exp     string
		rewards []float64
	}{{"alpha", []float64{1, 0, 1, 0, 0, 0, 0, 0}}, {"beta", []float64{0, 0, 0, 0, 0, 0}}} {
		for _, r := range run.rewards {
			countRewards(t, e, run.exp, "ace", 1, r)
		}
	}
	for _, exp := range exps {
		eventually(t, exp+"'s candidate learn-v2", func() bool {
			return learnerOf(status(t, e), exp).Get(`versions.#(arm=="learn-v2").status`).String() == "candidate"
		})
	}
	// Each version 2 holds a line for every task of its own experiment's runs, and
	// none for another's: not the other experiment's (its champion arm has the same
	// name), not the unlabelled runs'.
	learnt := func(exp string, v int) []string {
		t.Helper()
		pb, err := (&storage.Versions{Store: mustDirStore(t, store(exp))}).Load(context.Background(), v)
		if err != nil {
			t.Fatal(err)
		}
		got := demo.LearntTasks(pb)
		slices.Sort(got)
		return got
	}
	for _, exp := range exps {
		want := slices.Sorted(slices.Values(tasks[exp]))
		if got := learnt(exp, 2); !slices.Equal(got, want) {
			t.Fatalf("%s's version 2 learnt from %q; want its own runs %q (legacy runs: %q)", exp, got, want, legacy)
		}
	}
	// alpha's guidance: its own mixed task only (the shared one has one outcome in alpha).
	g, _ := os.ReadFile(guidance)
	if n := strings.Count(string(g), "\n"); n != 1 || !strings.Contains(string(g), `"task_description":"`+mixed+`"`) ||
		!strings.Contains(string(g), demo.EchoGuidance) {
		t.Fatalf("alpha's guidance file:\n%s", g)
	}

	// Each candidate beats its champion in its own experiment's statistics.
	for _, exp := range exps {
		countRewards(t, e, exp, "learn-v2", 6, 1)
		countRewards(t, e, exp, "ace", 1, 0)
	}
	for _, exp := range exps {
		eventually(t, exp+"'s learn-v2 promoted", func() bool {
			return learnerOf(status(t, e), exp).Get("champion").String() == "learn-v2"
		})
	}
	// What each experiment serves: its learnt arm with its own lines, the old
	// champion gone, the control kept.
	for _, exp := range exps {
		s := e.app.shapeFor(viewOf(t, e.cfg, exp))
		shaped, sources := s.Config, s.Sources
		var arms []string
		for _, a := range shaped.Experiment.Arms {
			arms = append(arms, a.Name)
		}
		if !slices.Equal(arms, []string{"baseline", "learn-v2"}) || !shaped.Experiment.Adaptive.Enabled {
			t.Fatalf("%s serves arms %v (adaptive %v); want baseline and learn-v2 under adaptive allocation", exp, arms, shaped.Experiment.Adaptive.Enabled)
		}
		text, err := sources["learn-v2"].Augmenter.Augment(context.Background(), augment.Request{})
		if err != nil {
			t.Fatal(err)
		}
		for _, other := range exps {
			for _, task := range tasks[other] {
				if own := slices.Contains(tasks[exp], task); strings.Contains(text, task) != own {
					t.Fatalf("%s's learn-v2 context has %q: %v; want it only with its own runs' tasks\n%s", exp, task, !own, text)
				}
			}
		}
	}
	// The learn events name their experiment.
	var evs []*replay.LearnEvent
	eventually(t, "both promotions in the buffer", func() bool {
		evs = readBuffer(t, e).Learn
		n := 0
		for _, ev := range evs {
			if ev.Action == replay.LearnPromoted {
				n++
			}
		}
		return n == 2
	})
	for _, ev := range evs {
		if !slices.Contains(exps, ev.Experiment) {
			t.Fatalf("a learn event of experiment %q: %+v", ev.Experiment, ev)
		}
		if ev.Action == replay.LearnPromoted && ev.Arm != "learn-v2" {
			t.Fatalf("%s promoted %s", ev.Experiment, ev.Arm)
		}
	}
	m := e.metric("camproxy_learn_version")
	for _, exp := range exps {
		if !strings.Contains(m, `camproxy_learn_version{experiment="`+exp+`"} 2`) {
			t.Fatalf("metrics: %s", m)
		}
	}
	if strings.Count(m, "camproxy_learn_version{") != 2 {
		t.Fatalf("learn_version has series of experiments not configured: %s", m)
	}
}

// TestReloadAddsAndRemovesALearner: a reload that adds an experiment with a learner
// starts it (it takes its own lease and seeds its own store) while the running
// experiment's learner runs on untouched; a reload that removes it stops it and
// releases its lease at once, so another replica can take it. Calls keep being
// answered throughout.
func TestReloadAddsAndRemovesALearner(t *testing.T) {
	rs := testkit.StartRedis(t)
	opt := demo.NewTaskEcho()
	t.Cleanup(opt.Close)
	store := func(name string) string { return rs.URL() + "?prefix=reload:" + name }
	e := newEnv(t, experimentsConfig(t, opt, store, "alpha"))
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	lease := func(exp string) string { return rdb.Get(ctx, "reload:"+exp+":learn-lease").Val() }
	idOf := func(l *learner) string { return l.Replica() }

	alpha := e.app.learnerFor("alpha")
	eventually(t, "alpha leading", func() bool {
		return lease("alpha") == idOf(alpha) && learnerOf(status(t, e), "alpha").Get("champion_version").Int() == 1
	})

	// Calls through the proxy all along.
	var stop atomic.Bool
	var failed atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			resp, _ := e.post(newAgent(fmt.Sprintf("Book trip %d.", i), false).body(""), nil)
			if resp.StatusCode != 200 {
				failed.Add(1)
			}
		}
	})
	t.Cleanup(func() { stop.Store(true); wg.Wait() })

	withBeta := *e.cfg
	beta := e.cfg.Experiments[0]
	beta.Name, beta.Match = "beta", config.Match{Agents: []string{"beta-bot"}}
	lc := *beta.Learn
	lc.Store = store("beta")
	beta.Learn = &lc
	withBeta.Experiments = []config.Experiment{e.cfg.Experiments[0], beta}
	// A reload refused (an augmenter that does not load) leaves no learner behind.
	broken := withBeta
	broken.Augmenters = maps.Clone(e.cfg.Augmenters)
	bad := config.DefaultAugmenter()
	bad.Type, bad.File = config.AugmenterPlaybook, filepath.Join(t.TempDir(), "missing.txt")
	broken.Augmenters["broken"] = bad
	if err := e.app.Reload(&broken); err == nil || errors.Is(err, ErrRestartRequired) {
		t.Fatalf("a reload with an augmenter that does not load: %v", err)
	}
	if e.app.learnerFor("beta") != nil || strings.Contains(e.metric("camproxy_learn_"), `experiment="beta"`) || lease("beta") != "" {
		t.Fatal("the refused reload left beta's learner behind")
	}
	if err := e.app.Reload(&withBeta); err != nil {
		t.Fatalf("reload adding an experiment with a learner: %v", err)
	}
	b := e.app.learnerFor("beta")
	if b == nil || e.app.learnerFor("alpha") != alpha {
		t.Fatalf("after the reload: beta's learner %v, alpha's the same one %v", b, e.app.learnerFor("alpha") == alpha)
	}
	eventually(t, "beta's learner leading on its own lease and store", func() bool {
		l := learnerOf(status(t, e), "beta")
		return lease("beta") == idOf(b) && l.Get("leader").Bool() && l.Get("champion_version").Int() == 1
	})
	if lease("alpha") != idOf(alpha) || !alpha.Leader() {
		t.Fatal("alpha's learner lost its lease in the reload")
	}
	if got := e.metric("camproxy_learn_leader"); !strings.Contains(got, `camproxy_learn_leader{experiment="beta"} 1`) {
		t.Fatalf("metrics: %s", got)
	}

	// beta leaves: its learner stops and gives its lease back before Reload returns.
	withoutBeta := *e.cfg
	withoutBeta.Experiments = []config.Experiment{withBeta.Experiments[0]}
	if err := e.app.Reload(&withoutBeta); err != nil {
		t.Fatalf("reload removing it: %v", err)
	}
	if e.app.learnerFor("beta") != nil || e.app.learnerFor("alpha") != alpha {
		t.Fatal("after the removal beta's learner is still there, or alpha's was replaced")
	}
	select {
	case <-b.Done():
	default:
		t.Fatal("beta's learner loop still runs")
	}
	if h := lease("beta"); h != "" {
		t.Fatalf("beta's lease still held by %q after its experiment left", h)
	}
	// What another replica's lease does first: SET NX PX.
	if ok, err := rdb.SetNX(ctx, "reload:beta:learn-lease", "another-replica", time.Second).Result(); !ok || err != nil {
		t.Fatalf("another replica could not take beta's lease: %v %v", ok, err)
	}
	st := status(t, e)
	if n := len(st.Get("learners").Array()); n != 1 || st.Get("learn.experiment").String() != "alpha" {
		t.Fatalf("status after the removal: %s", st.Get("learners").Raw)
	}
	if got := e.metric("camproxy_learn_"); strings.Contains(got, `experiment="beta"`) {
		t.Fatalf("beta's series outlived its experiment: %s", got)
	}
	if lease("alpha") != idOf(alpha) {
		t.Fatal("alpha's learner lost its lease")
	}
	stop.Store(true)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d calls failed across the reloads", n)
	}
}
