package app

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/camproxy/camproxy/config"
)

// TestReloadDuringBurst: reloads while calls are in flight drop none; episodes keep
// the arm they started on; new episodes follow the new experiment; an invalid config
// is refused and the old one keeps serving.
func TestReloadDuringBurst(t *testing.T) {
	e := newEnv(t, func(c *config.Config) {
		c.Experiment.Arms = []config.Arm{{Name: "old", Weight: 1, Augmenter: "cam"}}
	})
	// Live episodes on the old arm, one turn in.
	live := make([]*agent, 8)
	for i := range live {
		live[i] = newAgent(fmt.Sprintf("Live task %d", i), false)
		if h := e.turn(live[i]); h.Get("X-CAM-Arm") != "old" {
			t.Fatalf("arm %q", h.Get("X-CAM-Arm"))
		}
	}
	next := func(arm string) *config.Config {
		c := *e.cfg
		c.Experiment.Arms = []config.Arm{{Name: arm, Weight: 1, Augmenter: "cam"}}
		return &c
	}
	var failed, done atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 { // the burst: new episodes, one call each, as fast as they go
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, _ := e.post(newAgent(fmt.Sprintf("burst %d-%d", w, i), false).body(""), nil)
				if resp.StatusCode != 200 {
					failed.Add(1)
				}
				done.Add(1)
			}
		})
	}
	// Ten reloads at least, and on until twenty calls of the burst have run among them:
	// on a loaded machine ten reloads 20 ms apart saw only 18.
	for i := 0; i < 10 || done.Load() < 20; i++ {
		if i == 3000 {
			t.Fatalf("only %d calls of the burst in %d reloads", done.Load(), i)
		}
		if err := e.app.Reload(next(fmt.Sprintf("new%d", i%2))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || done.Load() < 20 {
		t.Fatalf("%d of %d calls failed during reloads", failed.Load(), done.Load())
	}
	if err := e.app.Reload(next("final")); err != nil {
		t.Fatal(err)
	}
	for i, a := range live {
		if h := e.turn(a); h.Get("X-CAM-Arm") != "old" || h.Get("X-CAM-Context") != "episode" {
			t.Fatalf("live episode %d moved to arm %q (%s) after reloads", i, h.Get("X-CAM-Arm"), h.Get("X-CAM-Context"))
		}
	}
	if h := e.turn(newAgent("fresh task", false)); h.Get("X-CAM-Arm") != "final" {
		t.Fatalf("a new episode got arm %q, want final", h.Get("X-CAM-Arm"))
	}

	bad := next("broken")
	bad.Experiment.Arms[0].Augmenter = "missing"
	if err := e.app.Reload(bad); err == nil || !strings.Contains(err.Error(), "experiment.arms[0].augmenter") {
		t.Fatalf("invalid config: %v", err)
	}
	if h := e.turn(newAgent("after a refused reload", false)); h.Get("X-CAM-Arm") != "final" {
		t.Fatalf("a refused reload changed the arm to %q", h.Get("X-CAM-Arm"))
	}
	restart := next("final")
	restart.Server.MaxBodyBytes = 1234
	if err := e.app.Reload(restart); !errors.Is(err, ErrRestartRequired) || !strings.Contains(err.Error(), "server") {
		t.Fatalf("a change of server keys must be reported as needing a restart: %v", err)
	}
}

// TestAdaptiveFromFeedback: rewards posted to /v1/feedback steer new traffic.
func TestAdaptiveFromFeedback(t *testing.T) {
	e := newEnv(t, func(c *config.Config) {
		c.Experiment.Arms = []config.Arm{{Name: "baseline", Weight: 1, Augmenter: "none"}, {Name: "cam", Weight: 1, Augmenter: "cam"}}
		c.Experiment.Adaptive = config.Adaptive{Enabled: true, UpdatePeriod: 50 * time.Millisecond, MinShare: 0.05, Alpha: 0.05, MinEpisodes: 10}
	})
	for i := range 80 {
		h := e.turn(newAgent(fmt.Sprintf("adaptive task %d", i), false))
		reward := 0.0
		if h.Get("X-CAM-Arm") == "cam" {
			reward = 1
		}
		postFeedback(t, e.admin, h.Get("X-CAM-Episode-Id"), reward)
	}
	if !waitFor(t, func() bool {
		return strings.Contains(e.metric("camproxy_arm_weight"), `camproxy_arm_weight{arm="cam",experiment="default"} 0.95`)
	}) {
		t.Fatalf("weights after rewards favouring cam: %s", e.metric("camproxy_arm_weight"))
	}
}
