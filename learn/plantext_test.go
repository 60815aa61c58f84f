package learn

import (
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/playbook/storage"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/trainer"
)

// TestTrainResultSummary: the versions and which one playbook.json is (the best
// scored, else the last), the calls and tokens, the rollouts only when scored.
func TestTrainResultSummary(t *testing.T) {
	score := 0.75
	scored := &TrainResult{Versions: []storage.Version{{Version: 1}, {Version: 2, Score: &score, Runs: 6}}, Best: 2, Scored: true, Iterations: 1,
		Calls: 4, Replayed: 1, Usage: trainer.Usage{Input: 12000, Output: 800}, Rollouts: 12, RolloutsReplayed: 2, Graduated: 1, Evicted: 0}
	want := "train playbook: 1 iterations, 2 versions in pb; playbook.json is v2 (best mean reward 0.7500 over 6 runs); 4 model calls (1 answered from the journal), tokens " +
		trainer.FormatTokens(12000) + " in, " + trainer.FormatTokens(800) + " out; 12 rollouts (2 from the journal); replay: 1 graduated, 0 evicted; 1.5s"
	if got := scored.Summary("pb", 1500*time.Millisecond); got != want {
		t.Errorf("scored:\n got %s\nwant %s", got, want)
	}
	unscored := &TrainResult{Versions: []storage.Version{{Version: 1}, {Version: 2}}, Best: 2, Iterations: 1}
	got := unscored.Summary("pb", time.Second)
	if !strings.Contains(got, "playbook.json is v2 (the last; unscored)") || strings.Contains(got, "rollouts") {
		t.Errorf("unscored: %s", got)
	}
}

// TestWritePlan: each iteration's batch (replays first, marked), and the scoring
// only with rollouts.
func TestWritePlan(t *testing.T) {
	fail := &replay.Episode{ID: "e1", TaskID: "t1"}
	ok := &replay.Episode{ID: "e2", TaskID: "t1"}
	plan := &Plan{Train: []string{"t1", "t2"}, Val: []string{"t3"}, Episodes: 4, Failures: 1,
		Iterations: []PlannedBatch{{Iteration: 1, Items: []Item{{Failure: fail, Success: ok}, {Success: ok}}, Replayed: 1}}}
	o := TrainOptions{Seed: &playbook.Playbook{}, Iterations: 1, BatchSize: 2, Val: 0.2, Group: 3, Step: StepOptions{MaxToolBytes: 4096, MaxTurns: 5}}
	var b strings.Builder
	if err := WritePlan(&b, o, plan); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"plan: 1 iterations of up to 2 items; 2 training tasks (4 rewarded episodes, 1 failures); no scoring (no --rollout-url)",
		"iteration 1: 2 items (1 replayed), ~", "replay t1 (failure e1, success e2); t1 (success e2)\n", "4096-byte pieces", "at most 5 turns",
		"dry run: no model and no rollout was called\n"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("lacks %q:\n%s", s, b.String())
		}
	}
	if strings.Contains(b.String(), "rollouts:") {
		t.Errorf("rollouts without --rollout-url:\n%s", b.String())
	}
	b.Reset()
	o.Rollouts = &HTTPRollouts{Base: "http://127.0.0.1:1"}
	if err := WritePlan(&b, o, plan); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"; 1 validation tasks (--val 0.2) scored with 3 run(s) each per version: t3", "rollouts: at most 6 to score versions (v1 and one per iteration, 1 tasks × 3)"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("lacks %q:\n%s", s, b.String())
		}
	}
}
