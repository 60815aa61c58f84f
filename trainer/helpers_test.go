package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/replay/lake"
)

const tauAirline = "../../shared/data/tau-bench/gpt-4o-airline.json"

var airline struct {
	once sync.Once
	buf  *replay.Buffer
	err  error
}

// airlineBuffer imports the real tau-bench trajectories into a file:// replay buffer
// in a temporary directory and reads them back, once per test binary (the episodes
// are only read).
func airlineBuffer(t *testing.T) *replay.Buffer {
	t.Helper()
	if _, err := os.Stat(tauAirline); err != nil {
		t.Skipf("tau-bench data not available (%v): see shared/data/README.md", err)
	}
	airline.once.Do(func() {
		airline.buf, airline.err = importTau(t.TempDir())
	})
	if airline.err != nil {
		t.Fatal(airline.err)
	}
	return airline.buf
}

func importTau(dir string) (*replay.Buffer, error) {
	ctx := context.Background()
	uri := "file://" + filepath.ToSlash(dir)
	sink, err := replay.OpenSink(ctx, uri, replay.OpenOptions{Writer: "test"})
	if err != nil {
		return nil, err
	}
	f, err := os.Open(tauAirline)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines [][]byte
	if _, err := lake.ImportTauBench(f, lake.ImportOptions{Domain: "airline"}, func(l []byte) error {
		lines = append(lines, l)
		return nil
	}); err != nil {
		return nil, err
	}
	if err := sink.Write(ctx, lines); err != nil {
		return nil, err
	}
	if err := sink.Close(); err != nil {
		return nil, err
	}
	src, err := replay.OpenSource(ctx, uri)
	if err != nil {
		return nil, err
	}
	return replay.Read(ctx, src)
}

// mixedTasks are the ids of the tasks whose runs both succeeded and failed, counted
// straight from the buffer.
func mixedTasks(b *replay.Buffer) map[string]bool {
	ok, fail := map[string]bool{}, map[string]bool{}
	for _, ep := range b.Episodes {
		if ep.Reward == nil {
			continue
		}
		if *ep.Reward >= 1 {
			ok[ep.TaskID] = true
		} else {
			fail[ep.TaskID] = true
		}
	}
	m := map[string]bool{}
	for id := range ok {
		if fail[id] {
			m[id] = true
		}
	}
	return m
}

// A scripted reflection model, the same for both APIs: it lists the files, reads two
// lines of run_1.md from line 3 (its reward and outcome), greps every file for the
// reward lines, and answers with guidance that quotes the task it was given and the
// lines it read.
type turnView struct {
	turn    int               // assistant turns so far
	task    string            // the task, from the first user message
	results []string          // the tool results of the last turn
	byCall  map[string]string // every tool result so far, by call id
}

type scriptStep struct {
	text  string
	calls []testkit.ToolCall
}

func exploreScript(v turnView) scriptStep {
	switch v.turn {
	case 0:
		return scriptStep{calls: []testkit.ToolCall{{ID: "call_list", Name: "list_files", Arguments: `{}`}}}
	case 1:
		return scriptStep{text: "Reading the first run.", calls: []testkit.ToolCall{{ID: "call_read", Name: "read_file", Arguments: `{"path":"run_1.md","offset":3,"limit":2}`}}}
	case 2:
		return scriptStep{calls: []testkit.ToolCall{{ID: "call_grep", Name: "grep", Arguments: `{"pattern":"^reward:","path":"."}`}}}
	}
	return scriptStep{text: "<think>the runs differ at the reward line</think>\nHere it is.\n<guidance>\nTask: " + v.task + "\nRead:\n" + v.byCall["call_read"] + "\n</guidance>"}
}

// taskOf takes the task out of the default user prompt.
func taskOf(firstUser string) string {
	_, rest, _ := strings.Cut(firstUser, "The task:\n\n")
	task, _, _ := strings.Cut(rest, "\n\nThe sandbox holds")
	return task
}

// openAIView reads a chat completions request.
func openAIView(body gjson.Result) turnView {
	v := turnView{byCall: map[string]string{}}
	msgs := body.Get("messages").Array()
	for _, m := range msgs {
		if m.Get("role").String() == "tool" {
			v.byCall[m.Get("tool_call_id").String()] = m.Get("content").String()
		}
		if m.Get("role").String() == "assistant" {
			v.turn++
		}
		if m.Get("role").String() == "user" && v.task == "" {
			v.task = taskOf(m.Get("content").String())
		}
	}
	for i := len(msgs) - 1; i >= 0 && msgs[i].Get("role").String() != "assistant"; i-- {
		if msgs[i].Get("role").String() == "tool" {
			v.results = append([]string{msgs[i].Get("content").String()}, v.results...)
		}
	}
	return v
}

// bedrockView reads a Converse request.
func bedrockView(body gjson.Result) turnView {
	v := turnView{byCall: map[string]string{}}
	msgs := body.Get("messages").Array()
	for _, m := range msgs {
		if m.Get("role").String() == "assistant" {
			v.turn++
		}
		m.Get("content").ForEach(func(_, blk gjson.Result) bool {
			if r := blk.Get("toolResult"); r.Exists() {
				v.byCall[r.Get("toolUseId").String()] = r.Get("content.0.text").String()
			}
			return true
		})
	}
	if len(msgs) > 0 {
		v.task = taskOf(msgs[0].Get("content.0.text").String())
		msgs[len(msgs)-1].Get("content").ForEach(func(_, blk gjson.Result) bool {
			if r := blk.Get("toolResult"); r.Exists() {
				v.results = append(v.results, r.Get("content.0.text").String())
			}
			return true
		})
	}
	return v
}

func openAIScript(script func(turnView) scriptStep) func(gjson.Result) testkit.Reply {
	return func(body gjson.Result) testkit.Reply {
		s := script(openAIView(body))
		return testkit.Reply{Content: s.text, ToolCalls: s.calls}
	}
}

func bedrockScript(script func(turnView) scriptStep) func(kind, model string, body gjson.Result) testkit.BedrockReply {
	return func(kind, model string, body gjson.Result) testkit.BedrockReply {
		s := script(bedrockView(body))
		return testkit.BedrockReply{Content: s.text, ToolCalls: s.calls}
	}
}

// readRecords reads an output file, failing on any line that is not a record.
func readRecords(t *testing.T, path string) []Record {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []Record
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %d is not a record: %v: %q", i+1, err, line)
		}
		out = append(out, r)
	}
	return out
}

// checkCoverage: one record per job, no duplicate, no gap, each with its job's task
// text, episodes and rewards.
func checkCoverage(t *testing.T, recs []Record, jobs []*Job) {
	t.Helper()
	byKey := map[string]*Job{}
	for _, j := range jobs {
		byKey[j.Key] = j
	}
	seen := map[string]bool{}
	for _, r := range recs {
		k := r.Key()
		if seen[k] {
			t.Errorf("duplicate record for %s %v", r.TaskID, r.SourceEpisodes)
		}
		seen[k] = true
		j := byKey[k]
		if j == nil {
			t.Errorf("record for no job: %s %v", r.TaskID, r.SourceEpisodes)
			continue
		}
		if r.TaskDescription != j.Task || r.TaskID != j.TaskID {
			t.Errorf("record %s: task %q, want %q", r.TaskID, r.TaskDescription, j.Task)
		}
		if fmt.Sprint(r.SourceEpisodes) != fmt.Sprint(j.Episodes()) || fmt.Sprint(r.Rewards) != fmt.Sprint(j.Rewards()) {
			t.Errorf("record %s: episodes %v rewards %v, want %v %v", r.TaskID, r.SourceEpisodes, r.Rewards, j.Episodes(), j.Rewards())
		}
	}
	for _, j := range jobs {
		if !seen[j.Key] {
			t.Errorf("no record for job %s %v", j.TaskID, j.Episodes())
		}
	}
	if len(recs) != len(jobs) {
		t.Errorf("%d records for %d jobs", len(recs), len(jobs))
	}
}
