package replay

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/camproxy/camproxy/protocol"
)

// Episode is one agent run reassembled from its events: what ran, the whole
// trajectory, and the harness's verdict.
type Episode struct {
	ID, TaskID, Task, Arm, Context, ContextSource, Protocol, Model string
	// Experiment is the experiment its events record: the episode event's, else its
	// reward event's; "" when they record none (see ExperimentOf).
	Experiment string

	StartedAt time.Time          // from the episode event; else the first step's At
	EndedAt   time.Time          // the last contributing step's At
	Messages  []protocol.Message // the full trajectory, reassembled
	Steps     int                // contributing steps
	Usage     protocol.Usage     // summed over contributing steps
	AugmentMs float64            // the first step's timing augment (context latency)
	Reward    *float64           // latest reward (by At; ties: the later in scan order)
	Success   *bool
	Metadata  json.RawMessage
	RewardAt  time.Time
}

// Buffer is everything a Source held, as whole episodes.
type Buffer struct {
	Episodes   []*Episode    // sorted by StartedAt, then ID
	Skipped    int           // lines that did not decode (bad JSON, unknown type/version)
	Duplicates int           // events seen again with an id already read (at-least-once delivery)
	Orphans    int           // episodes known only from rewards: no episode event and no step
	Learn      []*LearnEvent // the online learner's decisions, by At (ties: scan order)
}

// Task is every run of one task: what reflection contrasts.
type Task struct {
	ID, Text string // Text is the first non-empty Task of its episodes
	Episodes []*Episode
}

// readStep is what reassembly needs of a step event. A step that does not contribute
// keeps no messages: the agent re-sends them in the step that succeeds.
type readStep struct {
	turn     int
	at       time.Time
	augment  float64
	ok       bool
	usage    protocol.Usage
	messages []protocol.Message
	response *protocol.Message
}

// readEpisode collects one episode's events until the scan ends; events arrive in
// any order across writers.
type readEpisode struct {
	ep     *Episode
	opened bool // its episode event was read
	steps  []readStep
	reward bool // ep.Reward came from a reward event
}

// episodeReader folds a stream of lines into episodes.
type episodeReader struct {
	seen     map[string]struct{}
	episodes map[string]*readEpisode
	buf      Buffer
}

// Read scans src and reassembles every episode. Lines that do not decode and
// duplicate events are counted, never fatal: a replay buffer is written by many
// processes, some of which crashed.
func Read(ctx context.Context, src Source) (*Buffer, error) {
	r := &episodeReader{seen: map[string]struct{}{}, episodes: map[string]*readEpisode{}}
	if err := src.Scan(ctx, r.add); err != nil {
		// Not wrapped: a Source's errors name it already ("replay: read segments in
		// DIR", "redis stream S", "s3 list URI"), and a second prefix stuttered.
		return nil, err
	}
	return r.finish(), nil
}

func (r *episodeReader) add(line []byte) error {
	ev, err := Decode(line)
	if err != nil {
		r.buf.Skipped++
		return nil
	}
	if r.duplicate(readEventID(ev)) {
		r.buf.Duplicates++
		return nil
	}
	if e, ok := ev.(*LearnEvent); ok {
		r.buf.Learn = append(r.buf.Learn, e)
		return nil
	}
	r.episode(readEpisodeID(ev)).add(ev)
	return nil
}

// add folds one decoded event of this episode, in scan order.
func (e *readEpisode) add(ev any) {
	switch ev := ev.(type) {
	case *EpisodeEvent:
		e.addEpisode(ev)
	case *StepEvent:
		e.addStep(ev)
	case *RewardEvent:
		e.addReward(ev)
	}
}

// readEpisodeID is the episode an event belongs to; "" for a learn event.
func readEpisodeID(ev any) string {
	switch e := ev.(type) {
	case *EpisodeEvent:
		return e.EpisodeID
	case *StepEvent:
		return e.EpisodeID
	case *RewardEvent:
		return e.EpisodeID
	}
	return ""
}

func readEventID(ev any) string {
	switch e := ev.(type) {
	case *EpisodeEvent:
		return e.ID
	case *StepEvent:
		return e.ID
	case *RewardEvent:
		return e.ID
	case *LearnEvent:
		return e.ID
	}
	return ""
}

// duplicate reports whether id was read before, and remembers it. An event without
// an id cannot be told apart from another, so it is always kept.
func (r *episodeReader) duplicate(id string) bool {
	if id == "" {
		return false
	}
	if _, ok := r.seen[id]; ok {
		return true
	}
	r.seen[id] = struct{}{}
	return false
}

func (r *episodeReader) episode(id string) *readEpisode {
	e := r.episodes[id]
	if e == nil {
		e = &readEpisode{ep: &Episode{ID: id}}
		r.episodes[id] = e
	}
	return e
}

// addEpisode takes the first episode event of an episode; another one (re-sent
// under a new id) describes the same run.
func (e *readEpisode) addEpisode(ev *EpisodeEvent) {
	if e.opened {
		return
	}
	e.opened = true
	ep := e.ep
	ep.TaskID, ep.Task, ep.Arm, ep.Model = ev.TaskID, ev.Task, ev.Arm, ev.Model
	ep.Context, ep.ContextSource, ep.Protocol = ev.Context, ev.ContextSource, ev.Protocol
	ep.StartedAt = ev.StartedAt
	if ev.Experiment != "" {
		ep.Experiment = ev.Experiment // the assignment's record wins over a reward's
	}
}

func (e *readEpisode) addStep(ev *StepEvent) {
	e.steps = append(e.steps, stepOf(ev))
}

// stepOf is what reassembly keeps of a step event.
func stepOf(ev *StepEvent) readStep {
	s := readStep{turn: ev.Turn, at: ev.At, augment: ev.Timing.Augment, ok: ev.Contributes()}
	if s.ok {
		s.usage, s.messages, s.response = ev.Usage, ev.Messages, ev.Response
	}
	return s
}

// addReward keeps the latest verdict: feedback sent again replaces the earlier one.
// On equal times the later event in scan order wins.
func (e *readEpisode) addReward(ev *RewardEvent) {
	if e.reward && ev.At.Before(e.ep.RewardAt) {
		return
	}
	e.reward = true
	v := ev.Reward
	e.ep.Reward, e.ep.Success, e.ep.Metadata, e.ep.RewardAt = &v, ev.Success, ev.Metadata, ev.At
	if ev.Experiment != "" && (!e.opened || e.ep.Experiment == "") {
		e.ep.Experiment = ev.Experiment
	}
}

// finish reassembles every episode and orders them.
func (r *episodeReader) finish() *Buffer {
	b := &r.buf
	b.Episodes = make([]*Episode, 0, len(r.episodes))
	for _, e := range r.episodes {
		if e.orphan() {
			b.Orphans++
			continue
		}
		b.Episodes = append(b.Episodes, e.assemble())
	}
	r.episodes, r.seen = nil, nil
	SortEpisodes(b.Episodes)
	sortLearn(b.Learn)
	return b
}

// orphan reports an episode known only from rewards: no episode event, no step.
func (e *readEpisode) orphan() bool { return !e.opened && len(e.steps) == 0 }

// assemble builds the trajectory: steps by turn (ties by time, then scan order),
// each contributing step's new messages followed by its answer. It releases the
// steps, which are only needed until here.
func (e *readEpisode) assemble() *Episode {
	ep := e.ep
	steps := e.steps
	e.steps = nil
	if len(steps) == 0 {
		return ep
	}
	slices.SortStableFunc(steps, func(x, y readStep) int {
		if c := cmp.Compare(x.turn, y.turn); c != 0 {
			return c
		}
		return x.at.Compare(y.at)
	})
	if ep.StartedAt.IsZero() {
		ep.StartedAt = steps[0].at
	}
	ep.AugmentMs = steps[0].augment
	ep.Messages = make([]protocol.Message, 0, readMessageCount(steps))
	for _, s := range steps {
		if !s.ok {
			continue
		}
		ep.Messages = append(ep.Messages, s.messages...)
		if s.response != nil {
			ep.Messages = append(ep.Messages, *s.response)
		}
		ep.Steps++
		ep.Usage.InputTokens += s.usage.InputTokens
		ep.Usage.OutputTokens += s.usage.OutputTokens
		ep.EndedAt = s.at
	}
	return ep
}

// SortEpisodes puts episodes in Buffer order: by StartedAt, then ID.
func SortEpisodes(eps []*Episode) {
	slices.SortFunc(eps, func(x, y *Episode) int {
		if c := x.StartedAt.Compare(y.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
}

// sortLearn orders learn events by At, ties in scan order.
func sortLearn(evs []*LearnEvent) {
	slices.SortStableFunc(evs, func(x, y *LearnEvent) int { return x.At.Compare(y.At) })
}

func readMessageCount(steps []readStep) int {
	n := 0
	for _, s := range steps {
		n += len(s.messages)
		if s.response != nil {
			n++
		}
	}
	return n
}

// Tasks groups the episodes by TaskID, tasks sorted by ID, episodes in Buffer order.
// Episodes without a task id (their episode event is missing) form the task "".
func (b *Buffer) Tasks() []*Task {
	byID := map[string]*Task{}
	var tasks []*Task
	for _, ep := range b.Episodes {
		t := byID[ep.TaskID]
		if t == nil {
			t = &Task{ID: ep.TaskID}
			byID[ep.TaskID] = t
			tasks = append(tasks, t)
		}
		if t.Text == "" {
			t.Text = ep.Task
		}
		t.Episodes = append(t.Episodes, ep)
	}
	slices.SortFunc(tasks, func(x, y *Task) int { return strings.Compare(x.ID, y.ID) })
	return tasks
}
