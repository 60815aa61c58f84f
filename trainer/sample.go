package trainer

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/camproxy/camproxy/replay"
)

// SampleOptions choose which runs each reflection job compares.
type SampleOptions struct {
	MinRuns    int   // a task needs at least this many rewarded runs; default 2
	Subsets    int   // distinct subsets drawn per task, at most; default 1
	SubsetSize int   // runs per subset (fewer when a task has fewer); default 3
	Seed       int64 // same seed, same buffer → same jobs
	MixedOnly  bool  // keep only tasks whose runs both succeeded and failed
}

func (o *SampleOptions) defaults() {
	if o.MinRuns <= 0 {
		o.MinRuns = 2
	}
	if o.Subsets <= 0 {
		o.Subsets = 1
	}
	if o.SubsetSize <= 0 {
		o.SubsetSize = 3
	}
}

// Job is one reflection: a subset of the runs of one task.
type Job struct {
	Key    string // task id + sorted episode ids: what resume matches on
	TaskID string
	Task   string
	Runs   []*replay.Episode // in buffer order; each has a reward
	Mixed  bool              // the task (not only this subset) has runs that succeeded and runs that failed
	Subset int               // index of this subset among the task's, from 0
}

// Episodes are the ids of the job's runs, in run order.
func (j *Job) Episodes() []string {
	ids := make([]string, len(j.Runs))
	for i, ep := range j.Runs {
		ids[i] = ep.ID
	}
	return ids
}

// Rewards are the rewards of the job's runs, in run order.
func (j *Job) Rewards() []float64 {
	r := make([]float64, len(j.Runs))
	for i, ep := range j.Runs {
		r[i] = *ep.Reward
	}
	return r
}

// JobKey identifies a job whatever the order of its episodes: the task id and the
// sorted episode ids.
func JobKey(taskID string, episodes []string) string {
	ids := slices.Clone(episodes)
	slices.Sort(ids)
	return taskID + "\x00" + strings.Join(ids, "\x00")
}

// Plan is what Sample made of a buffer.
type Plan struct {
	Jobs     []*Job // tasks with mixed outcomes first (round-robin over their subsets), then the rest
	Tasks    int    // tasks in the buffer
	Eligible int    // tasks with enough rewarded runs and a task text
	Mixed    int    // eligible tasks with mixed outcomes
	TooFew   int    // tasks with fewer than MinRuns rewarded runs
	NoText   int    // tasks whose episodes carry no task text (nothing to key guidance on)
	Uniform  int    // eligible tasks left out by MixedOnly
}

// Succeeded is a run's outcome: the harness's success flag, else reward ≥ 1 (as the
// report counts success).
func Succeeded(ep *replay.Episode) bool {
	if ep.Success != nil {
		return *ep.Success
	}
	return ep.Reward != nil && *ep.Reward >= 1
}

// maxEnumerate bounds the subsets enumerated per task; beyond, candidates are drawn.
const maxEnumerate = 5000

// Sample groups the runs by task and draws each task's subsets. It is deterministic:
// every task's draws depend only on the seed, the task id and its runs.
func Sample(tasks []*replay.Task, o SampleOptions) *Plan {
	o.defaults()
	p := &Plan{Tasks: len(tasks)}
	type taskJobs struct {
		mixed bool
		jobs  []*Job
	}
	var all []taskJobs
	for _, t := range tasks {
		var runs []*replay.Episode
		for _, ep := range t.Episodes {
			if ep.Reward != nil {
				runs = append(runs, ep)
			}
		}
		switch {
		case len(runs) < o.MinRuns || len(runs) == 0:
			p.TooFew++
			continue
		case strings.TrimSpace(t.Text) == "":
			p.NoText++
			continue
		}
		mixed := outcomesMixed(runs)
		if o.MixedOnly && !mixed {
			p.Uniform++
			continue
		}
		p.Eligible++
		if mixed {
			p.Mixed++
		}
		tj := taskJobs{mixed: mixed}
		for i, subset := range drawSubsets(t.ID, runs, o) {
			sub := make([]*replay.Episode, len(subset))
			for j, idx := range subset {
				sub[j] = runs[idx]
			}
			job := &Job{TaskID: t.ID, Task: t.Text, Runs: sub, Mixed: mixed, Subset: i}
			job.Key = JobKey(t.ID, job.Episodes())
			tj.jobs = append(tj.jobs, job)
		}
		all = append(all, tj)
	}
	// Mixed tasks first, so that a partial run (or --limit) covers them all before any
	// task whose runs all agree; within a tier, the first subset of every task, then
	// the second, and so on.
	for _, mixed := range []bool{true, false} {
		for round := 0; ; round++ {
			added := false
			for _, tj := range all {
				if tj.mixed == mixed && round < len(tj.jobs) {
					p.Jobs = append(p.Jobs, tj.jobs[round])
					added = true
				}
			}
			if !added {
				break
			}
		}
	}
	return p
}

func outcomesMixed(runs []*replay.Episode) bool {
	ok, failed := false, false
	for _, ep := range runs {
		if Succeeded(ep) {
			ok = true
		} else {
			failed = true
		}
	}
	return ok && failed
}

// candidate is one subset of a task's runs (indexes, ascending).
type candidate struct {
	idx   []int
	score int
}

// subsetScore prefers subsets that hold a success and a failure, then subsets whose
// rewards differ at all.
func subsetScore(runs []*replay.Episode, idx []int) int {
	ok, failed, differ := false, false, false
	for _, i := range idx {
		if Succeeded(runs[i]) {
			ok = true
		} else {
			failed = true
		}
		if *runs[i].Reward != *runs[idx[0]].Reward {
			differ = true
		}
	}
	switch {
	case ok && failed:
		return 2
	case differ:
		return 1
	}
	return 0
}

// drawSubsets returns up to o.Subsets distinct subsets of runs: the best-scoring
// first and, among equals, those that reuse the runs already picked the least;
// remaining ties are broken by a shuffle seeded from o.Seed and the task id.
func drawSubsets(taskID string, runs []*replay.Episode, o SampleOptions) [][]int {
	k := min(o.SubsetSize, len(runs))
	h := fnv.New64a()
	h.Write([]byte(taskID))
	rng := rand.New(rand.NewPCG(uint64(o.Seed), h.Sum64()))

	var cands []candidate
	if c, ok := binomial(len(runs), k, maxEnumerate); ok {
		cands = make([]candidate, 0, c)
		combinations(len(runs), k, func(idx []int) {
			cands = append(cands, candidate{idx: slices.Clone(idx)})
		})
		rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	} else {
		cands = randomCandidates(rng, runs, k, max(4*o.Subsets, 256))
	}
	for i := range cands {
		cands[i].score = subsetScore(runs, cands[i].idx)
	}
	uses := make([]int, len(runs))
	var out [][]int
	for len(out) < o.Subsets && len(cands) > 0 {
		best, bestOverlap := -1, 0
		for i, c := range cands {
			overlap := 0
			for _, r := range c.idx {
				overlap += uses[r]
			}
			if best < 0 || c.score > cands[best].score || c.score == cands[best].score && overlap < bestOverlap {
				best, bestOverlap = i, overlap
			}
		}
		c := cands[best]
		cands = slices.Delete(cands, best, best+1)
		for _, r := range c.idx {
			uses[r]++
		}
		out = append(out, c.idx)
	}
	return out
}

// randomCandidates draws up to n distinct subsets when there are too many to list;
// half the draws start from one success and one failure so that mixed subsets are
// found even when one outcome is rare.
func randomCandidates(rng *rand.Rand, runs []*replay.Episode, k, n int) []candidate {
	var okIdx, failIdx []int
	for i, ep := range runs {
		if Succeeded(ep) {
			okIdx = append(okIdx, i)
		} else {
			failIdx = append(failIdx, i)
		}
	}
	seen := map[string]bool{}
	var out []candidate
	for try := 0; try < 8*n && len(out) < n; try++ {
		pick := map[int]bool{}
		if try%2 == 0 && k >= 2 && len(okIdx) > 0 && len(failIdx) > 0 {
			pick[okIdx[rng.IntN(len(okIdx))]] = true
			pick[failIdx[rng.IntN(len(failIdx))]] = true
		}
		for len(pick) < k {
			pick[rng.IntN(len(runs))] = true
		}
		idx := make([]int, 0, k)
		for i := range pick {
			idx = append(idx, i)
		}
		slices.Sort(idx)
		key := fmt.Sprint(idx)
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, candidate{idx: idx})
	}
	return out
}

// binomial returns C(n, k) when it is at most limit.
func binomial(n, k, limit int) (int, bool) {
	c := 1
	for i := 1; i <= k; i++ {
		c = c * (n - k + i) / i
		if c > limit {
			return 0, false
		}
	}
	return c, true
}

// combinations calls fn with every k-subset of 0..n-1 in lexicographic order; fn
// must not keep idx.
func combinations(n, k int, fn func(idx []int)) {
	idx := make([]int, k)
	for i := range idx {
		idx[i] = i
	}
	for {
		fn(idx)
		i := k - 1
		for i >= 0 && idx[i] == n-k+i {
			i--
		}
		if i < 0 {
			return
		}
		idx[i]++
		for j := i + 1; j < k; j++ {
			idx[j] = idx[j-1] + 1
		}
	}
}

// compareNatural orders names with digit runs compared as numbers (run_2 < run_10).
func compareNatural(a, b string) int {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digitPrefix(s string) int {
	n := 0
	for n < len(s) && '0' <= s[n] && s[n] <= '9' {
		n++
	}
	return n
}

// Estimate guesses a job's tokens without calling a model, at about 4 bytes a token.
// files is the sandbox's text (task.md and the runs). input is what the model is
// sent if it reads every file once, in read_file pieces of maxToolBytes, while each
// turn re-sends the conversation so far: turns·prompt + files·(turns+1)/2, where
// turns = pieces + 2 (a listing and the answer), at most maxSteps.
func Estimate(job *Job, p Prompts, maxSteps, maxToolBytes int) (files, input int64) {
	if maxSteps <= 0 {
		maxSteps = DefaultMaxSteps
	}
	if maxToolBytes <= 0 {
		maxToolBytes = DefaultMaxToolBytes
	}
	texts := []string{renderTask(job)}
	for i, ep := range job.Runs {
		texts = append(texts, renderRun(i, ep))
	}
	pieces := 0
	for _, t := range texts {
		files += int64(len(t))
		pieces += (len(t) + maxToolBytes - 1) / maxToolBytes
	}
	prompt := int64(len(p.System) + len(p.userMessage(job, maxSteps)) + 1500) // + the tool definitions
	turns := int64(min(pieces+2, maxSteps))
	files /= 4
	input = turns*prompt/4 + files*(turns+1)/2
	return files, input
}
