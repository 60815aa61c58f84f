package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/camproxy/camproxy/replay"
)

var learnT0 = time.Date(2025, 6, 1, 9, 0, 0, 0, time.UTC)

func learnAt(min int) time.Time { return learnT0.Add(time.Duration(min) * time.Minute) }

func learnEv(action string, version int, arm string, parent int, champion string, championVersion, min int) *replay.LearnEvent {
	return &replay.LearnEvent{V: replay.Version, Type: replay.TypeLearn, ID: replay.NewEventID(), Experiment: "exp", Action: action,
		Version: version, Arm: arm, Parent: parent, Champion: champion, ChampionVersion: championVersion, Entries: version, At: learnAt(min)}
}

// runs makes rewarded episodes of arm starting at minute min, one a second.
func runs(arm string, min int, rewards ...float64) []*replay.Episode {
	var out []*replay.Episode
	for i, r := range rewards {
		out = append(out, &replay.Episode{ID: fmt.Sprintf("%s-%d-%d", arm, min, i), TaskID: fmt.Sprintf("t%d", i), Arm: arm,
			StartedAt: learnAt(min).Add(time.Duration(i) * time.Second), Reward: &r})
	}
	return out
}

// TestLearningCurve: the versions with their arms' rewards and outcomes, and the
// champion's reigns, each counting only the episodes started during it.
func TestLearningCurve(t *testing.T) {
	var eps []*replay.Episode
	eps = append(eps, runs("baseline", 0, 0, 1, 0, 0)...)
	eps = append(eps, runs("ace", 0, 0, 0, 1, 0)...)       // ace's reign: mean 0.25
	eps = append(eps, runs("learn-v2", 10, 1, 1, 0, 1)...) // trial of v2
	eps = append(eps, runs("ace", 30, 1, 1)...)            // after ace was replaced (live episodes): not its reign
	eps = append(eps, runs("learn-v2", 30, 1, 1, 1, 1)...) // v2's reign: mean 1
	eps = append(eps, runs("learn-v3", 40, 0, 0, 0)...)
	b := &replay.Buffer{Episodes: eps, Learn: []*replay.LearnEvent{
		learnEv("version", 1, "ace", 0, "ace", 1, 0),
		learnEv("version", 2, "learn-v2", 1, "ace", 1, 5),
		learnEv("candidate", 2, "learn-v2", 1, "ace", 1, 5),
		learnEv("promoted", 2, "learn-v2", 1, "learn-v2", 2, 20),
		learnEv("version", 3, "learn-v3", 2, "learn-v2", 2, 35),
		learnEv("candidate", 3, "learn-v3", 2, "learn-v2", 2, 35),
		learnEv("stopped", 3, "learn-v3", 2, "learn-v2", 2, 50),
		func() *replay.LearnEvent { // another experiment's learner
			e := learnEv("promoted", 9, "learn-v9", 1, "learn-v9", 9, 60)
			e.Experiment = "other"
			return e
		}(),
	}}
	r, err := New(b, Options{Experiment: "exp"})
	if err != nil {
		t.Fatal(err)
	}
	l := r.Learning
	if l == nil || l.Champion != "learn-v2" || l.ChampionVersion != 2 || len(l.Versions) != 3 || len(l.Champions) != 2 {
		t.Fatalf("learning: %+v", l)
	}
	near := func(p *float64, want float64) bool { return p != nil && math.Abs(*p-want) < 1e-9 }
	wantV := []struct {
		arm, outcome string
		parent, n    int
		mean         float64
	}{{"ace", "retired", 0, 6, 3.0 / 6}, {"learn-v2", "champion", 1, 8, 7.0 / 8}, {"learn-v3", "stopped", 2, 3, 0}}
	for i, w := range wantV {
		v := l.Versions[i]
		if v.Version != i+1 || v.Arm != w.arm || v.Outcome != w.outcome || v.Parent != w.parent || v.Rewarded != w.n || !near(v.MeanReward, w.mean) {
			t.Errorf("version %d: %+v, want %+v", i+1, v, w)
		}
	}
	if v := l.Versions[2]; v.DecidedAt == nil || !v.DecidedAt.Equal(learnAt(50)) || v.CI95 == nil {
		t.Errorf("stopped version: %+v", v)
	}
	ace, v2 := l.Champions[0], l.Champions[1]
	if ace.Arm != "ace" || ace.Version != 1 || !ace.From.Equal(learnAt(0)) || ace.To == nil || !ace.To.Equal(learnAt(20)) ||
		ace.Rewarded != 4 || !near(ace.MeanReward, 0.25) {
		t.Errorf("ace's reign: %+v", ace)
	}
	if v2.Arm != "learn-v2" || v2.To != nil || v2.Rewarded != 4 || !near(v2.MeanReward, 1) {
		t.Errorf("v2's reign: %+v", v2)
	}
	// The CI is the arms' interval, Wilson's for 0/1 rewards: ace's reign {0,0,1,0},
	// 1 of 4 → 0.045587–0.699358, where a t-interval (0.25 ± 0.80) leaves [0, 1].
	if m, ci := ace.MeanReward, ace.CI95; ci == nil || *m != 0.25 || math.Abs(ci[0]-0.045587260810) > 1e-9 || math.Abs(ci[1]-0.699358157418) > 1e-9 {
		t.Errorf("ace's reign interval %v around %v", ci, *m)
	}

	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"learning curve: playbook versions of the online learner (champion now learn-v2, v2)",
		"v2       learn-v2  v1      2        champion  8         0.875", "v3       learn-v3  v2      3        stopped   3         0.000",
		"2025-06-01 09:00:00  2025-06-01 09:20:00  v1       ace       4         0.250", "2025-06-01 09:20:00  now                  v2       learn-v2  4         1.000"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Learning *Learning `json:"learning"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil || doc.Learning == nil || doc.Learning.Versions[1].Outcome != "champion" ||
		*doc.Learning.Champions[0].MeanReward != 0.25 {
		t.Fatalf("json learning: %v %s", err, js.String())
	}
	var page bytes.Buffer
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<section id="learning">`, `<tr data-version="3">`, `class="reign"`, "champion now learn-v2 (v2)"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("html lacks %q", want)
		}
	}
	if strings.Count(page.String(), `class="reign"`) != 2 {
		t.Errorf("want one step per reign in the chart")
	}

	// Without learn events there is no curve.
	r, err = New(&replay.Buffer{Episodes: eps}, Options{})
	if err != nil || r.Learning != nil {
		t.Fatalf("no learn events: %v %+v", err, r.Learning)
	}
}
