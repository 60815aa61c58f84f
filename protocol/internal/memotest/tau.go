package memotest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
)

// TauPath is the real tau-bench trajectories (see /work/shared/data/README.md), from
// an adapter package's directory.
const TauPath = "../../../shared/data/tau-bench/gpt-4o-airline.json"

// Msg is one chat message of a tau-bench trajectory, for an adapter's test to write
// in its own wire shape.
type Msg struct {
	Role, Content string
	Calls         []Call // an assistant's tool calls
	CallID, Name  string // a tool result's call and tool
}

// Call is one tool call; Arguments is its JSON text.
type Call struct{ ID, Name, Arguments string }

// Trajectories returns every k-th run of the tau-bench data as messages; the test is
// skipped when the data is absent.
func Trajectories(tb testing.TB, k int) [][]Msg {
	tb.Helper()
	raw, err := os.ReadFile(TauPath)
	if os.IsNotExist(err) {
		tb.Skipf("%s absent", TauPath)
	}
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]Msg
	for i, run := range gjson.ParseBytes(raw).Array() {
		if i%k != 0 {
			continue
		}
		var msgs []Msg
		for _, m := range run.Get("traj").Array() {
			msgs = append(msgs, msgOf(m))
		}
		out = append(out, msgs)
	}
	return out
}

func msgOf(m gjson.Result) Msg {
	out := Msg{Role: m.Get("role").Str, Content: m.Get("content").Str, CallID: m.Get("tool_call_id").Str, Name: m.Get("name").Str}
	for _, c := range m.Get("tool_calls").Array() {
		out.Calls = append(out.Calls, Call{ID: c.Get("id").Str, Name: c.Get("function.name").Str, Arguments: c.Get("function.arguments").Str})
	}
	return out
}

// LongEpisode is turn t of one long episode of real messages, as the proxy's
// benchmarks build it: the first run's system prompt and user message, then t-1
// pairs of one assistant tool call and its result, taken from the runs in order.
func LongEpisode(tb testing.TB, t int) []Msg {
	tb.Helper()
	trajs := Trajectories(tb, 1)
	msgs := []Msg{trajs[0][0], trajs[0][1]}
	for _, tr := range trajs {
		for i := 2; i+1 < len(tr) && len(msgs) < 2+2*(t-1); i++ {
			a, res := tr[i], tr[i+1]
			if a.Role != "assistant" || len(a.Calls) != 1 || res.Role != "tool" {
				continue
			}
			id := fmt.Sprintf("call_long_%03d", len(msgs)/2)
			a.Calls = []Call{{ID: id, Name: a.Calls[0].Name, Arguments: a.Calls[0].Arguments}}
			res.CallID = id
			msgs = append(msgs, a, res)
			i++
		}
	}
	if len(msgs) < 2+2*(t-1) {
		tb.Fatalf("the trajectories hold %d tool call pairs; turn %d needs %d", (len(msgs)-2)/2, t, t-1)
	}
	return msgs
}

// Captures returns the bodies real harnesses sent (protocol/testdata/harness), from
// an adapter package's directory: every file of each named client.
func Captures(tb testing.TB, clients ...string) map[string][]byte {
	tb.Helper()
	out := map[string][]byte{}
	for _, c := range clients {
		files, _ := filepath.Glob(filepath.Join("../testdata/harness", c, "*.json"))
		if len(files) == 0 {
			tb.Fatalf("no harness captures of %s", c)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				tb.Fatal(err)
			}
			out[f] = b
		}
	}
	return out
}

// BenchTurns parses and splices turn 1 and turn 60 of one long episode of real
// messages (LongEpisode, written by write in the adapter's wire shape), the memo warm
// as in an episode's steady state (every earlier message resent): issue 17 wants
// turn 60 within 1.5× of turn 1.
func BenchTurns[R protocol.Request](b *testing.B, write func(testing.TB, []Msg) []byte, parse func([]byte) (R, error)) {
	for _, t := range []int{1, 60} {
		body := write(b, LongEpisode(b, t))
		b.Run("turn="+strconv.Itoa(t), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			var dst []byte // the proxy splices into a buffer it reuses
			for b.Loop() {
				r, err := parse(body)
				if err != nil || r.Parsed().Task == "" {
					b.Fatal(err)
				}
				dst = r.SpliceTo(dst[:0], body, protocol.AppendToTask, "\n\nctx")
			}
		})
	}
}
