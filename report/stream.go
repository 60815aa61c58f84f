package report

import (
	"context"

	"github.com/camproxy/camproxy/replay"
)

// FromStream computes the report for the episodes of src that ro selects, in one
// streaming pass (replay.Episodes, messages never decoded into memory). Its
// statistics need every reward in start order (the permutation test, the
// cumulative curve), so it keeps a slim copy of each episode: ids, arm, times,
// counts, reward and experiment, about 250 bytes, never the task text, context or
// messages. The result is New's on the same buffer.
func FromStream(ctx context.Context, src replay.Source, ro replay.ReadOptions, o Options) (*Report, replay.Summary, error) {
	b, sum, err := slimBuffer(ctx, src, ro)
	if err != nil {
		return nil, sum, err
	}
	r, err := New(b, o)
	return r, sum, err
}

// SplitStream is FromStream by experiment: Split's reports on the same buffer.
func SplitStream(ctx context.Context, src replay.Source, ro replay.ReadOptions, o Options) (Reports, replay.Summary, error) {
	b, sum, err := slimBuffer(ctx, src, ro)
	if err != nil {
		return nil, sum, err
	}
	rs, err := Split(b, o)
	return rs, sum, err
}

// slimBuffer reads the episodes of src that ro selects as slim copies, in Buffer
// order, with the learn events.
func slimBuffer(ctx context.Context, src replay.Source, ro replay.ReadOptions) (*replay.Buffer, replay.Summary, error) {
	ro.Light = true
	var eps []*replay.Episode
	sum, err := replay.Episodes(ctx, src, ro, func(ep *replay.Episode) error {
		eps = append(eps, slim(ep))
		return nil
	})
	if err != nil {
		return nil, sum, err
	}
	replay.SortEpisodes(eps)
	return &replay.Buffer{Episodes: eps, Learn: sum.Learn}, sum, nil
}

// slim keeps what a report reads of an episode; of its metadata, only the
// experiment it belongs to.
func slim(ep *replay.Episode) *replay.Episode {
	return &replay.Episode{ID: ep.ID, TaskID: ep.TaskID, Arm: ep.Arm, Experiment: ExperimentOf(ep), StartedAt: ep.StartedAt,
		EndedAt: ep.EndedAt, Steps: ep.Steps, AugmentMs: ep.AugmentMs, Reward: ep.Reward, Success: ep.Success, RewardAt: ep.RewardAt}
}
