package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/replay"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// The fixture: ten tasks, three arms with four runs of every task and binary
// rewards, and a small "rag" arm with continuous rewards. Everything the report
// says about it is computed by hand below.
//
//	baseline  successes per task t01…t10: 4 3 2 2 1 1 1 0 0 2 = 16/40, reward 1/0, no success flag
//	cam                                   4 4 3 3 3 3 3 2 1 2 = 28/40, success flag = reward
//	playbook                              1 1 1 1 1 1 0 0 0 0 =  6/40, reward 1/0, no flag
//	rag       t01: 0.9 (success), 0.6 (failure), 1.0 (no flag: ≥ 1 succeeds)
//	          t02: 0.2 (no flag: fails), 0.5 (failure), and one run never rewarded, no step
//	          t03: 0.8 (success)
var fixtureCounts = map[string][10]int{
	"baseline": {4, 3, 2, 2, 1, 1, 1, 0, 0, 2},
	"cam":      {4, 4, 3, 3, 3, 3, 3, 2, 1, 2},
	"playbook": {1, 1, 1, 1, 1, 1, 0, 0, 0, 0},
}

// fixtureShape is each arm's turns, wall time (s) and context latency (ms) for
// even and odd runs.
var fixtureShape = map[string][2]struct {
	steps int
	wall  float64
	augMs float64
}{
	"baseline": {{3, 30, 0}, {5, 50, 0}},     // turns 4, wall 40 s, context 0 ms
	"cam":      {{2, 20, 100}, {4, 40, 140}}, // turns 3, wall 30 s, context 120 ms
	"playbook": {{4, 60, 5}, {4, 60, 5}},     // turns 4, wall 60 s, context 5 ms
}

var fixtureStart = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

type fixtureRun struct {
	arm, task string
	start     time.Time
	steps     int
	wall      float64
	augMs     float64
	reward    *float64
	success   *bool
	metadata  string
}

func fixtureRuns() []fixtureRun {
	var runs []fixtureRun
	i := 0
	for run := range 4 {
		for task := range 10 {
			for _, arm := range []string{"baseline", "cam", "playbook"} {
				shape := fixtureShape[arm][run%2]
				reward := 0.0
				if run < fixtureCounts[arm][task] {
					reward = 1
				}
				r := fixtureRun{arm: arm, task: fmt.Sprintf("t%02d", task+1), start: fixtureStart.Add(time.Duration(i) * 2 * time.Minute),
					steps: shape.steps, wall: shape.wall, augMs: shape.augMs, reward: ptr(reward)}
				if arm == "cam" {
					r.success = ptr(reward == 1)
				}
				runs = append(runs, r)
				i++
			}
		}
	}
	rag := []struct {
		task    string
		reward  *float64
		success *bool
	}{
		{"t01", ptr(0.9), ptr(true)}, {"t01", ptr(0.6), ptr(false)}, {"t01", ptr(1.0), nil},
		{"t02", ptr(0.2), nil}, {"t02", ptr(0.5), ptr(false)}, {"t02", nil, nil},
		{"t03", ptr(0.8), ptr(true)},
	}
	for j, r := range rag {
		fr := fixtureRun{arm: "rag", task: r.task, start: fixtureStart.Add(time.Duration(j*37+5) * time.Minute),
			steps: 2, wall: 10, augMs: 30, reward: r.reward, success: r.success}
		if r.reward == nil {
			fr.steps = 0 // abandoned before its first call returned
		}
		runs = append(runs, fr)
	}
	return runs
}

// fixtureLines is the fixture as replay events, one JSON line each.
func fixtureLines(t *testing.T) [][]byte {
	t.Helper()
	var lines [][]byte
	add := lineAdder(t, &lines)
	for i, r := range fixtureRuns() {
		id := fmt.Sprintf("%s-%s-%03d", r.arm, r.task, i)
		add(replay.EpisodeEvent{V: replay.Version, Type: replay.TypeEpisode, ID: id + "-e", EpisodeID: id, TaskID: r.task,
			Task: "task " + r.task, Arm: r.arm, Protocol: "openai", Model: "gpt-4o", StartedAt: r.start})
		for s := range r.steps {
			st := replay.StepEvent{V: replay.Version, Type: replay.TypeStep, ID: fmt.Sprintf("%s-s%d", id, s), EpisodeID: id, Turn: s,
				Status: 200, At: r.start.Add(time.Duration(r.wall * float64(time.Second) * float64(s+1) / float64(r.steps)))}
			if s == 0 {
				st.Timing.Augment = r.augMs
			}
			add(st)
		}
		if r.reward != nil {
			add(replay.RewardEvent{V: replay.Version, Type: replay.TypeReward, ID: id + "-r", EpisodeID: id, Reward: *r.reward,
				Success: r.success, At: r.start.Add(time.Duration(r.wall)*time.Second + time.Second)})
		}
	}
	return lines
}

// lineAdder returns a func that appends v, as a JSON line, to lines.
func lineAdder(t *testing.T, lines *[][]byte) func(v any) {
	return func(v any) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		*lines = append(*lines, b)
	}
}

// fixtureBuffer writes the fixture into a FileSink and reads it back, so the report
// sees what the reader makes of real events.
func fixtureBuffer(t *testing.T) *replay.Buffer {
	t.Helper()
	return readLines(t, fixtureLines(t))
}

// readLines writes lines into a FileSink and reads them back as a Buffer.
func readLines(t *testing.T, lines [][]byte) *replay.Buffer {
	t.Helper()
	b, err := replay.Read(context.Background(), replay.NewFileSource(writeLines(t, lines)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeLines writes lines into a FileSink in a new directory, and returns it.
func writeLines(t *testing.T, lines [][]byte) string {
	t.Helper()
	dir := t.TempDir()
	sink, err := replay.NewFileSink(dir, replay.FileOptions{Writer: "fixture"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Write(context.Background(), lines); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func fixtureReport(t *testing.T) *Report {
	t.Helper()
	r, err := New(fixtureBuffer(t), Options{Source: "file:///fixture"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./report -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test ./report -update rewrites it):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// TestFixtureFile keeps testdata/episodes.jsonl, which the CLI tests import, equal
// to the fixture.
func TestFixtureFile(t *testing.T) {
	golden(t, "episodes.jsonl", append(bytes.Join(fixtureLines(t), []byte("\n")), '\n'))
}

func val(t *testing.T, what string, p *float64) float64 {
	t.Helper()
	if p == nil {
		t.Fatalf("%s is null", what)
	}
	return *p
}

// TestReportByHand checks every number of the fixture's report against values
// worked out by hand (and, for t quantiles and p-values, with 30-digit mpmath).
func TestReportByHand(t *testing.T) {
	r := fixtureReport(t)
	if r.Episodes != 127 || r.Control != "baseline" || r.Unit != "points" || len(r.Arms) != 4 || len(r.Comparisons) != 3 {
		t.Fatalf("report %+v", r)
	}
	type armWant struct {
		name                        string
		episodes, rewarded, success int
		mean, sd, lo, hi, rate      float64
		turns, wall, ctx            float64
		pass                        []PassK
	}
	// Binary rewards: sd² = n·p(1−p)/(n−1); CI is Wilson's, (p + z²/2n ± z·√(p(1−p)/n +
	// z²/4n²)) / (1 + z²/n) with z = 1.959963984540054:
	//   baseline p = 0.4:  sd² = 9.6/39,  sd = 0.496139, CI 0.263483–0.554041
	//   cam      p = 0.7:  sd² = 8.4/39,  sd = 0.464095, CI 0.545700–0.819252
	//   playbook p = 0.15: sd² = 5.1/39,  sd = 0.361620, CI 0.070612–0.290723
	// rag: mean 4.0/6 = 0.666667, squared deviations sum to 0.433333, sd² = 0.086667,
	//   sd = 0.294392, t(0.975, 5) = 2.57058183563631, CI 0.357721–0.975612.
	// pass@k with n = 4 runs a task, 1 − C(4−c, k)/C(4, k):
	//   c:      4  3    2    1    0
	//   pass@2  1  1  5/6  1/2    0
	//   pass@3  1  1    1  3/4    0
	//   baseline (4 3 2 2 1 1 1 0 0 2): @1 16/40 = 0.4, @2 (2 + 3·5/6 + 3·1/2)/10 = 0.6,
	//     @3 (5 + 3·3/4)/10 = 0.725, @4 8/10 = 0.8
	//   cam (4 4 3 3 3 3 3 2 1 2): @1 0.7, @2 (7 + 2·5/6 + 1/2)/10 = 0.916667, @3 (9 + 3/4)/10
	//     = 0.975, @4 1
	//   playbook (six tasks with c = 1): @1 0.15, @2 0.3, @3 0.45, @4 0.6
	//   rag: t01 n = 3 c = 2, t02 n = 2 c = 0, t03 n = 1 c = 1: @1 (2/3 + 0 + 1)/3 = 0.555556
	//     over 3 tasks; @2 over t01, t02: (1 − C(1,2)/C(3,2) = 1, 0) → 0.5; @3 over t01: 1.
	wants := []armWant{
		{"baseline", 40, 40, 16, 0.4, 0.496139, 0.263483, 0.554041, 0.4, 4, 40, 0,
			[]PassK{{1, 10, 0.4}, {2, 10, 0.6}, {3, 10, 0.725}, {4, 10, 0.8}}},
		{"cam", 40, 40, 28, 0.7, 0.464095, 0.545700, 0.819252, 0.7, 3, 30, 120,
			[]PassK{{1, 10, 0.7}, {2, 10, 0.916667}, {3, 10, 0.975}, {4, 10, 1}}},
		{"playbook", 40, 40, 6, 0.15, 0.361620, 0.070612, 0.290723, 0.15, 4, 60, 5,
			[]PassK{{1, 10, 0.15}, {2, 10, 0.3}, {3, 10, 0.45}, {4, 10, 0.6}}},
		{"rag", 7, 6, 3, 0.666667, 0.294392, 0.357721, 0.975612, 0.5, 2, 10, 30,
			[]PassK{{1, 3, 0.555556}, {2, 2, 0.5}, {3, 1, 1}}},
	}
	const tol = 5e-6
	for i, w := range wants {
		a := r.Arms[i]
		if a.Name != w.name || a.Episodes != w.episodes || a.Rewarded != w.rewarded || a.Successes != w.success {
			t.Errorf("arm %d: %s %d episodes %d rewarded %d successes, want %+v", i, a.Name, a.Episodes, a.Rewarded, a.Successes, w)
			continue
		}
		near(t, w.name+" mean", val(t, "mean", a.MeanReward), w.mean, tol)
		near(t, w.name+" sd", val(t, "sd", a.SD), w.sd, tol)
		near(t, w.name+" ci low", a.CI95[0], w.lo, tol)
		near(t, w.name+" ci high", a.CI95[1], w.hi, tol)
		near(t, w.name+" success rate", val(t, "rate", a.SuccessRate), w.rate, tol)
		near(t, w.name+" turns", val(t, "turns", a.MeanTurns), w.turns, 1e-9)
		near(t, w.name+" wall", val(t, "wall", a.MeanWallSeconds), w.wall, 1e-9)
		near(t, w.name+" context", val(t, "context", a.MeanContextMs), w.ctx, 1e-9)
		if len(a.PassAtK) != len(w.pass) {
			t.Errorf("%s pass@k %+v, want %+v", w.name, a.PassAtK, w.pass)
			continue
		}
		for j, p := range w.pass {
			got := a.PassAtK[j]
			if got.K != p.K || got.Tasks != p.Tasks {
				t.Errorf("%s pass@k %+v, want %+v", w.name, got, p)
			}
			near(t, fmt.Sprintf("%s pass@%d", w.name, p.K), got.Value, p.Value, tol)
		}
	}

	// Comparisons. Welch for cam and playbook (40 rewarded each); mpmath gives
	//   cam − baseline = 0.3: t = 0.3/√((8.4/39 + 9.6/39)/40) = 2.79284800875,
	//     df = 77.6548672566, p = 0.00657573329159 → significant.
	//   playbook − baseline = −0.25: t = −2.57539376819, df = 71.3168316832,
	//     p = 0.0120865454114 → significant.
	// rag has 6 rewarded episodes: permutation test. Its exact permutation p-value,
	// counted over all C(46, 6) splits of the pool (6 rag rewards, 16 ones, 24 zeros)
	// as in exactRagP below, is 0.278580487143; the Monte Carlo estimate must be
	// within its sampling error. Pooled sd = √((5·0.086667 + 39·9.6/39)/44) =
	// 0.477525; sample size for δ = 0.266667 at power 0.8 (t-refined) 51.33 → 52
	// per arm, 52 − 6 = 46 more.
	cam, pb, rag := r.Comparisons[0], r.Comparisons[1], r.Comparisons[2]
	if cam.Arm != "cam" || cam.Test != "welch" || !cam.Significant || cam.MoreEpisodes != nil {
		t.Errorf("cam: %+v", cam)
	}
	near(t, "cam lift", val(t, "lift", cam.LiftPoints), 30, 1e-9)
	near(t, "cam t", val(t, "t", cam.T), 2.79284800875, 1e-9)
	near(t, "cam df", val(t, "df", cam.DF), 77.6548672566, 1e-8)
	near(t, "cam p", val(t, "p", cam.P), 0.00657573329159, 1e-11)
	if pb.Arm != "playbook" || pb.Test != "welch" || !pb.Significant {
		t.Errorf("playbook: %+v", pb)
	}
	near(t, "playbook lift", val(t, "lift", pb.LiftPoints), -25, 1e-9)
	near(t, "playbook t", val(t, "t", pb.T), -2.57539376819, 1e-9)
	near(t, "playbook df", val(t, "df", pb.DF), 71.3168316832, 1e-8)
	near(t, "playbook p", val(t, "p", pb.P), 0.0120865454114, 1e-11)
	if rag.Arm != "rag" || rag.Test != "permutation" || rag.Resamples != 10000 || rag.Significant || rag.T != nil {
		t.Errorf("rag: %+v", rag)
	}
	near(t, "rag lift", val(t, "lift", rag.LiftPoints), 26.666667, 1e-6)
	near(t, "rag exact p (independent count)", exactRagP(), 0.278580487143, 1e-11)
	near(t, "rag p", val(t, "p", rag.P), 0.278580487143, mcTol(0.278580487143))
	near(t, "rag pooled sd", val(t, "pooled sd", rag.PooledSD), 0.477525, tol)
	if rag.EpisodesPerArm == nil || *rag.EpisodesPerArm != 52 || rag.MoreEpisodes == nil || *rag.MoreEpisodes != 46 {
		t.Errorf("rag sample size: %v per arm, %v more", rag.EpisodesPerArm, rag.MoreEpisodes)
	}

	verdicts := []string{
		"cam beats baseline by +30.0 points, p = 0.0066",
		"playbook trails baseline by \u221225.0 points, p = 0.012",
		"rag vs baseline: +26.7 points, not yet significant (p = 0.28): about 46 more rewarded episodes per arm needed (52 per arm for 80% power at this lift)",
	}
	for i, want := range verdicts {
		if got := r.Comparisons[i].Verdict; got != want {
			t.Errorf("verdict %d = %q, want %q", i, got, want)
		}
	}
}

// exactRagP counts the exact two-sided permutation p-value of rag against baseline
// without the package's code: a split of the pool into 6 and 40 is fixed by which of
// the six distinct rag rewards land in the group of 6 (2^6 subsets) and how many of
// the 16 ones and 24 zeros fill it up (binomial counts).
func exactRagP() float64 {
	rag := []float64{0.9, 0.6, 1.0, 0.2, 0.5, 0.8}
	choose := func(n, k int) float64 {
		if k < 0 || k > n {
			return 0
		}
		c := 1.0
		for i := range k {
			c = c * float64(n-i) / float64(i+1)
		}
		return c
	}
	total := 4.0 + 16 // rag rewards sum to 4.0, baseline has 16 ones
	observed := 4.0/6 - 16.0/40
	extreme := 0.0
	for mask := range 1 << 6 {
		sum, j := 0.0, 0
		for i, v := range rag {
			if mask&(1<<i) != 0 {
				sum += v
				j++
			}
		}
		for ones := 0; ones <= 6-j; ones++ {
			s := sum + float64(ones)
			d := s/6 - (total-s)/40
			if d < 0 {
				d = -d
			}
			if d >= observed-1e-9 {
				extreme += choose(16, ones) * choose(24, 6-j-ones)
			}
		}
	}
	return extreme / choose(46, 6)
}

func TestGoldenText(t *testing.T) {
	var buf bytes.Buffer
	if err := fixtureReport(t).WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.txt", buf.Bytes())
}

func TestGoldenJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := fixtureReport(t).WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.json", buf.Bytes())
	// The schema the README documents: every key is there, nulls included.
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"v", "source", "experiment", "experiment_unlabelled", "experiment_excluded", "control", "episodes", "unit", "alpha", "arms", "comparisons"} {
		if _, ok := m[k]; !ok {
			t.Errorf("json lacks %q", k)
		}
	}
	arm := m["arms"].([]any)[0].(map[string]any)
	for _, k := range []string{"arm", "episodes", "rewarded", "mean_reward", "sd", "ci95", "successes", "success_rate", "pass_at_k", "mean_turns", "mean_wall_seconds", "mean_context_ms"} {
		if _, ok := arm[k]; !ok {
			t.Errorf("json arm lacks %q", k)
		}
	}
	cmp := m["comparisons"].([]any)[0].(map[string]any)
	for _, k := range []string{"arm", "control", "lift", "lift_points", "test", "t", "df", "p_value", "significant", "pooled_sd", "episodes_per_arm_needed", "more_episodes_per_arm", "verdict"} {
		if _, ok := cmp[k]; !ok {
			t.Errorf("json comparison lacks %q", k)
		}
	}
}

func buf(eps ...*replay.Episode) *replay.Buffer { return &replay.Buffer{Episodes: eps} }

func ep(arm, task string, reward *float64) *replay.Episode {
	return &replay.Episode{ID: fmt.Sprintf("%s-%s-%p", arm, task, reward), Arm: arm, TaskID: task, Reward: reward}
}

func TestControlChoice(t *testing.T) {
	b := buf(ep("zeta", "a", ptr(1.0)), ep("alpha", "a", ptr(0.0)), ep("baseline", "a", ptr(0.5)))
	for _, c := range []struct{ want, got string }{{"", "baseline"}, {"zeta", "zeta"}} {
		r, err := New(b, Options{Control: c.want})
		if err != nil || r.Control != c.got {
			t.Errorf("control %q: got %v %v", c.want, r, err)
		}
	}
	r, err := New(buf(ep("zeta", "a", ptr(1.0)), ep("alpha", "a", ptr(0.0))), Options{})
	if err != nil || r.Control != "alpha" {
		t.Errorf("no baseline: %v %v, want the first arm by name", r, err)
	}
	if _, err := New(b, Options{Control: "nope"}); !errors.Is(err, ErrNoControl) || !strings.Contains(err.Error(), `"alpha", "baseline", "zeta"`) {
		t.Errorf("unknown control: %v", err)
	}
}

func TestEmpty(t *testing.T) {
	if _, err := New(buf(), Options{}); !errors.Is(err, ErrEmpty) {
		t.Errorf("empty buffer: %v", err)
	}
}

// TestExperimentFilter: an episode recording another experiment (in its reward
// metadata) is dropped; one recording none is kept and counted.
func TestExperimentFilter(t *testing.T) {
	mk := func(arm, exp string) *replay.Episode {
		e := ep(arm, "t", ptr(1.0))
		if exp != "" {
			e.Metadata = json.RawMessage(fmt.Sprintf(`{"experiment":%q,"other":1}`, exp))
		}
		return e
	}
	b := buf(mk("baseline", "exp1"), mk("cam", "exp1"), mk("cam", "exp2"), mk("cam", ""))
	r, err := New(b, Options{Experiment: "exp1"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Episodes != 3 || r.Excluded != 1 || r.Unlabelled != 1 || r.Experiment != "exp1" {
		t.Errorf("filtered: %d episodes, %d excluded, %d unlabelled", r.Episodes, r.Excluded, r.Unlabelled)
	}
	r, _ = New(b, Options{})
	if r.Episodes != 4 || r.Excluded != 0 || r.Unlabelled != 0 {
		t.Errorf("unfiltered: %+v", r)
	}
	if _, err := New(buf(mk("cam", "exp2")), Options{Experiment: "exp1"}); !errors.Is(err, ErrEmpty) || !strings.Contains(err.Error(), `experiment "exp1"`) {
		t.Errorf("nothing of exp1: %v", err)
	}
}

func TestVerdicts(t *testing.T) {
	ones := func(arm string, n int, v float64) []*replay.Episode {
		var out []*replay.Episode
		for i := range n {
			out = append(out, &replay.Episode{ID: fmt.Sprintf("%s%d", arm, i), Arm: arm, TaskID: fmt.Sprint(i), Reward: ptr(v)})
		}
		return out
	}
	// Equal means: no measurable difference.
	b := buf(append(ones("baseline", 3, 0.5), ones("cam", 3, 0.5)...)...)
	r, _ := New(b, Options{})
	if got, want := r.Comparisons[0].Verdict, "cam vs baseline: no measurable difference yet (p = 1)"; got != want {
		t.Errorf("equal: %q, want %q", got, want)
	}
	// An arm without rewards cannot be compared.
	b = buf(append(ones("baseline", 3, 0.5), ep("cam", "x", nil))...)
	r, _ = New(b, Options{})
	if got, want := r.Comparisons[0].Verdict, "cam vs baseline: no rewarded episodes on cam yet"; got != want || r.Comparisons[0].P != nil {
		t.Errorf("no rewards: %q, want %q", got, want)
	}
	// One episode each: a difference, but nothing to estimate the spread from.
	b = buf(append(ones("baseline", 1, 0), ones("cam", 1, 1)...)...)
	r, _ = New(b, Options{})
	if got := r.Comparisons[0].Verdict; !strings.HasPrefix(got, "cam vs baseline: +100.0 points, not yet significant (p = 1): too few") {
		t.Errorf("one each: %q", got)
	}
	// Rewards outside [0, 1]: lifts in reward units.
	b = buf(append(ones("baseline", 40, 2), ones("cam", 40, 5)...)...)
	r, _ = New(b, Options{})
	if got, want := r.Comparisons[0].Verdict, "cam beats baseline by +3.000 reward, p < 0.001"; r.Unit != "reward" || got != want {
		t.Errorf("reward units: %s %q, want %q", r.Unit, got, want)
	}
}

// TestPassAtKRange: k runs from 1 to the fewest runs of any task, at least to 3
// where a task has 3 runs; past 5 only the largest is listed.
func TestPassAtKRange(t *testing.T) {
	ks := func(runs ...taskRuns) []int {
		var out []int
		for _, p := range passAtK(runs) {
			out = append(out, p.K)
		}
		return out
	}
	for _, c := range []struct {
		runs []taskRuns
		want string
	}{
		{[]taskRuns{{1, 1}}, "[1]"},
		{[]taskRuns{{2, 1}, {1, 0}}, "[1 2]"},
		{[]taskRuns{{5, 1}, {1, 0}}, "[1 2 3]"},
		{[]taskRuns{{4, 1}, {4, 0}}, "[1 2 3 4]"},
		{[]taskRuns{{8, 1}, {9, 0}}, "[1 2 3 4 5 8]"},
		{nil, "[]"},
	} {
		if got := fmt.Sprint(ks(c.runs...)); got != c.want {
			t.Errorf("passAtK(%v) ks = %s, want %s", c.runs, got, c.want)
		}
	}
}

// TestReportImportedTimes: episodes as an import writes them (starts a whole second
// apart from replay.ImportEpoch, steps 1 ms apart) have no wall time and no time
// chart, and say so; their 0/1 rewards get an interval inside [0, 1].
func TestReportImportedTimes(t *testing.T) {
	var eps []*replay.Episode
	for i, rw := range []float64{1, 0, 0, 1, 0, 0} {
		start := replay.ImportEpoch().Add(time.Duration(i) * time.Second)
		eps = append(eps, &replay.Episode{ID: fmt.Sprint("ep-", i), TaskID: "t", Arm: []string{"baseline", "cam"}[i%2],
			StartedAt: start, EndedAt: start.Add(5 * time.Millisecond), Steps: 5, Reward: ptr(rw)})
	}
	r, err := New(buf(eps...), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.SynthesisedTimes != 6 {
		t.Errorf("SynthesisedTimes %d, want 6", r.SynthesisedTimes)
	}
	for _, a := range r.Arms {
		if a.MeanWallSeconds != nil || a.CI95 == nil || a.CI95[0] < 0 || a.CI95[1] > 1 || a.CIMethod != CIWilson {
			t.Errorf("%s: wall %v, ci %v %q", a.Name, a.MeanWallSeconds, a.CI95, a.CIMethod)
		}
		if len(r.Series(a.Name)) != 0 {
			t.Errorf("%s: a time series over made-up times", a.Name)
		}
	}
	var text, page bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "6 episodes of 6 have times made up by an import") || strings.Contains(text.String(), "0.0s") {
		t.Errorf("text:\n%s", text.String())
	}
	if strings.Contains(page.String(), "Cumulative mean reward") || strings.Contains(page.String(), "episode start (UTC)") {
		t.Error("the HTML draws a time chart over made-up times")
	}
}
