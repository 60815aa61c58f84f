package demo

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/replay"
)

// Plan is how Drive runs the demo's traffic.
type Plan struct {
	MaxRounds   int // rounds at most; each round runs every task once
	MinRounds   int // rounds at least, even when Until holds earlier
	Concurrency int // episodes in flight at once
	// Harmful turns the mutator harmful after the first promotion, for one step: the
	// candidate it makes is worse, and the learner must stop it.
	Harmful bool
	// Pace is the pause after each round, giving the learner (which polls every
	// learn.check_every) time to judge and step before the next round's traffic.
	Pace time.Duration
	// Until ends the drive early once it holds (after MinRounds).
	Until func(*Story) bool
	Out   io.Writer // progress lines; nil = none
	// Fleet are more harnesses, each in front of another camproxy of the same fleet:
	// a round's tasks are dealt among the first harness and these in turn.
	Fleet []*Harness
	// Source is the replay URI the learner's decisions are read from; "" = the
	// lab's file buffer.
	Source string
}

// Story is what a drive saw: every episode, and the learner's decisions as the
// replay buffer recorded them.
type Story struct {
	Rounds   [][]Result
	Learn    []*replay.LearnEvent
	Champion string // the champion arm after the last decision
	// HarmfulFrom is the number of learn events seen when the mutator turned harmful,
	// -1 if it never did; HarmfulVersions are the versions it wrote meanwhile.
	HarmfulFrom     int
	HarmfulVersions []int
}

// Count returns the learn events of action.
func (s *Story) Count(action string) int {
	n := 0
	for _, ev := range s.Learn {
		if ev.Action == action {
			n++
		}
	}
	return n
}

// Stopped reports whether the learner stopped a version the harmful mutator made.
func (s *Story) Stopped() bool {
	for _, ev := range s.Learn {
		if ev.Action == replay.LearnStopped && slices.Contains(s.HarmfulVersions, ev.Version) {
			return true
		}
	}
	return false
}

// Drive runs rounds of every task through h, printing the reward of each arm (each
// playbook version) per round and each decision of the learner as it appears in the
// replay buffer at lab.ReplayDir().
func Drive(ctx context.Context, h *Harness, lab *Lab, p Plan) (*Story, error) {
	out := p.Out
	if out == nil {
		out = io.Discard
	}
	st := &Story{Champion: ChampionArm, HarmfulFrom: -1}
	src := p.Source
	if src == "" {
		src = "file://" + lab.ReplayDir()
	}
	versionOf := map[string]int{ChampionArm: 1}
	for round := 1; round <= p.MaxRounds; round++ {
		res, err := fleetRound(ctx, append([]*Harness{h}, p.Fleet...), lab.Env.Tasks, p.Concurrency)
		if err != nil {
			return st, err
		}
		st.Rounds = append(st.Rounds, res)
		fmt.Fprintf(out, "round %2d  %s\n", round, roundLine(res, st.Champion, versionOf))
		if p.Pace > 0 {
			select {
			case <-ctx.Done():
				return st, ctx.Err()
			case <-time.After(p.Pace):
			}
		}
		events, err := learnEvents(ctx, src)
		if err != nil {
			return st, err
		}
		if len(events) < len(st.Learn) {
			continue // a read that raced a write; the next round reads again
		}
		for _, ev := range events[len(st.Learn):] {
			versionOf[ev.Arm] = ev.Version
			st.Champion = ev.Champion
			if ev.Action == replay.LearnVersion && ev.Parent > 0 {
				pb, err := lab.Version(ctx, ev.Version)
				if err != nil {
					return st, err
				}
				if lab.Env.Misleads(pb) {
					st.HarmfulVersions = append(st.HarmfulVersions, ev.Version)
				}
			}
			fmt.Fprintf(out, "          learn: %s\n", describe(ev))
		}
		st.Learn = events
		switch {
		case p.Harmful && st.HarmfulFrom < 0 && st.Count(replay.LearnPromoted) > 0:
			lab.Optimiser.Harmful.Store(true)
			st.HarmfulFrom = len(st.Learn)
			fmt.Fprintln(out, "          (the scripted mutator turns harmful for its next step: it deletes the rules and adds wrong ones)")
		case lab.Optimiser.Harmful.Load() && len(st.HarmfulVersions) > 0:
			lab.Optimiser.Harmful.Store(false)
			fmt.Fprintln(out, "          (the scripted mutator is sound again)")
		}
		if round >= p.MinRounds && p.Until != nil && p.Until(st) {
			break
		}
	}
	return st, nil
}

// fleetRound deals tasks among the harnesses in turn, runs them at once and returns
// the results in the order of tasks.
func fleetRound(ctx context.Context, hs []*Harness, tasks []Task, concurrency int) ([]Result, error) {
	if len(hs) == 1 {
		return hs[0].Round(ctx, tasks, concurrency)
	}
	parts := make([][]Task, len(hs))
	for i, t := range tasks {
		parts[i%len(hs)] = append(parts[i%len(hs)], t)
	}
	results := make([][]Result, len(hs))
	g, gctx := errgroup.WithContext(ctx)
	for i, h := range hs {
		g.Go(func() error {
			var err error
			results[i], err = h.Round(gctx, parts[i], max(1, concurrency/len(hs)))
			return err
		})
	}
	err := g.Wait()
	out := make([]Result, len(tasks))
	for i := range tasks {
		if j := i / len(hs); j < len(results[i%len(hs)]) {
			out[i] = results[i%len(hs)][j]
		}
	}
	return out, err
}

func learnEvents(ctx context.Context, uri string) ([]*replay.LearnEvent, error) {
	src, err := replay.OpenSource(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("demo: replay buffer: %w", err)
	}
	// Only the learn events are wanted: a light stream keeps no episode.
	sum, err := replay.Episodes(ctx, src, replay.ReadOptions{Light: true}, func(*replay.Episode) error { return nil })
	if c, ok := src.(io.Closer); ok {
		_ = c.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("demo: replay buffer: %w", err)
	}
	return sum.Learn, nil
}

// roundLine is one round's reward per arm: "baseline 0/5  champion v1 0/4  learn-v2 v2 12/31".
func roundLine(res []Result, champion string, versionOf map[string]int) string {
	type tally struct{ n, ok int }
	by := map[string]*tally{}
	var arms []string
	for _, r := range res {
		t := by[r.Arm]
		if t == nil {
			t = &tally{}
			by[r.Arm] = t
			arms = append(arms, r.Arm)
		}
		t.n++
		if r.Reward > 0 {
			t.ok++
		}
	}
	for _, a := range arms {
		if v, err := strconv.Atoi(strings.TrimPrefix(a, config.LearnArmPrefix)); err == nil && strings.HasPrefix(a, config.LearnArmPrefix) {
			versionOf[a] = v
		}
	}
	slices.SortFunc(arms, func(a, b string) int { return versionOf[a] - versionOf[b] })
	var parts []string
	for _, a := range arms {
		label := a
		if v, ok := versionOf[a]; ok {
			label += " (v" + strconv.Itoa(v) + ")"
		}
		if a == champion {
			label += "*"
		}
		parts = append(parts, fmt.Sprintf("%s %d/%d", label, by[a].ok, by[a].n))
	}
	return strings.Join(parts, "   ")
}

func describe(ev *replay.LearnEvent) string {
	switch ev.Action {
	case replay.LearnVersion:
		if ev.Parent == 0 {
			return fmt.Sprintf("v%d is the seed playbook of %s (%d entries)", ev.Version, ev.Arm, ev.Entries)
		}
		return fmt.Sprintf("v%d written from v%d: %d edits, %d entries", ev.Version, ev.Parent, ev.Applied, ev.Entries)
	case replay.LearnCandidate:
		return fmt.Sprintf("%s added as a candidate against the champion %s", ev.Arm, ev.Champion)
	case replay.LearnPromoted:
		return fmt.Sprintf("%s promoted to champion: %s", ev.Arm, ev.Reason)
	case replay.LearnStopped:
		return fmt.Sprintf("%s stopped: %s", ev.Arm, ev.Reason)
	}
	return ev.Action + " " + ev.Arm
}
