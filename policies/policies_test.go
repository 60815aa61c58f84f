package policies

import (
	"fmt"
	"math"
	"testing"
)

func TestAssignWeightsAndStickiness(t *testing.T) {
	arms := []Arm{{Name: "baseline", Weight: 2, Augmenter: "none"}, {Name: "cam", Weight: 1, Augmenter: "cam"}, {Name: "rag", Weight: 1, Augmenter: "rag"}}
	p1, err := New("exp", StickyEpisode, false, arms)
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := New("exp", StickyEpisode, false, arms)
	counts := map[string]int{}
	const n = 10000
	for i := range n {
		id := fmt.Sprintf("ep-%d", i)
		a := p1.Assign(id, "task", "")
		if b := p2.Assign(id, "task", ""); b.Name != a.Name {
			t.Fatalf("two policies from one config disagree on %s", id)
		}
		if again := p1.Assign(id, "other-task", ""); again.Name != a.Name {
			t.Fatalf("episode %s moved arms", id)
		}
		counts[a.Name]++
	}
	for name, want := range map[string]float64{"baseline": 0.5, "cam": 0.25, "rag": 0.25} {
		if got := float64(counts[name]) / n; math.Abs(got-want) > 0.02 {
			t.Errorf("arm %s share %.3f, want %.2f ± 0.02", name, got, want)
		}
	}
}

func TestStickyTaskAndOverride(t *testing.T) {
	arms := []Arm{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}}
	p, _ := New("exp", StickyTask, false, arms)
	first := p.Assign("ep-1", "task-9", "")
	for i := range 50 {
		if got := p.Assign(fmt.Sprintf("ep-%d", i), "task-9", ""); got.Name != first.Name {
			t.Fatal("sticky: task moved a run of the task to another arm")
		}
	}
	other := "a"
	if first.Name == "a" {
		other = "b"
	}
	if got := p.Assign("ep-1", "task-9", other); got.Name != first.Name {
		t.Fatal("override honoured although allow_override is false")
	}
	po, _ := New("exp", StickyTask, true, arms)
	if got := po.Assign("ep-1", "task-9", other); got.Name != other {
		t.Fatal("override ignored although allowed")
	}
	if got := po.Assign("ep-1", "task-9", "nope"); got.Name != first.Name {
		t.Fatal("unknown override arm must fall back to the hash")
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New("x", StickyEpisode, false, nil); err == nil {
		t.Fatal("no arms accepted")
	}
	if _, err := New("x", StickyEpisode, false, []Arm{{Name: "a", Weight: 0}}); err == nil {
		t.Fatal("zero weights accepted")
	}
	p, _ := New("x", StickyEpisode, false, []Arm{{Name: "a", Weight: 0}, {Name: "b", Weight: 1}})
	for i := range 1000 {
		if p.Assign(fmt.Sprint(i), "", "").Name != "b" {
			t.Fatal("zero-weight arm got traffic")
		}
	}
}
