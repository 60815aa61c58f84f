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
		a := arm(t, p1, id, "task", "")
		if b := arm(t, p2, id, "task", ""); b.Name != a.Name {
			t.Fatalf("two policies from one config disagree on %s", id)
		}
		if again := arm(t, p1, id, "other-task", ""); again.Name != a.Name {
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

func TestStickyTask(t *testing.T) {
	arms := []Arm{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}}
	p, _ := New("exp", StickyTask, false, arms)
	first := arm(t, p, "ep-1", "task-9", "")
	for i := range 50 {
		if got := arm(t, p, fmt.Sprintf("ep-%d", i), "task-9", ""); got.Name != first.Name {
			t.Fatal("sticky: task moved a run of the task to another arm")
		}
	}
}

// TestOverride: X-CAM-Arm picks the arm where the experiment allows overrides, and
// one naming no arm is an error that lists the arms (it fell back to the hash, so a
// typo went unnoticed); without overrides the header is ignored.
func TestOverride(t *testing.T) {
	arms := []Arm{{Name: "baseline", Weight: 1}, {Name: "cam", Weight: 1}, {Name: "rag", Weight: 0}}
	off, _ := New("exp", StickyTask, false, arms)
	on, _ := New("exp", StickyTask, true, arms)
	hashed := arm(t, off, "ep-1", "task-9", "")
	other := "baseline"
	if hashed.Name == other {
		other = "cam"
	}
	for _, tt := range []struct {
		name     string
		p        *Policy
		override string
		want     string // the arm, or the error
	}{
		{"no header", on, "", hashed.Name},
		{"allowed", on, other, other},
		{"allowed, an arm without traffic", on, "rag", "rag"},
		{"allowed, no such arm", on, "cotnrol", `"cotnrol" is not an arm of experiment "exp"; its arms: baseline, cam, rag`},
		{"allowed, case differs", on, "CAM", `"CAM" is not an arm of experiment "exp"; its arms: baseline, cam, rag`},
		{"not allowed", off, other, hashed.Name},
		{"not allowed, no such arm", off, "cotnrol", hashed.Name},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := tt.p.Assign("ep-1", "task-9", tt.override)
			got := a.Name
			if err != nil {
				got = err.Error()
				if _, ok := err.(*UnknownArmError); !ok {
					t.Errorf("error %T, want *UnknownArmError", err)
				}
			}
			if got != tt.want {
				t.Errorf("Assign(%q) = %s, want %s", tt.override, got, tt.want)
			}
		})
	}
	if !on.AllowOverride() || off.AllowOverride() {
		t.Error("AllowOverride does not say what New was given")
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
		if arm(t, p, fmt.Sprint(i), "", "").Name != "b" {
			t.Fatal("zero-weight arm got traffic")
		}
	}
}

// arm is p.Assign that fails t on an error.
func arm(t testing.TB, p *Policy, episodeID, taskID, override string) Arm {
	t.Helper()
	a, err := p.Assign(episodeID, taskID, override)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
