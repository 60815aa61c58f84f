package episode

import (
	"os"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/protocol"
)

// tauAnswers is every assistant message of the tau-bench airline trajectories, as
// bench-load's upstream answers them: what setTips digests once per call.
func tauAnswers(b *testing.B) []protocol.Message {
	raw, err := os.ReadFile("../../shared/data/tau-bench/gpt-4o-airline.json")
	if os.IsNotExist(err) {
		b.Skip("tau-bench data absent")
	}
	if err != nil {
		b.Fatal(err)
	}
	var out []protocol.Message
	for _, run := range gjson.ParseBytes(raw).Array() {
		for _, m := range run.Get("traj").Array() {
			if m.Get("role").Str != "assistant" {
				continue
			}
			msg := protocol.Message{Role: "assistant", Content: m.Get("content").Str}
			for _, tc := range m.Get("tool_calls").Array() {
				msg.ToolCalls = append(msg.ToolCalls, protocol.ToolCall{ID: tc.Get("id").Str, Type: "function",
					Name: tc.Get("function.name").Str, Arguments: tc.Get("function.arguments").Str})
			}
			out = append(out, msg)
		}
	}
	return out
}

// BenchmarkDigestAnswer is Digest of one tau-bench answer, in turn: what setTips
// hashes once per call, and Chains again when the agent sends the answer back
// (cpu-ns/op: the process's CPU per digest, steadier than ns/op on a shared box).
func BenchmarkDigestAnswer(b *testing.B) {
	msgs := tauAnswers(b)
	i := 0
	testkit.CPUPerOp(b, func() {
		_ = Digest(&msgs[i%len(msgs)])
		i++
	})
}
