package learn

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/camproxy/camproxy/playbook/storage"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/trainer"
)

// buffer: tasks T0..T(n-1), each with two failures and one success.
func buffer(n int) []*replay.Episode {
	var eps []*replay.Episode
	for i := range n {
		task := fmt.Sprintf("T%d", i)
		eps = append(eps, ep(task+"-f1", task, 0), ep(task+"-f2", task, 0), ep(task+"-s1", task, 1))
	}
	return eps
}

func TestSamplerReplay(t *testing.T) {
	eps := buffer(6)
	t.Run("without rollouts: evicted after Evict reflections", func(t *testing.T) {
		s := newSampler(eps, 4, 1, 2, 3)
		items, replayed := s.batch()
		if len(items) != 4 || replayed != 0 {
			t.Fatalf("batch 1: %s (%d replayed)", describe(items), replayed)
		}
		first := []string{itemTask(items[0]), itemTask(items[1])}
		s.update(items, replayed, nil)
		if len(s.queue) != 4 {
			t.Fatalf("queue %d, want the 4 failed tasks", len(s.queue))
		}
		// Iterations 2 and 3 replay the two oldest queued tasks, with another failure each time.
		shown := map[string]bool{items[0].Failure.ID: true}
		for it := 2; it <= 3; it++ {
			items, replayed = s.batch()
			if replayed != 2 || itemTask(items[0]) != first[0] || itemTask(items[1]) != first[1] {
				t.Fatalf("batch %d: %s (%d replayed), want %v replayed first", it, describe(items), replayed, first)
			}
			if items[0].Success == nil || items[0].Success.TaskID != items[0].Failure.TaskID {
				t.Fatalf("a replay is not paired with its task's success: %s", describe(items))
			}
			shown[items[0].Failure.ID] = true
			s.update(items, replayed, nil)
		}
		if len(shown) != 2 {
			t.Fatalf("the replays of %s showed %v: both of its failures should be shown", first[0], shown)
		}
		// Three reflections each (one fresh, two replays): evicted; no task graduates.
		if s.evicted != 2 || s.graduated != 0 {
			t.Fatalf("evicted %d graduated %d", s.evicted, s.graduated)
		}
		for _, q := range s.queue {
			if q.task == first[0] || q.task == first[1] {
				t.Fatalf("%s is still queued", q.task)
			}
		}
	})
	t.Run("with rollouts: passes graduate, fails evict", func(t *testing.T) {
		s := newSampler(eps, 4, 1, 2, 3)
		items, replayed := s.batch()
		a, b := itemTask(items[0]), itemTask(items[1])
		outcomes := map[string][]bool{a: {true}, b: {false, false}}
		s.update(items, replayed, outcomes)
		// a: 1 pass (of 2); b: 1 recorded + 2 failed rollouts = 3 fails: evicted.
		if s.evicted != 1 || s.graduated != 0 || len(s.queue) != 3 {
			t.Fatalf("after 1: evicted %d graduated %d queue %d", s.evicted, s.graduated, len(s.queue))
		}
		items, replayed = s.batch()
		if itemTask(items[0]) != a {
			t.Fatalf("batch 2 does not replay %s first: %s", a, describe(items))
		}
		s.update(items, replayed, map[string][]bool{a: {true}})
		if s.graduated != 1 {
			t.Fatalf("%s did not graduate after 2 passes", a)
		}
		// A replay without a failed rollout does not count a fail when rollouts decide.
		for _, q := range s.queue {
			if q.fails != 1 {
				t.Fatalf("%s has %d fails; only its recorded failure counts", q.task, q.fails)
			}
		}
	})
	t.Run("one item per task, fresh passes over the buffer", func(t *testing.T) {
		s := newSampler(buffer(2), 8, 3, 2, 1) // evict 1: no replay
		for it := range 5 {
			items, replayed := s.batch()
			if len(items) != 2 || replayed != 0 || itemTask(items[0]) == itemTask(items[1]) {
				t.Fatalf("batch %d: %s (%d replayed)", it, describe(items), replayed)
			}
			s.update(items, replayed, nil)
		}
	})
}

func TestRollState(t *testing.T) {
	s := ""
	for it := 1; it <= 50; it++ {
		s = rollState(s, it, fmt.Sprintf("summary  of\n iteration %d %s", it, strings.Repeat("x", 100)))
		if n := len([]rune(s)); n > maxStateRunes {
			t.Fatalf("state of %d runes", n)
		}
	}
	if !strings.HasSuffix(s, "iteration 50: summary of iteration 50 "+strings.Repeat("x", 100)) || strings.Contains(s, "iteration 1:") {
		t.Fatalf("state keeps the newest summaries: %q", s)
	}
	if rollState("kept", 2, "  ") != "kept" {
		t.Fatal("an empty summary changed the state")
	}
}

// ruleModel adds the rule "Rule N." in iteration N (and tags nothing).
func ruleModel() *scripted {
	return &scripted{script: func(req *trainer.Request) (*trainer.Reply, error) {
		if strings.Contains(req.System, "You are the reflector") || turn(req) > 0 {
			return &trainer.Reply{Calls: []trainer.Call{call("f", "finish", `{"summary":"ok"}`)}}, nil
		}
		var it int
		fmt.Sscanf(req.Messages[0].Text[strings.Index(req.Messages[0].Text, "# Batch of iteration"):], "# Batch of iteration %d", &it)
		return &trainer.Reply{Calls: []trainer.Call{call("a", "add_entry", fmt.Sprintf(`{"content":"Rule %d."}`, it))}}, nil
	}}
}

type fakeRollouts struct {
	mu     sync.Mutex
	calls  int
	reward func(r RolloutRequest) float64
}

func (f *fakeRollouts) Rollout(_ context.Context, r RolloutRequest) (RolloutResult, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	return RolloutResult{Reward: f.reward(r)}, nil
}

func TestTrainScoresAndKeepsTheOlderOfTies(t *testing.T) {
	dir := t.TempDir()
	store, err := storage.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	ro := &fakeRollouts{reward: func(r RolloutRequest) float64 {
		switch {
		case strings.Contains(r.Context, "Rule 3."):
			return 0.1
		case strings.Contains(r.Context, "Rule 1."):
			return 0.5 // v2 and v3 tie
		}
		return 0.2
	}}
	m := ruleModel()
	var progress strings.Builder
	o := TrainOptions{Episodes: buffer(10), Store: store, Models: Models{m, m}, Iterations: 3, BatchSize: 2,
		Rollouts: ro, Val: 0.2, Group: 3, Progress: &progress}
	res, err := Train(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Best != 2 || len(res.Versions) != 4 || !res.Scored {
		t.Fatalf("best v%d of %d versions", res.Best, len(res.Versions))
	}
	want := []float64{0.2, 0.5, 0.5, 0.1}
	for i, v := range res.Versions {
		if v.Score == nil || *v.Score != want[i] || v.Runs != 2*3 {
			t.Fatalf("v%d: %+v", v.Version, v)
		}
	}
	// 4 versions × 2 validation tasks × 3, plus 3 runs of each batch's failed tasks.
	if ro.calls != 4*6+3*2*3 || res.Rollouts != ro.calls {
		t.Fatalf("%d rollouts (result says %d)", ro.calls, res.Rollouts)
	}
	best, _ := store.Get(context.Background(), BestName)
	v2, _ := store.Get(context.Background(), storage.FileName(2))
	if string(best) != string(v2) {
		t.Fatal("playbook.json is not v2")
	}
	if !strings.Contains(progress.String(), "iteration 3/3: batch 2 (2 failures, ") || !strings.Contains(progress.String(), "wrote v4, tokens 300 in / 30 out, score 0.1000") {
		t.Fatalf("progress:\n%s", progress.String())
	}
	// The validation tasks never reach a batch.
	plan := MakePlan(o)
	for _, req := range m.reqs {
		for _, v := range plan.Val {
			if strings.Contains(req.Messages[0].Text, "task "+v+"\n") {
				t.Fatalf("validation task %s was reflected on", v)
			}
		}
	}
}
