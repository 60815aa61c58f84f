//go:build unix

package app

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/learn/learntest"
)

// TestLearnDashboardInChromium: the dashboard shows the learner's versions, the
// candidate with its traffic share and state, and the champion; left open, it shows
// the promotion on its own.
func TestLearnDashboardInChromium(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	bin := findChromium(t)
	fake := &learntest.Step{}
	e := newEnvWith(t, learnConfig(t, filepath.Join(t.TempDir(), "playbook")), Options{Logger: testLogger(t), LearnStep: fake.Step})
	rewarded(t, e, "ace", 5, 0)
	eventually(t, "candidate learn-v2", func() bool {
		return status(t, e).Get(`learn.versions.#(arm=="learn-v2").status`).String() == "candidate"
	})

	b := launchChromium(t, bin)
	b.navigate(e.admin + "/ui?refresh=1")
	b.waitFor("the learning section with two versions",
		`document.querySelectorAll("#learning:not([hidden]) tbody tr[data-version]").length === 2`)
	share := status(t, e).Get(`learn.versions.#(arm=="learn-v2").share`).Float()
	if share <= 0 {
		t.Fatalf("the candidate has no traffic share: %v", share)
	}
	cases := []struct {
		what, selector string
		want           []string
	}{
		{"summary", "#learning .meta", []string{"champion ace (v1)", "1 candidate", "1 step", "this replica learns"}},
		{"the candidate", `#learning tr[data-version="2"]`, []string{"v2", "learn-v2", "v1", "2", "candidate", "%"}},
		{"the champion", `#learning tr[data-version="1"]`, []string{"v1", "ace", "1", "champion", "5", "0.000"}},
		{"the candidate among the arms", `#arms tr[data-arm="learn-v2"]`, []string{"learn-v2", "active"}},
		{"the experiment learning", `#learning .learner[data-experiment="` + e.cfg.Experiment.Name + `"] h3`, []string{e.cfg.Experiment.Name}},
	}
	for _, c := range cases {
		got := b.text(c.selector)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s (%s) shows %q; want %q in it", c.what, c.selector, got, w)
			}
		}
	}
	// The share shown is the candidate's share of the experiment (rounded as the page does).
	if got := b.text(`#learning tr[data-version="2"] .share-text`); !strings.HasSuffix(got, "%") || got == "0.0%" {
		t.Errorf("candidate share %q", got)
	}

	rewarded(t, e, "learn-v2", 6, 1)
	rewarded(t, e, "ace", 1, 0)
	b.waitFor("the promotion", `(document.querySelector('#learning tr[data-version="2"]') || {innerText: ""}).innerText.includes("champion") && `+
		`(document.querySelector('#learning tr[data-version="1"]') || {innerText: ""}).innerText.includes("retired") && `+
		`!document.querySelector('#arms tr[data-arm="ace"] .badge.active')`)
	if got := b.text(`#learning tr[data-version="2"]`); !strings.Contains(got, "beats the champion ace") || !strings.Contains(got, "1.000") {
		t.Errorf("the promoted version's row: %q", got)
	}
	if got := b.text("#learning .meta"); !strings.Contains(got, "champion learn-v2 (v2)") {
		t.Errorf("summary after the promotion: %q", got)
	}
	b.noErrors()
}
