package online

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/learn"
	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/playbook/storage"
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/replay/location"
)

// lead is one round of the lease holder: start or pick up the state, judge the
// candidates, maybe step.
func (l *Learner) lead(ctx context.Context, tenureID int) error {
	if l.st == nil {
		st, err := l.readState(ctx)
		if err != nil {
			return err
		}
		if st == nil {
			if st, err = l.initState(ctx); err != nil {
				return err
			}
		}
		l.st = st
		l.log.Info("learn: leading", "tenure", tenureID, "champion", st.Champion, "version", st.ChampionVersion, "steps", st.Steps)
	}
	if err := l.serve(ctx, l.st); err != nil {
		return err
	}
	stats := l.refreshStats(ctx)
	if stats == nil {
		return errors.New("reward statistics not loaded")
	}
	if champN := stats[l.st.Champion].N; champN < l.st.LastN {
		l.st.LastN = 0 // the statistics restarted (in-memory statistics and a restart)
	}
	next := l.st.clone()
	events := l.judge(next, stats)
	champN := stats[next.Champion].N
	if len(events) > 0 {
		if err := l.commit(ctx, next, events); err != nil {
			return err
		}
	}
	if len(l.st.candidates()) >= l.cfg.MaxCandidates || champN-l.st.LastN < float64(l.cfg.Every) || l.now().Before(l.retryAt) {
		return nil
	}
	return l.runStep(ctx, champN)
}

// commit writes next and its events, then serves it.
func (l *Learner) commit(ctx context.Context, next *state, events []*replay.LearnEvent) error {
	if err := l.writeState(ctx, next); err != nil {
		return err
	}
	l.st = next
	for _, ev := range events {
		l.rt.Record(ev)
		l.m.decisions.WithLabelValues(ev.Action).Inc()
		l.log.Info("learn: "+ev.Action, "arm", ev.Arm, "version", ev.Version, "champion", ev.Champion, "reason", ev.Reason)
	}
	return l.serve(ctx, next)
}

// initState starts a learner: the initial champion's playbook (empty for an arm
// without augmenter) becomes the next version of the store.
func (l *Learner) initState(ctx context.Context) (*state, error) {
	seed := &playbook.Playbook{}
	if l.seedFrom.Type == config.AugmenterPlaybook {
		b, err := os.ReadFile(l.seedFrom.File)
		if err != nil {
			return nil, fmt.Errorf("the champion's playbook: %w", err)
		}
		if seed, err = playbook.Parse(b); err != nil {
			return nil, fmt.Errorf("the champion's playbook %s: %w", l.seedFrom.File, err)
		}
	}
	row, err := l.versions.Write(ctx, seed, storage.Version{Summary: "the playbook of arm " + l.initial + " when learning started"})
	if err != nil {
		return nil, err
	}
	now := l.now().UTC()
	st := &state{Experiment: l.exp, Champion: l.initial, ChampionVersion: row.Version,
		Arms: []stateArm{{Arm: l.initial, Version: row.Version, Entries: row.Entries, Status: armChampion, CreatedAt: now, ChangedAt: now}}}
	ev := l.event(st, replay.LearnVersion, &st.Arms[0], nil)
	ev.Reason = "the playbook learning starts from"
	if err := l.commit(ctx, st, []*replay.LearnEvent{ev}); err != nil {
		return nil, err
	}
	return st, nil
}

// judge stops and promotes candidates in st, returning the events.
func (l *Learner) judge(st *state, stats map[string]policies.Stats) []*replay.LearnEvent {
	guard := l.rt.Stopped(l.exp)
	var events []*replay.LearnEvent
	var best *stateArm
	var bestP float64
	champ := stats[st.Champion]
	minN := float64(l.cfg.MinEpisodes)
	for _, c := range st.candidates() {
		cs := stats[c.Arm]
		if guard[c.Arm] {
			c.Status, c.Reason, c.ChangedAt = armStopped, "the adaptive guardrail: worse than the control "+l.control, l.now().UTC()
			events = append(events, l.event(st, replay.LearnStopped, c, stats, c.Arm, st.Champion, l.control))
			continue
		}
		if cs.N < minN || champ.N < minN {
			continue
		}
		p := policies.ProbBetter(cs, champ, 0, uint64(c.Version)<<32|uint64(cs.N))
		switch {
		case p >= 1-l.cfg.PromoteAlpha && p > bestP:
			best, bestP = c, p
		case p <= l.cfg.PromoteAlpha:
			c.Status, c.Reason, c.ChangedAt = armStopped, fmt.Sprintf("worse than the champion %s: P(better) = %.3f", st.Champion, p), l.now().UTC()
			ev := l.event(st, replay.LearnStopped, c, stats, c.Arm, st.Champion, l.control)
			ev.PBetter = &p
			events = append(events, ev)
		case l.cfg.MaxTrial > 0 && cs.N >= float64(l.cfg.MaxTrial):
			// No verdict after a long trial: as good as the champion, as far as can be
			// told. Stopping it frees the slot for the next step.
			c.Status, c.Reason, c.ChangedAt = armStopped,
				fmt.Sprintf("inconclusive after %d rewarded episodes: P(better than %s) = %.3f", int(cs.N), st.Champion, p), l.now().UTC()
			ev := l.event(st, replay.LearnStopped, c, stats, c.Arm, st.Champion, l.control)
			ev.PBetter = &p
			events = append(events, ev)
		}
	}
	if best != nil {
		old := st.Champion
		if o := st.arm(old); o != nil {
			o.Status, o.Reason, o.ChangedAt = armRetired, "replaced by "+best.Arm, l.now().UTC()
		}
		if !IsLearnArm(old) && old != l.control && !slices.Contains(st.Removed, old) {
			st.Removed = append(st.Removed, old)
		}
		best.Status, best.ChangedAt = armChampion, l.now().UTC()
		best.Reason = fmt.Sprintf("beats the champion %s: P(better) = %.3f", old, bestP)
		st.Champion, st.ChampionVersion, st.BaseVersion = best.Arm, best.Version, 0
		// The new champion's own episodes feed the next step.
		st.LastN, st.Cutoff = 0, time.Time{}
		ev := l.event(st, replay.LearnPromoted, best, stats, best.Arm, old, l.control)
		ev.PBetter = &bestP
		events = append(events, ev)
	}
	return events
}

// runStep reflects on the champion's episodes rewarded since the last step and adds
// the version it makes as a candidate.
func (l *Learner) runStep(ctx context.Context, champN float64) error {
	st := l.st
	src, err := replay.OpenSource(ctx, l.from)
	if err != nil {
		return fmt.Errorf("learn.from: %w", err)
	}
	var eps []*replay.Episode
	cutoff := st.Cutoff
	keep := func(ep *replay.Episode) error {
		if ep.Arm == st.Champion && ep.Reward != nil && ep.RewardAt.After(st.Cutoff) && l.own.Selects(ep) {
			eps = append(eps, ep)
			if ep.RewardAt.After(cutoff) {
				cutoff = ep.RewardAt
			}
		}
		return nil
	}
	var buf *replay.Buffer // the experiment's every episode: only a guidance refresh reflects on them all
	if l.guide != nil {
		var all *replay.Buffer
		if all, err = replay.Read(ctx, src); err == nil {
			buf = &replay.Buffer{}
			for _, ep := range all.Episodes {
				if l.own.Selects(ep) {
					buf.Episodes = append(buf.Episodes, ep)
					_ = keep(ep)
				}
			}
		}
	} else {
		// A fleet's buffer is far larger than one step: stream the champion's
		// episodes (the rest spill, bounded) and keep those rewarded since the last.
		sel := l.own
		sel.Arms = []string{st.Champion}
		_, err = replay.Episodes(ctx, src, replay.ReadOptions{Select: sel}, keep)
		replay.SortEpisodes(eps) // Buffer order, as a step has always seen them
	}
	if c, ok := src.(interface{ Close() error }); ok {
		_ = c.Close()
	}
	if err != nil {
		return fmt.Errorf("learn.from: %w", err)
	}
	// The replay buffer lags the statistics (sinks write in batches, rewards arrive
	// through other replicas): wait a little for the episodes that were counted.
	if len(eps) < l.cfg.Every {
		if l.lagSince.IsZero() {
			l.lagSince = l.now()
		}
		if l.now().Sub(l.lagSince) < max(2*l.cfg.CheckEvery, 2*time.Second) || len(eps) == 0 {
			l.log.Debug("learn: waiting for the champion's rewarded episodes to reach the replay buffer", "champion", st.Champion,
				"have", len(eps), "from", location.Redact(l.from))
			return nil
		}
	}
	l.lagSince = time.Time{}
	l.refreshGuidance(ctx, buf)
	items := l.pair(eps, l.cfg.BatchSize, uint64(st.Steps+1))
	if len(items) == 0 {
		return nil
	}
	parent := st.ChampionVersion
	if st.BaseVersion > 0 {
		parent = st.BaseVersion
	}
	base, err := l.playbook(ctx, parent)
	if err != nil {
		return err
	}
	m, err := l.versions.Manifest(ctx)
	if err != nil {
		return err
	}
	version := m.Latest() + 1
	sctx, cancel := context.WithTimeout(ctx, l.cfg.StepTimeout)
	res, err := l.step(sctx, base.Clone(), version, learn.Batch{Iteration: st.Steps + 1, Items: items, State: st.OptState})
	cancel()
	if err != nil {
		// Back off (doubling, up to 10 minutes) rather than call a failing model every round.
		l.fails++
		l.retryAt = l.now().Add(min(l.cfg.CheckEvery<<min(l.fails, 16), 10*time.Minute))
		return fmt.Errorf("step %d on %s (v%d): %w", st.Steps+1, st.Champion, parent, err)
	}
	l.fails, l.retryAt = 0, time.Time{}
	l.m.steps.Inc()
	next := st.clone()
	next.Steps++
	next.LastN, next.Cutoff, next.OptState = champN, cutoff, res.Summary
	var events []*replay.LearnEvent
	if res.Applied > 0 && res.Playbook != nil {
		sources := res.Sources
		if len(sources) == 0 {
			for _, it := range items {
				for _, ep := range []*replay.Episode{it.Failure, it.Success} {
					if ep != nil {
						sources = append(sources, ep.ID)
					}
				}
			}
		}
		row, err := l.versions.Write(ctx, res.Playbook, storage.Version{Parent: parent, Iteration: next.Steps,
			Summary: res.Summary, Sources: sources})
		if err != nil {
			return err
		}
		if row.Version != version {
			l.log.Warn("learn: the store's latest version moved during the step; another writer shares learn.store",
				"expected", version, "written", row.Version)
		}
		l.cache.Store(row.Version, res.Playbook)
		now := l.now().UTC()
		if res.Playbook.Context(l.cfg.TopN) == base.Context(l.cfg.TopN) {
			// Only counts changed: the agent would see the very same context, so a trial
			// could only tie. The version is kept and the next step starts from it.
			next.BaseVersion = row.Version
			ev := l.event(next, replay.LearnVersion, &stateArm{Version: row.Version, Parent: parent, Iteration: next.Steps,
				Entries: row.Entries, Reason: "the same context as the champion's (only counts changed): not tried; the next step starts from it"}, nil)
			ev.Applied = res.Applied
			events = append(events, ev)
		} else {
			next.Arms = append(next.Arms, stateArm{Arm: learnArmName(row.Version), Version: row.Version, Parent: parent,
				Iteration: next.Steps, Entries: row.Entries, Status: armCandidate, CreatedAt: now, ChangedAt: now})
			arm := &next.Arms[len(next.Arms)-1]
			ev := l.event(next, replay.LearnVersion, arm, nil)
			ev.Applied = res.Applied
			cand := l.event(next, replay.LearnCandidate, arm, l.lastStats(), arm.Arm, st.Champion, l.control)
			cand.Applied = res.Applied
			events = append(events, ev, cand)
		}
	} else {
		l.log.Info("learn: the step changed nothing; no version written", "step", next.Steps, "champion", st.Champion)
	}
	return l.commit(ctx, next, events)
}

// event describes a decision about arm in st (after the decision), with the
// statistics of the named arms.
func (l *Learner) event(st *state, action string, arm *stateArm, stats map[string]policies.Stats, names ...string) *replay.LearnEvent {
	ev := &replay.LearnEvent{V: replay.Version, Type: replay.TypeLearn, ID: replay.NewEventID(), Experiment: l.exp, Action: action,
		Version: arm.Version, Arm: arm.Arm, Parent: arm.Parent, Champion: st.Champion, ChampionVersion: st.ChampionVersion,
		Iteration: arm.Iteration, Entries: arm.Entries, Reason: arm.Reason, At: l.now().UTC()}
	if len(stats) > 0 {
		ev.Stats = map[string]replay.LearnArmStats{}
		for _, name := range names {
			s, ok := stats[name]
			if !ok {
				continue
			}
			as := replay.LearnArmStats{N: s.N}
			if s.N > 0 {
				m := s.Mean()
				as.Mean = &m
			}
			ev.Stats[name] = as
		}
	}
	return ev
}

// refreshGuidance runs the guidance refresh on buf; its failure is logged, never the
// step's: the playbook and the guidance are separate products of the same buffer.
func (l *Learner) refreshGuidance(ctx context.Context, buf *replay.Buffer) {
	if l.guide == nil {
		return
	}
	gctx, cancel := context.WithTimeout(ctx, l.cfg.StepTimeout)
	defer cancel()
	res, err := l.guide(gctx, buf.Tasks())
	l.m.guidance.Add(float64(res.Stats.Done))
	if err != nil {
		l.log.Warn("learn: guidance refresh failed; the playbook step goes on", "file", l.cfg.GuidanceFile,
			"written", res.Stats.Done, "err", err)
		return
	}
	if res.Qualified > 0 {
		l.log.Info("learn: guidance refreshed", "file", l.cfg.GuidanceFile, "tasks", res.Qualified, "written", res.Stats.Done,
			"failed", res.Stats.Failed)
	}
}
