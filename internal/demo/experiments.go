package demo

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/replay"
)

// This file helps tests of a learner per experiment (issue 30): scripted optimiser
// models whose playbook lines name the runs they were learnt from, so a line learnt
// from another experiment's runs shows, and the replay events of a rewarded run.

// LearntPrefix starts every entry TaskEcho's mutator adds; the task follows.
const LearntPrefix = "Learnt from task: "

// batchTask is a batch.md line naming an item's task (learn.RenderBatch).
var batchTask = regexp.MustCompile(`(?m)^task: (.+)$`)

// EchoGuidance is the guidance TaskEcho writes for every task it is asked about.
const EchoGuidance = "Read the request back before acting on it."

// NewTaskEcho starts scripted optimiser models behind one OpenAI-compatible server
// (learn.model openai/NAME, learn.base_url URL+"/v1"): the reflector finishes at
// once; the mutator adds, for each task of its batch, the entry LearntPrefix+TASK,
// then finishes; a guidance reflection (learn.guidance_file) answers EchoGuidance.
func NewTaskEcho() *testkit.Upstream {
	u := testkit.NewUpstream()
	u.Configure(func(u *testkit.Upstream) { u.Reply = taskEcho })
	return u
}

func taskEcho(body gjson.Result) testkit.Reply {
	c := readConversation(body)
	if body.Get("tool_choice").String() == "none" {
		return testkit.Reply{Content: "Done with this batch."}
	}
	if !c.tools[playbook.ToolAdd] && !c.tools[playbook.ToolTag] {
		return testkit.Reply{Content: "<guidance>" + EchoGuidance + "</guidance>"} // learn.guidance_file's contrastive reflection
	}
	if !c.tools[playbook.ToolAdd] || c.called(playbook.ToolAdd) {
		calls := finish("nothing more")
		calls[0].ID = fmt.Sprintf("call_%d_0", c.messages)
		return testkit.Reply{ToolCalls: calls}
	}
	var calls []testkit.ToolCall
	for _, m := range body.Get("messages").Array() {
		if m.Get("role").String() != "user" {
			continue
		}
		for i, t := range batchTask.FindAllStringSubmatch(text(m.Get("content")), -1) {
			tc := call(playbook.ToolAdd, map[string]string{"section": Section, "content": LearntPrefix + strings.TrimSpace(t[1])})
			tc.ID = fmt.Sprintf("call_%d_%d", c.messages, i)
			calls = append(calls, tc)
		}
		break // the first user message holds the batch
	}
	if len(calls) == 0 {
		return testkit.Reply{ToolCalls: finish("no task in the batch")}
	}
	return testkit.Reply{ToolCalls: calls}
}

// LearntTasks are the tasks pb's TaskEcho entries were learnt from.
func LearntTasks(pb *playbook.Playbook) []string {
	var out []string
	for _, e := range pb.Entries {
		if t, ok := strings.CutPrefix(e.Content, LearntPrefix); ok {
			out = append(out, t)
		}
	}
	return out
}

// RewardedRun is the replay events of one finished episode of experiment exp (""
// as events written before episodes carried it) on arm, rewarded: what the data
// plane and POST /v1/feedback record.
func RewardedRun(exp, arm, task string, reward float64, at time.Time) []any {
	id := replay.NewEventID()
	at = at.UTC()
	return []any{
		&replay.EpisodeEvent{V: replay.Version, Type: replay.TypeEpisode, ID: replay.NewEventID(), EpisodeID: id, TaskID: "t-" + task,
			Task: task, Experiment: exp, Arm: arm, ContextSource: "miss", Protocol: "openai", Model: "gpt-4o", StartedAt: at},
		&replay.StepEvent{V: replay.Version, Type: replay.TypeStep, ID: replay.NewEventID(), EpisodeID: id, Experiment: exp,
			Messages: []protocol.Message{{Role: "user", Content: task}}, Response: &protocol.Message{Role: "assistant", Content: "done"},
			Status: 200, At: at},
		&replay.RewardEvent{V: replay.Version, Type: replay.TypeReward, ID: replay.NewEventID(), EpisodeID: id, Experiment: exp,
			Reward: reward, At: at.Add(time.Millisecond)},
	}
}

// AsExperiments turns cfg's one experiment and its learner into an experiments
// list: an entry per name, matched by the X-CAM-Agent header NAME-bot, with cfg's
// experiment's arms and settings and cfg's learn section on the store store(name).
func AsExperiments(cfg *config.Config, names []string, store func(name string) string) {
	for _, name := range names {
		e := cfg.Experiment
		e.Name = name
		e.Arms = append([]config.Arm(nil), cfg.Experiment.Arms...)
		e.Match = config.Match{Agents: []string{name + "-bot"}}
		lc := cfg.Learn
		lc.Store = store(name)
		e.Learn = &lc
		cfg.Experiments = append(cfg.Experiments, e)
	}
	cfg.Experiment = config.DefaultExperiment()
	cfg.Learn = config.DefaultLearn()
}
