package replay

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/openai"
)

// tauSteps are the step events of the first tau-bench airline run as the data plane
// records them: turn 1 (the system prompt and the task, new with the episode) and a
// later turn (the tool result new since the previous answer), each with its answer,
// the messages read by the OpenAI adapter from the bodies the agent sent.
func tauSteps(b *testing.B) (first, later *StepEvent) {
	b.Helper()
	raw, err := os.ReadFile(testkit.TauBenchAirline())
	if err != nil {
		b.Skipf("tau-bench data: %v", err)
	}
	var msgs [][]byte
	for _, m := range gjson.GetBytes(raw, "0.traj").Array() {
		var c bytes.Buffer
		if err := json.Compact(&c, []byte(m.Raw)); err != nil {
			b.Fatal(err)
		}
		msgs = append(msgs, c.Bytes())
	}
	// turn reads the body of the call whose answer is msgs[i] and that answer.
	turn := func(i, from int) *StepEvent {
		body := append([]byte(`{"model":"gpt-4o","messages":[`), bytes.Join(msgs[:i], []byte(","))...)
		req, err := openai.Parse(append(body, `]}`...), protocol.DefaultTaskRules())
		if err != nil {
			b.Fatal(err)
		}
		ans, err := openai.Parse([]byte(`{"messages":[`+string(msgs[i])+`]}`), protocol.DefaultTaskRules())
		if err != nil {
			b.Fatal(err)
		}
		return &StepEvent{V: Version, Type: TypeStep, ID: NewEventID(), EpisodeID: "ep_0123456789abcdef01234567", Turn: 3,
			Messages: req.Messages[from:], Response: &ans.Messages[0], Usage: protocol.Usage{InputTokens: 4000, OutputTokens: 60},
			Timing: Timing{Augment: 0.012, UpstreamTTFB: 812.345, Total: 815.5}, Status: 200, At: time.Now().UTC()}
	}
	var answers []int
	for i, m := range msgs {
		if gjson.GetBytes(m, "role").Str == "assistant" {
			answers = append(answers, i)
		}
	}
	if len(answers) < 3 {
		b.Skip("the first run has fewer than 3 turns")
	}
	return turn(answers[0], 0), turn(answers[2], answers[1]+1)
}

// BenchmarkEncodeStep is the recorder's encoding of a step, turn 1's and a later
// one's (cpu-ns/op: the process's CPU per step, steadier than ns/op on a shared box).
func BenchmarkEncodeStep(b *testing.B) {
	first, later := tauSteps(b)
	r := &Recorder{}
	for name, s := range map[string]*StepEvent{"turn=1": first, "turn=3": later} {
		b.Run(name, func(b *testing.B) {
			line, _ := r.encode(nil, s)
			b.SetBytes(int64(len(line)))
			testkit.CPUPerOp(b, func() { _, _ = r.encode(nil, s) })
		})
	}
}

// BenchmarkEncodeEpisode is the recorder's encoding of the event that opens an
// episode (one per new episode: with tau-bench's ~9 turns an episode, about one
// call in nine), with a context of a few CAM tips.
func BenchmarkEncodeEpisode(b *testing.B) {
	ctx := strings.Repeat("- When a user asks to change a basic-economy flight, check the fare rules before offering options & quote the fee.\n", 6)
	e := &EpisodeEvent{V: Version, Type: TypeEpisode, ID: NewEventID(), EpisodeID: "ep_0123456789abcdef01234567", TaskID: "airline-17",
		Task: "You are mia_li_3668. You want to fly from New York to Seattle on May 20 (one way).", Experiment: "default",
		Arm: "cam", Context: ctx, ContextSource: "hit", Protocol: "openai", Model: "gpt-4o", StartedAt: time.Now().UTC()}
	r := &Recorder{}
	line, _ := r.encode(nil, e)
	b.SetBytes(int64(len(line)))
	buf := make([]byte, 0, 2*len(line))
	testkit.CPUPerOp(b, func() { buf, _ = r.encode(buf[:0], e) })
}
