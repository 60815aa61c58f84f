package app

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/proxy"
	"github.com/camproxy/camproxy/replay"
)

// gatewayExperiments are a gateway's three experiments, matched by the agent header, a
// key fingerprint and a model glob, each with arms of its own; no default.
func gatewayExperiments() []config.Experiment {
	fp := proxy.KeyFingerprint([]byte("sk-research"))
	x := func(name string, m config.Match, arms ...config.Arm) config.Experiment {
		e := config.DefaultExperiment()
		e.Name, e.Match, e.Arms = name, m, arms
		e.Adaptive.Enabled, e.Adaptive.UpdatePeriod = true, time.Hour // allocators run; only activation updates them
		return e
	}
	return []config.Experiment{
		x("support", config.Match{Agents: []string{"support-bot"}}, config.Arm{Name: "baseline", Weight: 1, Augmenter: "none"}),
		x("research", config.Match{KeyFingerprints: []string{string(fp[:12])}}, config.Arm{Name: "cam", Weight: 1, Augmenter: "cam"}),
		x("coding", config.Match{Models: []string{"GPT-5*"}, Protocols: []string{"openai"}}, config.Arm{Name: "plain", Weight: 1, Augmenter: "none"}),
	}
}

// recordedEvents shuts camproxy down (flushing the recorder) and returns every event
// of its file sink.
func recordedEvents(t *testing.T, e *env) []any {
	t.Helper()
	ctx := context.Background()
	if err := e.app.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	src, err := replay.OpenSource(ctx, e.cfg.Replay.Sinks[0])
	if err != nil {
		t.Fatal(err)
	}
	var events []any
	if err := src.Scan(ctx, func(line []byte) error {
		ev, err := replay.Decode(line)
		if err != nil {
			t.Errorf("%v: %s", err, line)
		}
		events = append(events, ev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return events
}

// TestExperimentsGateway: one camproxy, three experiments. A call of each agent lands
// in its experiment — its arm and context, X-CAM-Experiment, its episode and steps
// recorded with it, metrics labelled with it; a call none takes (no default) is
// relayed byte for byte, without X-CAM-* headers, and nothing of it is recorded. A
// reward of one experiment's episode moves its statistics only. A reload adds a
// default, which then takes what nothing else does, and removes research.
func TestExperimentsGateway(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Experiments = gatewayExperiments() })
	type want struct{ experiment, arm, context string }
	calls := []struct {
		name  string
		model string
		hdr   map[string]string
		want  want
	}{
		{"support agent", "gpt-4o", map[string]string{"X-CAM-Agent": "support-bot"}, want{"support", "baseline", "none"}},
		{"research key", "gpt-4o", map[string]string{"Authorization": "Bearer sk-research"}, want{"research", "cam", "miss"}},
		{"coding model", "gpt-5-mini", nil, want{"coding", "plain", "none"}},
	}
	episodes := map[string]string{} // experiment → episode
	for _, c := range calls {
		a := newAgent("task of the "+c.name, false)
		a.model = c.model
		resp, body := e.post(a.body(""), c.hdr)
		h := resp.Header
		if resp.StatusCode != 200 || h.Get("X-CAM-Experiment") != c.want.experiment || h.Get("X-CAM-Arm") != c.want.arm || h.Get("X-CAM-Context") != c.want.context {
			t.Fatalf("%s: %d experiment %q arm %q context %q: %s", c.name, resp.StatusCode, h.Get("X-CAM-Experiment"), h.Get("X-CAM-Arm"), h.Get("X-CAM-Context"), body)
		}
		episodes[c.want.experiment] = h.Get("X-CAM-Episode-Id")
	}
	if n := e.cam.Calls(); n != 1 {
		t.Errorf("the CAM was called %d times; only research's arm has it", n)
	}

	// No experiment takes it: relayed untouched.
	unmatched := newAgent("a task no experiment takes", false).body(`,"metadata":{"k":"v"}`)
	resp, body := e.post(unmatched, map[string]string{"X-CAM-Agent": "someone", "X-CAM-Task-Id": "t-9"})
	if resp.StatusCode != 200 || !bytes.Equal(e.up.Last().Body, unmatched) {
		t.Fatalf("unmatched call: %d %s; upstream got\n%s\nwant\n%s", resp.StatusCode, body, e.up.Last().Body, unmatched)
	}
	for k := range resp.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-cam-") {
			t.Errorf("the unmatched call's answer carries %s", k)
		}
	}
	for k := range e.up.Last().Header {
		if strings.HasPrefix(strings.ToLower(k), "x-cam-") {
			t.Errorf("camproxy's %s reached the upstream", k)
		}
	}

	// Metrics carry the experiment.
	for _, c := range calls {
		if series := `camproxy_episodes_total{arm="` + c.want.arm + `",experiment="` + c.want.experiment + `"} 1`; !strings.Contains(e.metric("camproxy_episodes_total"), series) {
			t.Errorf("no %s in\n%s", series, e.metric("camproxy_episodes_total"))
		}
		if series := `camproxy_arm_weight{arm="` + c.want.arm + `",experiment="` + c.want.experiment + `"} 1`; !strings.Contains(e.metric("camproxy_arm_weight"), series) {
			t.Errorf("no %s in\n%s", series, e.metric("camproxy_arm_weight"))
		}
	}

	// A reward of support's episode lands on support's statistics only.
	ctx := context.Background()
	e.app.observeReward(ctx, "support", "baseline", 1, nil)
	e.app.observeReward(ctx, "research", "cam", 0.25, nil)
	for x, arm := range map[string]string{"support": "baseline", "research": "cam", "coding": "plain"} {
		st, err := e.app.stats.Load(ctx, x, []string{arm, "baseline", "cam", "plain"})
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, s := range st {
			n += s.N
		}
		want := map[string]float64{"support": 1, "research": 1}[x]
		if n != want || want > 0 && st[arm].N != 1 {
			t.Errorf("%s's statistics: %+v, want %v reward on %s", x, st, want, arm)
		}
	}
	if st, _ := e.app.stats.Load(ctx, "research", []string{"cam"}); st["cam"].Sum != 0.25 {
		t.Errorf("research's cam statistics %+v", st["cam"])
	}

	// Reload: a default takes what nothing else does; research is gone.
	next := *e.cfg
	next.Experiments = append(slices.Clone(gatewayExperiments()[:1]), gatewayExperiments()[2])
	def := config.DefaultExperiment()
	def.Arms = []config.Arm{{Name: "base", Weight: 1, Augmenter: "none"}}
	next.Experiments = append(next.Experiments, def)
	if err := e.app.Reload(&next); err != nil {
		t.Fatal(err)
	}
	for hdr, x := range map[string]string{"Bearer sk-research": "default", "Bearer sk-other": "default"} {
		resp, body := e.post(newAgent("after the reload "+hdr, false).body(""), map[string]string{"Authorization": hdr})
		if got := resp.Header.Get("X-CAM-Experiment"); resp.StatusCode != 200 || got != x {
			t.Errorf("%s after the reload: %d experiment %q: %s", hdr, resp.StatusCode, got, body)
		}
	}
	if w := e.metric("camproxy_arm_weight"); strings.Contains(w, `experiment="research"`) || !strings.Contains(w, `camproxy_arm_weight{arm="base",experiment="default"} 1`) {
		t.Errorf("arm weights after the reload:\n%s", w)
	}

	// Recorded: each episode and its steps with its experiment; nothing of the
	// unmatched call.
	seen := map[string]string{} // episode → experiment, from episode events
	steps := 0
	for _, ev := range recordedEvents(t, e) {
		switch ev := ev.(type) {
		case *replay.EpisodeEvent:
			if strings.Contains(ev.Task, "no experiment takes") || ev.TaskID == "t-9" {
				t.Errorf("the unmatched call was recorded: %+v", ev)
			}
			seen[ev.EpisodeID] = ev.Experiment
		case *replay.StepEvent:
			steps++
			if x, ok := seen[ev.EpisodeID]; !ok || ev.Experiment != x {
				t.Errorf("step of %s: experiment %q, its episode's %q", ev.EpisodeID, ev.Experiment, x)
			}
		}
	}
	for x, id := range episodes {
		if seen[id] != x {
			t.Errorf("episode %s recorded with experiment %q, want %q", id, seen[id], x)
		}
	}
	if len(seen) != 5 || steps != 5 {
		t.Errorf("%d episodes and %d steps recorded, want 5 and 5 (3 before the reload, 2 after)", len(seen), steps)
	}
}

// TestExperimentsForExplain: Experiments gives the proxy's own experiments, so
// proxy.Choose over them is the proxy's choice.
func TestExperimentsForExplain(t *testing.T) {
	cfg := config.Default()
	ac := config.DefaultAugmenter()
	ac.Type, ac.BaseURL = config.AugmenterCAM, "http://127.0.0.1:1/v1"
	cfg.Augmenters = map[string]config.Augmenter{"cam": ac}
	cfg.Experiments = gatewayExperiments()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	xs, err := Experiments(cfg)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(xs))
	for i, x := range xs {
		names[i] = x.Name
	}
	if !slices.Equal(names, []string{"support", "research", "coding"}) {
		t.Fatalf("experiments %v", names)
	}
	if _, ok := xs[0].Policy.Arm("baseline"); !ok || xs[1].TaskRules == nil || &xs[0].TaskRules[0] != &xs[2].TaskRules[0] {
		t.Error("the experiments' arms, or their shared task rules, are not the proxy's")
	}
}
