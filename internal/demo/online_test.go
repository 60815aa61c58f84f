package demo_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/app"
	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/demo"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/report"
)

// logger logs to the test's output: shown for a test that fails (and with -v).
func logger(t *testing.T) *slog.Logger { return testkit.Logger(t, slog.LevelInfo) }

// start runs camproxy in front of the lab until the test ends.
func start(t *testing.T, lab *demo.Lab, lc demo.Learning) *app.App {
	t.Helper()
	cfg, err := lab.Config(lc)
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(cfg, app.Options{Logger: logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, a) })
	return a
}

func shutdown(t *testing.T, a *app.App) {
	ctx := context.Background() // no deadline of its own: a hang meets go test's -timeout
	if err := a.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// TestHarnessThroughCamproxy: with the learner's first version not yet written,
// every episode runs through camproxy on the baseline or the seed champion, both
// without the rules, so every reward is 0; each is recorded with its task, arm,
// two turns and its reward, and the failures reveal their rules to the buffer.
func TestHarnessThroughCamproxy(t *testing.T) {
	env := demo.Default()
	lab := demo.NewLab(env, t.TempDir())
	defer lab.Close()
	lc := demo.DefaultLearning()
	lc.Every = 1000 // no step: this test is about the harness
	a := start(t, lab, lc)
	h := demo.NewHarness(env, demo.HarnessOptions{DataURL: "http://" + a.Addr(), AdminURL: "http://" + a.AdminAddr()})
	res, err := h.Round(context.Background(), env.Tasks, 8)
	if err != nil {
		t.Fatal(err)
	}
	arms := map[string]int{}
	for i, r := range res {
		if r.Task != env.Tasks[i].ID || r.Episode == "" || r.Reward != 0 || r.Code != demo.NoCode {
			t.Fatalf("episode %d: %+v", i, r)
		}
		arms[r.Arm]++
	}
	if len(arms) != 2 || arms[demo.BaselineArm] == 0 || arms[demo.ChampionArm] == 0 {
		t.Fatalf("arms %v, want both baseline and champion", arms)
	}
	shutdown(t, a)
	src, err := replay.OpenSource(context.Background(), "file://"+lab.ReplayDir())
	if err != nil {
		t.Fatal(err)
	}
	buf, err := replay.Read(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	if len(buf.Episodes) != len(env.Tasks) {
		t.Fatalf("%d episodes in the buffer, want %d", len(buf.Episodes), len(env.Tasks))
	}
	for _, ep := range buf.Episodes {
		task, ok := env.Task(ep.TaskID)
		if !ok || ep.Reward == nil || *ep.Reward != 0 || ep.Steps != 2 || len(ep.Messages) != 5 {
			t.Fatalf("episode %s: task %q reward %v steps %d messages %d", ep.ID, ep.TaskID, ep.Reward, ep.Steps, len(ep.Messages))
		}
		if want := demo.Rejected + ": " + demo.Reveal + " " + env.RuleOf(task).Text; ep.Messages[3].Content != want {
			t.Fatalf("episode %s: tool result %q, want %q", ep.ID, ep.Messages[3].Content, want)
		}
		if ep.Arm == demo.ChampionArm && ep.Context == "" {
			t.Fatalf("champion episode %s recorded no context", ep.ID)
		}
	}
}

// TestOnlineLearningClosesTheLoop is the loop end to end: the demo environment
// drives traffic through camproxy, the learner steps on the champion's episodes with
// the scripted models, writes versions, adds them as candidates, promotes one that
// is better, stops the one a harmful mutator made, and the champion's reward rises
// above the baseline's.
func TestOnlineLearningClosesTheLoop(t *testing.T) {
	env := demo.Default()
	lab := demo.NewLab(env, t.TempDir())
	defer lab.Close()
	lc := demo.DefaultLearning()
	a := start(t, lab, lc)
	h := demo.NewHarness(env, demo.HarnessOptions{DataURL: "http://" + a.Addr(), AdminURL: "http://" + a.AdminAddr()})
	var out io.Writer = io.Discard
	if testing.Verbose() {
		out = os.Stderr
	}
	story, err := demo.Drive(context.Background(), h, lab, demo.Plan{
		MaxRounds: 60, Concurrency: 8, Harmful: true, Pace: 4 * lc.CheckEvery, Out: out,
		Until: func(s *demo.Story) bool {
			return s.Count(replay.LearnPromoted) >= 2 && s.Stopped() && !lab.Optimiser.Harmful.Load()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := story.Count(replay.LearnPromoted); n < 2 || !story.Stopped() {
		t.Fatalf("after %d rounds: %d promotions, harmful versions %v stopped: %v", len(story.Rounds), n, story.HarmfulVersions, story.Stopped())
	}
	shutdown(t, a)

	src, err := replay.OpenSource(context.Background(), "file://"+lab.ReplayDir())
	if err != nil {
		t.Fatal(err)
	}
	buf, err := replay.Read(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	versions := map[int]bool{}
	candidates := map[string]bool{}
	for _, ev := range buf.Learn {
		switch ev.Action {
		case replay.LearnVersion:
			versions[ev.Version] = true
		case replay.LearnCandidate:
			candidates[ev.Arm] = true
			if !versions[ev.Version] {
				t.Fatalf("candidate %s before its version was written", ev.Arm)
			}
		case replay.LearnPromoted:
			if !candidates[ev.Arm] {
				t.Fatalf("%s promoted without being a candidate", ev.Arm)
			}
			// Promoted because it did better than the champion it replaced.
			old := ev.Stats
			var champ string
			for name := range old {
				if name != ev.Arm && name != demo.BaselineArm {
					champ = name
				}
			}
			if c, o := old[ev.Arm], old[champ]; c.Mean == nil || o.Mean == nil || *c.Mean <= *o.Mean {
				t.Fatalf("%s promoted over %s with means %v vs %v", ev.Arm, champ, c.Mean, o.Mean)
			}
		case replay.LearnStopped:
			pb, err := lab.Version(context.Background(), ev.Version)
			if err != nil {
				t.Fatal(err)
			}
			if !env.Misleads(pb) {
				t.Fatalf("a sound version was stopped: v%d %s (%s)", ev.Version, ev.Arm, ev.Reason)
			}
		}
	}
	for _, v := range story.HarmfulVersions {
		pb, _ := lab.Version(context.Background(), v)
		if score(env, pb) != 0 {
			t.Fatalf("harmful v%d is not worse: it solves %d tasks", v, score(env, pb))
		}
	}
	rep, err := report.New(buf, report.Options{Control: demo.BaselineArm})
	if err != nil {
		t.Fatal(err)
	}
	var base, champ *report.Arm
	for i := range rep.Arms {
		switch rep.Arms[i].Name {
		case demo.BaselineArm:
			base = &rep.Arms[i]
		case story.Champion:
			champ = &rep.Arms[i]
		}
	}
	if base == nil || champ == nil || champ.MeanReward == nil || base.MeanReward == nil {
		t.Fatalf("report lacks the baseline or the champion %s: %+v", story.Champion, rep.Arms)
	}
	if *champ.MeanReward <= *base.MeanReward || *base.MeanReward != 0 {
		t.Fatalf("champion %s mean %v, baseline %v", story.Champion, *champ.MeanReward, *base.MeanReward)
	}
	// And in the last round the champion solves more than the baseline does.
	last := story.Rounds[len(story.Rounds)-1]
	ok, n := 0, 0
	for _, r := range last {
		if r.Arm == story.Champion {
			n++
			ok += int(r.Reward)
		}
	}
	if n == 0 || ok == 0 {
		t.Fatalf("last round: champion %s solved %d of %d", story.Champion, ok, n)
	}
}

// score counts the tasks the scripted agent solves with pb as its context.
func score(env *demo.Env, pb interface{ Context(int) string }) int {
	n := 0
	for _, task := range env.Tasks {
		code := env.Decide(task.Text + "\n\n" + pb.Context(0))
		if _, ok := env.Execute(task, demo.ToolSubmit, `{"code":"`+code+`"}`); ok {
			n++
		}
	}
	return n
}

// TestOnlineFleetOnRedis: two camproxy processes share one real Redis (a
// redis-server of the test's own) for episodes, reward statistics, the replay
// stream, the playbook store and its lease, while the demo environment's traffic is
// dealt between them. Exactly one learns; both serve the version it promotes, and
// the learnt versions solve tasks through both.
func TestOnlineFleetOnRedis(t *testing.T) {
	// A redis-server of the test's own: nothing to clean out of the shared one.
	rs := testkit.StartRedis(t)
	prefix := "camproxy-demo-fleet"
	env := demo.Default()
	lab := demo.NewLab(env, t.TempDir())
	defer lab.Close()
	lab.Store = rs.URL() + "?key=" + prefix + ":playbook"
	lc := demo.DefaultLearning()
	cfg, err := lab.Config(lc)
	if err != nil {
		t.Fatal(err)
	}
	stream := rs.URL() + "?stream=" + prefix + ":replay"
	cfg.Experiment.Name = prefix // the shared statistics' keys
	cfg.Cache.RedisURL = rs.URL()
	cfg.Episodes.Store = "redis"
	cfg.Replay.Sinks = []string{stream}
	// Renewed every 2 s with a 2 s budget per renewal: at 300 ms a loaded machine
	// lost the lease to a slow Redis call, and both processes stepped.
	cfg.Learn.LeaseTTL = 6 * time.Second
	cfg2 := *cfg
	cfg2.Replay.SpoolDir = t.TempDir()
	var apps []*app.App
	var hs []*demo.Harness
	for _, c := range []*config.Config{cfg, &cfg2} {
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		a, err := app.New(c, app.Options{Logger: logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { shutdown(t, a) })
		apps = append(apps, a)
		hs = append(hs, demo.NewHarness(env, demo.HarnessOptions{DataURL: "http://" + a.Addr(), AdminURL: "http://" + a.AdminAddr()}))
	}
	story, err := demo.Drive(context.Background(), hs[0], lab, demo.Plan{MaxRounds: 40, Concurrency: 8, Pace: 4 * lc.CheckEvery,
		Fleet: hs[1:], Source: stream, Until: func(s *demo.Story) bool { return s.Count(replay.LearnPromoted) >= 1 }})
	if err != nil {
		t.Fatal(err)
	}
	if story.Count(replay.LearnPromoted) < 1 {
		t.Fatalf("no promotion after %d rounds", len(story.Rounds))
	}
	// One learner: the steps all ran in one process.
	steps := []float64{counter(t, apps[0], "camproxy_learn_steps_total"), counter(t, apps[1], "camproxy_learn_steps_total")}
	if (steps[0] > 0) == (steps[1] > 0) {
		t.Fatalf("steps per process %v: want exactly one learner", steps)
	}
	// Both serve the promoted version: each sees the same champion, and a round
	// through each puts episodes on it that the rule it learnt solves.
	var champion string
	for _, ev := range story.Learn {
		if ev.Action == replay.LearnPromoted {
			champion = ev.Champion
		}
	}
	for _, a := range apps {
		if !testkit.Poll(t, func() bool { return status(t, a).Get("learn.champion").String() == champion }) {
			t.Fatalf("%s does not serve the champion %s: %s", a.AdminAddr(), champion, status(t, a).Get("learn").Raw)
		}
	}
	// Traffic through each process reaches the learnt versions (the champion, or a
	// newer candidate or champion: the learner goes on meanwhile), and they solve
	// tasks there.
	solved := map[string]int{}
	for round := 0; round < 10 && (solved[hs[0].Camproxy()] == 0 || solved[hs[1].Camproxy()] == 0); round++ {
		for _, h := range hs {
			res, err := h.Round(context.Background(), env.Tasks, 8)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if strings.HasPrefix(r.Arm, config.LearnArmPrefix) && r.Reward > 0 {
					solved[r.Camproxy]++
				}
			}
		}
	}
	t.Logf("after %d rounds: steps per process %v; learnt versions solved %v", len(story.Rounds), steps, solved)
	for _, h := range hs {
		if solved[h.Camproxy()] == 0 {
			t.Fatalf("no learnt version solved a task through %s (%v)", h.Camproxy(), solved)
		}
	}
	// And the two agree on the champion once the learner's last decision has reached both.
	var c0, c1 string
	if !testkit.Poll(t, func() bool {
		c0, c1 = status(t, apps[0]).Get("learn.champion").String(), status(t, apps[1]).Get("learn.champion").String()
		return c0 == c1 && strings.HasPrefix(c0, config.LearnArmPrefix)
	}) {
		t.Fatalf("the processes disagree on the champion: %s vs %s", c0, c1)
	}
}

// status is GET /v1/status of a camproxy's admin plane.
func status(t *testing.T, a *app.App) gjson.Result {
	t.Helper()
	resp, err := http.Get("http://" + a.AdminAddr() + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return gjson.ParseBytes(b)
}

// counter is a counter's value in a camproxy's registry (0 when it has no sample).
func counter(t *testing.T, a *app.App, name string) float64 {
	t.Helper()
	mfs, err := a.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			sum := 0.0
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	return 0
}
