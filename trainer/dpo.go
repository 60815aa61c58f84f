package trainer

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/camproxy/camproxy/replay"
)

// Pair is one preference: for one task, a context whose runs earned more than
// another's.
type Pair struct {
	TaskID           string   `json:"task_id"`
	Task             string   `json:"task"`
	Chosen           string   `json:"chosen"`
	Rejected         string   `json:"rejected"`
	ChosenReward     float64  `json:"chosen_reward"` // mean reward of the chosen context's runs
	RejectedReward   float64  `json:"rejected_reward"`
	ChosenEpisodes   []string `json:"chosen_episodes"`
	RejectedEpisodes []string `json:"rejected_episodes"`
	ChosenSources    []string `json:"chosen_sources"` // arm/context_source of each run
	RejectedSources  []string `json:"rejected_sources"`
}

// PairOptions chooses the pairs.
type PairOptions struct {
	MinMargin   float64 // pairs need mean rewards further apart than this
	MaxPerTask  int     // 0 = every pair; else the widest margins first
	MinRuns     int     // runs a context needs before its mean counts (default 1)
	IncludeNone bool    // an empty context (a baseline run) may be rejected
}

// PairStats counts what Pairs saw.
type PairStats struct {
	Tasks, TasksWithPairs int
	Contexts              int // distinct (task, context) with enough rewarded runs
	Unrewarded            int // runs without a reward
	NoContext             int // rewarded runs without a context (baselines), unless IncludeNone
	Ties                  int // context pairs whose means are within MinMargin
	Capped                int // pairs left out by MaxPerTask
}

// String says what the buffer held and why pairs were left out.
func (st PairStats) String() string {
	return fmt.Sprintf("%d tasks, %d distinct contexts with rewarded runs; %d context pairs tied within --min-margin, %d capped, %d runs unrewarded, %d rewarded runs without a context",
		st.Tasks, st.Contexts, st.Ties, st.Capped, st.Unrewarded, st.NoContext)
}

type contextRuns struct {
	text     string
	sum      float64
	episodes []string
	sources  []string
}

func (c *contextRuns) mean() float64 { return c.sum / float64(len(c.episodes)) }

// Pairs builds preference pairs from the buffer: within each task, the runs are
// grouped by their exact context (trimmed), each context scored by the mean reward
// of its runs, and every two contexts whose means differ by more than MinMargin
// make a pair, the better one chosen. The CAM always writes something, so runs
// without a context (the baseline arm) are left out unless IncludeNone. Pairs come
// out by task id, then by wider margin, then by the chosen and rejected texts.
func Pairs(tasks []*replay.Task, o PairOptions) ([]Pair, PairStats) {
	if o.MinRuns < 1 {
		o.MinRuns = 1
	}
	var pairs []Pair
	var st PairStats
	for _, t := range tasks {
		if t.ID == "" {
			continue
		}
		st.Tasks++
		byText := map[string]*contextRuns{}
		var ctxs []*contextRuns
		for _, ep := range t.Episodes {
			if ep.Reward == nil {
				st.Unrewarded++
				continue
			}
			text := strings.TrimSpace(ep.Context)
			if text == "" && !o.IncludeNone {
				st.NoContext++
				continue
			}
			c := byText[text]
			if c == nil {
				c = &contextRuns{text: text}
				byText[text] = c
				ctxs = append(ctxs, c)
			}
			c.sum += *ep.Reward
			c.episodes = append(c.episodes, ep.ID)
			c.sources = append(c.sources, ep.Arm+"/"+ep.ContextSource)
		}
		ctxs = slices.DeleteFunc(ctxs, func(c *contextRuns) bool { return len(c.episodes) < o.MinRuns })
		st.Contexts += len(ctxs)
		var tp []Pair
		for i, a := range ctxs {
			for _, b := range ctxs[i+1:] {
				hi, lo := a, b
				if b.mean() > a.mean() {
					hi, lo = b, a
				}
				if hi.mean()-lo.mean() <= o.MinMargin || hi.text == "" {
					st.Ties++ // an empty context is never chosen: the CAM must write one
					continue
				}
				tp = append(tp, Pair{
					TaskID: t.ID, Task: t.Text, Chosen: hi.text, Rejected: lo.text,
					ChosenReward: hi.mean(), RejectedReward: lo.mean(), ChosenEpisodes: hi.episodes, RejectedEpisodes: lo.episodes, ChosenSources: hi.sources, RejectedSources: lo.sources,
				})
			}
		}
		slices.SortFunc(tp, func(x, y Pair) int {
			return cmp.Or(cmp.Compare(y.ChosenReward-y.RejectedReward, x.ChosenReward-x.RejectedReward),
				strings.Compare(x.Chosen, y.Chosen), strings.Compare(x.Rejected, y.Rejected))
		})
		if o.MaxPerTask > 0 && len(tp) > o.MaxPerTask {
			st.Capped += len(tp) - o.MaxPerTask
			tp = tp[:o.MaxPerTask]
		}
		if len(tp) > 0 {
			st.TasksWithPairs++
		}
		pairs = append(pairs, tp...)
	}
	return pairs, st
}

// WriteDPO writes LLaMA-Factory's DPO inputs for pairs into o.Out: ranking records
// (instruction = the CAM's user prompt, chosen, rejected, system) split by task,
// dataset_info.json with ranking: true, dpo.yaml, run.sh and job.yaml.
func WriteDPO(pairs []Pair, o LFOptions) (*Written, error) {
	if len(pairs) == 0 {
		return nil, ErrNoData
	}
	ids := make([]string, len(pairs))
	for i, p := range pairs {
		ids[i] = p.TaskID
	}
	valTasks := SplitByTask(ids, o.Val, o.Seed)
	system := false
	var train, val []alpacaPair
	var trainT, valT []Example
	for _, p := range pairs {
		sys, user := o.Prompter.Prompt(p.Task)
		system = system || sys != ""
		r := alpacaPair{Instruction: user, Chosen: p.Chosen, Rejected: p.Rejected, System: sys}
		if valTasks[p.TaskID] {
			val, valT = append(val, r), append(valT, Example{TaskID: p.TaskID})
		} else {
			train, trainT = append(train, r), append(trainT, Example{TaskID: p.TaskID})
		}
	}
	w := &Written{Train: len(train), Val: len(val), TrainTasks: TaskCount(trainT), ValTasks: TaskCount(valT)}
	w, err := writeLlamaFactory("dpo", o, w, lfData{train: train, val: val, info: rankingDatasetInfo, system: system,
		trainName: DPOTrainDataset, valName: DPOValDataset})
	if err != nil {
		return nil, err
	}
	// pairs.jsonl says where each pair came from: episodes, rewards, arms.
	var lines []byte
	for _, p := range pairs {
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		lines = append(append(lines, b...), '\n')
	}
	out := &fileSet{dir: o.Out}
	out.write("pairs.jsonl", lines, 0o644)
	w.Files = append(w.Files, out.files...)
	return w, out.err
}
