package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/trainer"
)

// rewardDriver loads the generated reward.py as veRL does (a module from a path) and
// calls it: "one" scores a single response, "many" 32 at once with asyncio.gather,
// "batch" through compute_score_batch.
const rewardDriver = `
import asyncio, importlib.util, json, sys, time
spec = importlib.util.spec_from_file_location("camproxy_reward", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
mode = sys.argv[2]
def ctx(i):
    return "<think>I should plan WRONG things first.</think>\n\n%s: check the fare rules of booking %d." % ("GOOD" if i % 2 == 0 else "BAD", i)
def task(i):
    return {"task_id": str(i), "task": "Task number %d: rebook the flight." % i, "index": i, "split": "train"}
async def main():
    start = time.monotonic()
    if mode == "one":
        scores = [await m.compute_score("camproxy", ctx(0), "0", task(0))]
    elif mode == "many":
        scores = await asyncio.gather(*(m.compute_score("camproxy", ctx(i), str(i), task(i)) for i in range(32)))
    print(json.dumps({"scores": list(scores), "seconds": time.monotonic() - start}))
if mode == "batch":
    print(json.dumps({"scores": m.compute_score_batch(["camproxy"] * 4, [ctx(i) for i in range(4)], [str(i) for i in range(4)], [task(i) for i in range(4)])}))
else:
    asyncio.run(main())
`

// TestRewardPy runs the reward.py that train grpo writes, with python3, against a
// live camproxy whose rollout runner is a scripted harness: each call drives a real
// two-turn episode through the data plane and the harness rewards the context it saw.
func TestRewardPy(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	e, h := newRolloutEnv(t)
	dir := t.TempDir()
	o := trainer.DefaultGRPOOptions()
	o.Out, o.Model, o.Prompter, o.RolloutURL, o.RolloutTimeout = dir, trainer.HubPrefix+"org/m", promptOf{}, e.admin, testkit.Patience(t).Truncate(time.Second)
	if _, err := trainer.WriteGRPO([]trainer.Example{{TaskID: "1", Task: "t"}}, o); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "reward.py")
	driver := filepath.Join(dir, "driver.py")
	if err := os.WriteFile(driver, []byte(rewardDriver), 0o644); err != nil {
		t.Fatal(err)
	}
	py := func(mode string, env ...string) (scores []float64, seconds float64, stderr string, err error) {
		cmd := exec.Command("python3", driver, script, mode)
		cmd.Env = append(os.Environ(), env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err = cmd.Run()
		var res struct {
			Scores  []float64
			Seconds float64
		}
		if err == nil {
			err = json.Unmarshal(out.Bytes(), &res)
		}
		return res.Scores, res.Seconds, errb.String(), err
	}

	scores, one, stderr, err := py("one")
	if err != nil || len(scores) != 1 || scores[0] != 1 {
		t.Fatalf("one: %v %v\n%s", scores, err, stderr)
	}
	// The <think> block is stripped: the agent's calls carried only the answer.
	body := string(e.up.Last().Body)
	if !strings.Contains(body, "GOOD: check the fare rules of booking 0.") || strings.Contains(body, "WRONG") || strings.Contains(body, "think>") {
		t.Fatalf("the rollout's context is not the stripped answer: %s", body)
	}

	h.peak.Store(0)
	h.gate.Store(newBarrier(32)) // every run waits until all 32 are under way
	scores, all, stderr, err := py("many")
	if err != nil || len(scores) != 32 {
		t.Fatalf("many: %v %v\n%s", scores, err, stderr)
	}
	for i, s := range scores {
		if want := map[bool]float64{true: 1, false: 0.25}[i%2 == 0]; s != want {
			t.Fatalf("score %d = %v, want %v (the harness's reward for that context)", i, s, want)
		}
	}
	t.Logf("reward.py: one rollout %.2fs, 32 concurrent %.2fs", one, all)
	if p := h.peak.Load(); p != 32 {
		t.Fatalf("the harness ran at most %d agents at once: reward.py's 32 calls were not concurrent", p)
	}

	h.gate.Store(nil)
	if scores, _, stderr, err = py("batch"); err != nil || len(scores) != 4 || scores[0] != 1 || scores[1] != 0.25 {
		t.Fatalf("batch: %v %v\n%s", scores, err, stderr)
	}

	// A runner that never reports: camproxy's 504 becomes the error score, with the reason.
	// (How long reward.py took is not asserted: camproxy's message names the 1 s it
	// was given, and a reward.py that hung would meet go test's -timeout.)
	// Both wait out the same 1 s, at once.
	h.mute.Store(true)
	raised := make(chan error, 1)
	go func() {
		_, _, stderr, err := py("one", "CAMPROXY_ROLLOUT_TIMEOUT_S=1", "CAMPROXY_REWARD_ON_ERROR=raise")
		if err == nil || !strings.Contains(stderr, "RolloutError: HTTP 504") {
			raised <- fmt.Errorf("ON_ERROR=raise: %v\n%s", err, stderr)
			return
		}
		raised <- nil
	}()
	scores, _, stderr, err = py("one", "CAMPROXY_ROLLOUT_TIMEOUT_S=1")
	if err != nil || len(scores) != 1 || scores[0] != 0 || !strings.Contains(stderr, "HTTP 504") || !strings.Contains(stderr, "no reward posted to /v1/feedback within 1s") {
		t.Fatalf("mute runner: %v %v\n%s", scores, err, stderr)
	}
	if err := testkit.Await(t, raised, "the ON_ERROR=raise run"); err != nil {
		t.Fatal(err)
	}
	// camproxy unreachable: named, not a hang.
	if scores, _, stderr, err = py("one", "CAMPROXY_ROLLOUT_URL=http://127.0.0.1:1"); err != nil || scores[0] != 0 || !strings.Contains(stderr, "http://127.0.0.1:1 unreachable") {
		t.Fatalf("unreachable: %v %v\n%s", scores, err, stderr)
	}
}

type promptOf struct{}

func (promptOf) Prompt(task string) (string, string) { return "", task }
