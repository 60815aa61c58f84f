package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/demo"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/playbook/storage"
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/replay"
)

// status is the process's /v1/status (empty while it does not answer).
func (p *serveProc) status(t *testing.T) gjson.Result {
	t.Helper()
	resp, err := http.Get("http://" + p.admin + "/v1/status")
	if err != nil {
		return gjson.Result{}
	}
	defer resp.Body.Close()
	var v json.RawMessage
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return gjson.Result{}
	}
	return gjson.ParseBytes(v)
}

// learn is its one learner; learner is experiment exp's.
func (p *serveProc) learn(t *testing.T) gjson.Result { return p.status(t).Get("learn") }

func (p *serveProc) learner(t *testing.T, exp string) gjson.Result {
	return p.status(t).Get(`learners.#(experiment=="` + exp + `")`)
}

// startFleet runs n `camproxy serve` processes of cfg, each with a spool of its own
// under dir.
func startFleet(t *testing.T, cfg *config.Config, dir string, n int) []*serveProc {
	t.Helper()
	var procs []*serveProc
	for i := range n {
		c := *cfg
		c.Replay.SpoolDir = filepath.Join(dir, "spool", string(rune('a'+i)))
		if err := os.MkdirAll(c.Replay.SpoolDir, 0o755); err != nil {
			t.Fatal(err)
		}
		y, err := c.EffectiveYAML()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "camproxy-"+string(rune('a'+i))+".yaml")
		if err := os.WriteFile(path, y, 0o600); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, startServe(t, path))
	}
	return procs
}

// TestLearnFleetTwoProcesses: two `camproxy serve` processes share one real Redis
// (reward statistics, episodes, the replay stream and the playbook store). Exactly one
// holds the learner lease and steps; after a promotion both serve the promoted
// version; SIGKILL of the learner hands the lease to the other, which learns on.
func TestLearnFleetTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two camproxy processes")
	}
	rs := testkit.StartRedis(t)
	env := demo.Default()
	dir := t.TempDir()
	lab := demo.NewLab(env, dir)
	defer lab.Close()
	lab.Store = rs.URL() + "?prefix=fleet:playbook"
	lc := demo.DefaultLearning()
	lc.CheckEvery = 50 * time.Millisecond
	cfg, err := lab.Config(lc)
	if err != nil {
		t.Fatal(err)
	}
	stream := rs.URL() + "?stream=fleet:replay"
	cfg.Cache.RedisURL = rs.URL()
	cfg.Episodes.Store = "redis"
	cfg.Replay.Sinks = []string{stream}
	cfg.Learn.LeaseTTL = time.Second
	procs := startFleet(t, cfg, dir, 2)
	var hs []*demo.Harness
	for _, p := range procs {
		hs = append(hs, demo.NewHarness(env, demo.HarnessOptions{DataURL: "http://" + p.data, AdminURL: "http://" + p.admin}))
	}

	story, err := demo.Drive(context.Background(), hs[0], lab, demo.Plan{MaxRounds: 40, Concurrency: 8, Pace: 4 * lc.CheckEvery,
		Fleet: hs[1:], Source: stream, Until: func(s *demo.Story) bool { return s.Count(replay.LearnPromoted) >= 1 }})
	if err != nil {
		t.Fatal(err)
	}
	var champion string
	for _, ev := range story.Learn {
		if ev.Action == replay.LearnPromoted {
			champion = ev.Champion
		}
	}
	if champion == "" {
		t.Fatalf("no promotion after %d rounds", len(story.Rounds))
	}
	// Exactly one leader; both follow the promoted champion (the learner goes on, so
	// a later promotion is fine: what matters is that the two agree on a learnt one).
	leader := -1
	wait(t, "both processes serving a learnt champion, and one leader", func() bool {
		a, b := procs[0].learn(t), procs[1].learn(t)
		ca, cb := a.Get("champion").String(), b.Get("champion").String()
		if ca != cb || !strings.HasPrefix(ca, config.LearnArmPrefix) || a.Get("leader").Bool() == b.Get("leader").Bool() {
			return false
		}
		leader = 0
		if b.Get("leader").Bool() {
			leader = 1
		}
		return true
	})
	// Traffic through each process reaches a learnt version that solves tasks.
	for i, h := range hs {
		solved := 0
		for round := 0; round < 5 && solved == 0; round++ {
			res, err := h.Round(context.Background(), env.Tasks, 8)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if strings.HasPrefix(r.Arm, config.LearnArmPrefix) && r.Reward > 0 {
					solved++
				}
			}
		}
		if solved == 0 {
			t.Fatalf("no learnt version solved a task through process %d", i)
		}
	}

	// SIGKILL the learner: the other takes the lease after its TTL.
	other := procs[1-leader]
	if err := procs[leader].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait(t, "the survivor holding the learner lease", func() bool { return other.learn(t).Get("leader").Bool() })
	if got := other.learn(t).Get("champion").String(); !strings.HasPrefix(got, config.LearnArmPrefix) {
		t.Fatalf("the survivor serves champion %q", got)
	}
}

// wait polls cond until it holds, bounded only by go test's -timeout (two
// processes under -race take what they take).
func wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, what, cond)
}

// TestLearnFleetTwoExperiments: two `camproxy serve` processes on one Redis, each
// with two experiments, alpha and beta, whose learners have Redis stores of their own
// and use scripted optimiser models whose lines name the tasks of their runs. Each
// experiment's lease is held by exactly one process; each learner steps on its own
// experiment's runs only — written into the shared replay stream with their
// experiment (as the data plane records them; unlabelled ones too) and counted in the
// shared statistics — and both processes serve each experiment's promoted version;
// neither playbook holds a line learnt from the other's runs.
func TestLearnFleetTwoExperiments(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two camproxy processes")
	}
	rs := testkit.StartRedis(t)
	opt := demo.NewTaskEcho()
	defer opt.Close()
	dir := t.TempDir()
	lab := demo.NewLab(demo.Default(), dir)
	defer lab.Close()
	lc := demo.Learning{Every: 5, MinEpisodes: 6, MaxCandidates: 1, PromoteAlpha: 0.05, CheckEvery: 50 * time.Millisecond}
	cfg, err := lab.Config(lc) // BatchSize 0: a step sees every new episode
	if err != nil {
		t.Fatal(err)
	}
	stream := rs.URL() + "?stream=fleet:replay"
	cfg.Cache.RedisURL, cfg.Episodes.Store, cfg.Replay.Sinks = rs.URL(), "redis", []string{stream}
	cfg.Learn.BaseURL, cfg.Learn.LeaseTTL = opt.URL+"/v1", time.Second
	exps := []string{"alpha", "beta"}
	store := func(exp string) string { return rs.URL() + "?prefix=fleet:" + exp }
	demo.AsExperiments(cfg, exps, store)
	procs := startFleet(t, cfg, dir, 2)

	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	// leaders are the processes that say they hold exp's lease.
	leaders := func(exp string) []int {
		var out []int
		for i, p := range procs {
			if p.learner(t, exp).Get("leader").Bool() {
				out = append(out, i)
			}
		}
		return out
	}
	oneLeader := func(exp string) bool {
		return len(leaders(exp)) == 1 && rdb.Get(ctx, "fleet:"+exp+":learn-lease").Val() != ""
	}
	for _, exp := range exps {
		wait(t, exp+"'s lease held by exactly one process", func() bool { return oneLeader(exp) })
	}

	// The runs: written into the shared stream, then counted in the shared statistics.
	sink, err := replay.OpenSink(ctx, stream, replay.OpenOptions{Writer: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	stats := policies.NewRedisStats(rdb)
	tasks := map[string][]string{}
	for _, exp := range append([]string{""}, exps...) {
		var lines [][]byte
		for i := range 5 {
			task := fmt.Sprintf("%s task %d", cmp.Or(exp, "legacy"), i)
			tasks[exp] = append(tasks[exp], task)
			for _, ev := range demo.RewardedRun(exp, demo.ChampionArm, task, 0, time.Now()) {
				b, _ := json.Marshal(ev)
				lines = append(lines, b)
			}
		}
		if err := sink.Write(ctx, lines); err != nil {
			t.Fatal(err)
		}
	}
	count := func(exp, arm string, n int, r float64) {
		for range n {
			if err := stats.Add(ctx, exp, arm, policies.Observed(r)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, exp := range exps {
		count(exp, demo.ChampionArm, 5, 0)
	}
	for _, exp := range exps {
		for _, p := range procs {
			wait(t, exp+"'s candidate learn-v2 on "+p.admin, func() bool {
				return p.learner(t, exp).Get(`versions.#(arm=="learn-v2").status`).String() == "candidate"
			})
		}
		count(exp, "learn-v2", 6, 1)
		count(exp, demo.ChampionArm, 1, 0)
	}
	for _, exp := range exps {
		for _, p := range procs {
			wait(t, exp+"'s learn-v2 promoted on "+p.admin, func() bool {
				return p.learner(t, exp).Get("champion").String() == "learn-v2"
			})
		}
		st, err := storage.OpenStore(ctx, store(exp))
		if err != nil {
			t.Fatal(err)
		}
		pb, err := (&storage.Versions{Store: st}).Load(ctx, 2)
		_ = st.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := demo.LearntTasks(pb); !slices.Equal(slices.Sorted(slices.Values(got)), tasks[exp]) {
			t.Fatalf("%s's version 2 learnt from %q; want its own runs %q", exp, got, tasks[exp])
		}
		if !oneLeader(exp) {
			t.Fatalf("%s's lease: processes %v say they hold it", exp, leaders(exp))
		}
	}
}
