package learn

import (
	"slices"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/replay"
)

func describe(items []Item) string {
	var parts []string
	for _, it := range items {
		s := "-"
		if it.Failure != nil {
			s = it.Failure.ID
		}
		if it.Success != nil {
			s += "+" + it.Success.ID
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func TestPair(t *testing.T) {
	unrewarded := &replay.Episode{ID: "u1", TaskID: "A"}
	eps := []*replay.Episode{
		ep("a-f1", "A", 0), ep("a-f2", "A", 0), ep("a-f3", "A", 0), ep("a-s1", "A", 1), ep("a-s2", "A", 1),
		ep("b-f1", "B", 0.5),
		ep("c-s1", "C", 1), ep("c-s2", "C", 1),
		ep("d-f1", "D", 0), ep("d-s1", "D", 1),
		unrewarded,
		{ID: "loose", Reward: reward(0)}, // no task id: a task of its own
	}
	for seed := range uint64(20) {
		items := Pair(eps, 0, seed)
		// Every failure once, failures first, each with a success of its task when
		// there is one; then the one task that never failed, by one success.
		if len(items) != 7 {
			t.Fatalf("seed %d: %d items: %s", seed, len(items), describe(items))
		}
		var fails []string
		winsOfA := map[string]int{}
		for i, it := range items {
			if i < 6 {
				if it.Failure == nil {
					t.Fatalf("seed %d: item %d has no failure: %s", seed, i, describe(items))
				}
				fails = append(fails, it.Failure.ID)
				if it.Success != nil && it.Success.TaskID != it.Failure.TaskID {
					t.Fatalf("seed %d: paired across tasks: %s", seed, describe(items))
				}
				wantSuccess := it.Failure.TaskID == "A" || it.Failure.TaskID == "D"
				if (it.Success != nil) != wantSuccess {
					t.Fatalf("seed %d: %s", seed, describe(items))
				}
				if it.Failure.TaskID == "A" {
					winsOfA[it.Success.ID]++
				}
				continue
			}
			if it.Failure != nil || it.Success == nil || it.Success.TaskID != "C" {
				t.Fatalf("seed %d: last item %s", seed, describe(items))
			}
		}
		slices.Sort(fails)
		if strings.Join(fails, ",") != "a-f1,a-f2,a-f3,b-f1,d-f1,loose" {
			t.Fatalf("seed %d: failures %v", seed, fails)
		}
		// Three failures of A over its two successes: both are used.
		if len(winsOfA) != 2 {
			t.Fatalf("seed %d: A's failures all contrasted with %v", seed, winsOfA)
		}
		// Tasks take turns: A's second and third failures come after every task's first.
		firstRound := map[string]bool{}
		for _, it := range items[:4] {
			firstRound[taskKey(it.Failure)] = true
		}
		if len(firstRound) != 4 {
			t.Fatalf("seed %d: the first four items are not four tasks: %s", seed, describe(items))
		}
		// Deterministic, whatever the input order; a size bound keeps a prefix.
		rev := slices.Clone(eps)
		slices.Reverse(rev)
		if got := describe(Pair(rev, 0, seed)); got != describe(items) {
			t.Fatalf("seed %d: input order changed the batch:\n%s\n%s", seed, got, describe(items))
		}
		if got := describe(Pair(eps, 3, seed)); got != describe(items[:3]) {
			t.Fatalf("seed %d: size 3 gave %s, want %s", seed, got, describe(items[:3]))
		}
	}
	orders := map[string]bool{}
	for seed := range uint64(20) {
		orders[describe(Pair(eps, 0, seed))] = true
	}
	if len(orders) < 2 {
		t.Fatal("the seed does not change the order")
	}
	if got := Pair(nil, 5, 1); len(got) != 0 {
		t.Fatalf("no episodes: %v", got)
	}
	// A duplicate episode (the same id twice) is one run.
	if got := Pair([]*replay.Episode{ep("x", "X", 0), ep("x", "X", 0)}, 0, 1); len(got) != 1 {
		t.Fatalf("duplicates: %s", describe(got))
	}
}
