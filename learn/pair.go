package learn

import (
	"cmp"
	"encoding/binary"
	"hash/fnv"
	"slices"

	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/trainer"
)

// draw is an episode's place in a seeded shuffle: a hash of the seed and its id, so
// the order depends on neither the input order nor the other episodes.
func draw(seed uint64, id string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(id))
	return h.Sum64()
}

// taskKey groups episodes by task; an episode without a task id is a task of its own.
func taskKey(ep *replay.Episode) string {
	if ep.TaskID != "" {
		return "t:" + ep.TaskID
	}
	return "e:" + ep.ID
}

// pair orders the rewarded episodes as Pair documents. Within the failures, tasks
// take turns: every task's first failure (in seeded order) comes before any task's
// second, so a bounded batch covers as many tasks as it can. The k-th failure of a
// task is paired with its task's k-th success (cycling), so repeated failures of a
// task are contrasted with different successes where there are several.
func pair(episodes []*replay.Episode, size int, seed uint64) []Item {
	type task struct {
		fails, wins []*replay.Episode
	}
	tasks := map[string]*task{}
	var keys []string
	seen := map[string]bool{}
	for _, ep := range episodes {
		if ep == nil || ep.Reward == nil || seen[ep.ID] {
			continue
		}
		seen[ep.ID] = true
		k := taskKey(ep)
		t := tasks[k]
		if t == nil {
			t = &task{}
			tasks[k] = t
			keys = append(keys, k)
		}
		if trainer.Succeeded(ep) {
			t.wins = append(t.wins, ep)
		} else {
			t.fails = append(t.fails, ep)
		}
	}
	byDraw := func(a, b *replay.Episode) int {
		return cmp.Or(cmp.Compare(draw(seed, a.ID), draw(seed, b.ID)), cmp.Compare(a.ID, b.ID))
	}
	type ranked struct {
		item Item
		rank int
		key  uint64
		id   string
	}
	var fails, alone []ranked
	for _, k := range keys {
		t := tasks[k]
		slices.SortFunc(t.fails, byDraw)
		slices.SortFunc(t.wins, byDraw)
		for r, f := range t.fails {
			it := Item{Failure: f}
			if len(t.wins) > 0 {
				it.Success = t.wins[r%len(t.wins)]
			}
			fails = append(fails, ranked{it, r, draw(seed, f.ID), f.ID})
		}
		if len(t.fails) == 0 && len(t.wins) > 0 {
			// A task that never failed is shown once, by one success: what works.
			alone = append(alone, ranked{Item{Success: t.wins[0]}, 0, draw(seed, t.wins[0].ID), t.wins[0].ID})
		}
	}
	order := func(a, b ranked) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.key, b.key), cmp.Compare(a.id, b.id))
	}
	slices.SortFunc(fails, order)
	slices.SortFunc(alone, order)
	out := make([]Item, 0, len(fails)+len(alone))
	for _, r := range append(fails, alone...) {
		if size > 0 && len(out) == size {
			break
		}
		out = append(out, r.item)
	}
	return out
}
