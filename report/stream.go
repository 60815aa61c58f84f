package report

import (
	"context"
	"encoding/json"

	"github.com/camproxy/camproxy/replay"
)

// FromStream computes the report for the episodes of src that ro selects, in one
// streaming pass (replay.Episodes, messages never decoded into memory). Its
// statistics need every reward in start order (the permutation test, the
// cumulative curve), so it keeps a slim copy of each episode: ids, arm, times,
// counts, reward and experiment, about 250 bytes, never the task text, context or
// messages. The result is New's on the same buffer.
func FromStream(ctx context.Context, src replay.Source, ro replay.ReadOptions, o Options) (*Report, replay.Summary, error) {
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
	r, err := New(&replay.Buffer{Episodes: eps, Learn: sum.Learn}, o)
	return r, sum, err
}

// slim keeps what a report reads of an episode; Metadata shrinks to the
// experiment it records.
func slim(ep *replay.Episode) *replay.Episode {
	s := &replay.Episode{ID: ep.ID, TaskID: ep.TaskID, Arm: ep.Arm, StartedAt: ep.StartedAt, EndedAt: ep.EndedAt,
		Steps: ep.Steps, AugmentMs: ep.AugmentMs, Reward: ep.Reward, Success: ep.Success, RewardAt: ep.RewardAt}
	if x := ExperimentOf(ep); x != "" {
		s.Metadata, _ = json.Marshal(map[string]string{"experiment": x})
	}
	return s
}
