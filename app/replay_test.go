package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/replay/lake"
)

// tauRun is one recorded tau-bench run.
type tauRun struct {
	TaskID int               `json:"task_id"`
	Trial  int               `json:"trial"`
	Reward float64           `json:"reward"`
	Traj   []json.RawMessage `json:"traj"`
}

const tauPath = "../../shared/data/tau-bench/gpt-4o-airline.json"

// episodeOf is the episode of b with this id, or nil.
func episodeOf(b *replay.Buffer, id string) *replay.Episode {
	if i := slices.IndexFunc(b.Episodes, func(ep *replay.Episode) bool { return ep.ID == id }); i >= 0 {
		return b.Episodes[i]
	}
	return nil
}

func loadTau(t testing.TB) []tauRun {
	t.Helper()
	raw, err := os.ReadFile(tauPath)
	if err != nil {
		t.Skipf("tau-bench data not found at %s (%v): the shared data set sits beside the repo", tauPath, err)
	}
	var runs []tauRun
	if err := json.Unmarshal(raw, &runs); err != nil {
		t.Fatal(err)
	}
	return runs
}

// normalise is the test's own reading of an OpenAI chat message, independent of the
// proxy's adapter.
func normalise(t testing.TB, raw json.RawMessage) protocol.Message {
	var m struct {
		Role       string  `json:"role"`
		Content    *string `json:"content"`
		ToolCallID string  `json:"tool_call_id"`
		Name       string  `json:"name"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	out := protocol.Message{Role: m.Role, ToolCallID: m.ToolCallID, Name: m.Name}
	if m.Content != nil {
		out.Content = *m.Content
	}
	for _, c := range m.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, protocol.ToolCall{ID: c.ID, Type: c.Type, Name: c.Function.Name, Arguments: c.Function.Arguments})
	}
	return out
}

// finalAnswer is what the scripted upstream says to a call that ends with the
// trajectory's trailing user/tool messages (the recorded agent made no such call).
const finalAnswer = "Thank you, the conversation is complete."

// tauUpstream answers each call with the assistant message the real agent produced at
// that point of the named run.
func tauUpstream(up *testkit.Upstream, runs []tauRun) {
	up.ReplyFor = func(h http.Header, body gjson.Result) testkit.Reply {
		i, _ := strconv.Atoi(h.Get("X-Test-Run"))
		n := len(body.Get("messages").Array())
		traj := runs[i].Traj
		if n >= len(traj) {
			return testkit.Reply{Content: finalAnswer}
		}
		m := gjson.ParseBytes(traj[n])
		rep := testkit.Reply{Content: m.Get("content").String()}
		for _, c := range m.Get("tool_calls").Array() {
			rep.ToolCalls = append(rep.ToolCalls, testkit.ToolCall{ID: c.Get("id").String(), Name: c.Get("function.name").String(), Arguments: c.Get("function.arguments").String()})
		}
		return rep
	}
}

// playRun plays the agent of run i through camproxy: each call sends the conversation
// up to the next recorded assistant message, exactly as recorded. It returns the
// episode camproxy put the run in and, if the run changed episode, how many messages
// it had sent when it did.
func playRun(t *testing.T, base string, i int, run tauRun) (string, int) {
	var episode string
	moved := 0
	call := func(msgs []json.RawMessage) {
		body := []byte(`{"model":"gpt-4o","temperature":0.0,"messages":[`)
		for k, m := range msgs {
			if k > 0 {
				body = append(body, ',')
			}
			body = append(body, m...)
		}
		body = append(body, "]}"...)
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-client-key")
		req.Header.Set("X-Test-Run", strconv.Itoa(i))
		// The harness knows which task it runs; the first user message (the simulated
		// user's opening) differs between runs of one task.
		req.Header.Set("X-CAM-Task-Id", fmt.Sprintf("tau-airline-%d", run.TaskID))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("run %d: status %d %s", i, resp.StatusCode, out)
		}
		ep := resp.Header.Get("X-CAM-Episode-Id")
		if episode != "" && ep != episode {
			moved = len(msgs)
		}
		episode = ep
	}
	for k, m := range run.Traj {
		if gjson.GetBytes(m, "role").String() == "assistant" {
			call(run.Traj[:k])
		}
	}
	if gjson.GetBytes(run.Traj[len(run.Traj)-1], "role").String() != "assistant" {
		call(run.Traj)
	}
	return episode, moved
}

// samePrefix reports whether another run of the task sent the very same first n
// messages: only then may stitching, which sees nothing but the messages, hand a run
// the twin episode (whose recorded history is then byte for byte this run's).
func samePrefix(runs []tauRun, i, n int) bool {
	for j, r := range runs {
		if j == i || r.TaskID != runs[i].TaskID || len(r.Traj) < n {
			continue
		}
		same := true
		for k := range n {
			if !bytes.Equal(r.Traj[k], runs[i].Traj[k]) {
				same = false
				break
			}
		}
		if same {
			return true
		}
	}
	return false
}

func postFeedback(t *testing.T, admin, episode string, reward float64) {
	body := fmt.Sprintf(`{"episode_id":%q,"reward":%v,"success":%v,"metadata":{"source":"tau-bench"}}`, episode, reward, reward >= 1)
	resp, err := http.Post(admin+"/v1/feedback", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("feedback for %s: %d", episode, resp.StatusCode)
	}
}

// tauSample is the tasks of runs whose runs stitching could confuse, all runs of each:
// every task one of whose runs opens with the same messages as another run (of any
// task) beyond the system policy they all share, plus the task of the longest run.
// A run whose opening no other run shares is stitched by its first user message
// alone, the same code for each of them; the other 42 tasks of the set add nothing
// but time (under -race, most of the test's).
func tauSample(runs []tauRun) []tauRun {
	keep := map[int]bool{}
	longest := 0
	for i, r := range runs {
		if len(r.Traj) > len(runs[longest].Traj) {
			longest = i
		}
		for _, o := range runs[i+1:] {
			if n := sharedPrefix(r.Traj, o.Traj); n > 1 {
				keep[r.TaskID], keep[o.TaskID] = true, true
			}
		}
	}
	keep[runs[longest].TaskID] = true
	var out []tauRun
	for _, r := range runs {
		if keep[r.TaskID] {
			out = append(out, r)
		}
	}
	return out
}

// sharedPrefix is how many leading messages a and b have byte for byte in common.
func sharedPrefix(a, b []json.RawMessage) int {
	n := 0
	for n < len(a) && n < len(b) && bytes.Equal(a[n], b[n]) {
		n++
	}
	return n
}

// TestTauBenchThroughProxy replays real runs through camproxy without episode headers,
// the four runs of each task concurrently, posts their rewards, and reads the buffer
// back from a file, a Redis and an S3 sink: an episode per run equal to the original,
// four runs per task, the right rewards, the same export from every sink, compact
// storage, and no secret anywhere. The runs are tauSample's: every task whose runs
// share an opening (the twins stitching must keep apart, the case samePrefix
// allows) with successes, failures and runs ending on a tool or user message among
// them, and the longest conversation.
func TestTauBenchThroughProxy(t *testing.T) {
	all := loadTau(t)
	if len(all) != 200 {
		t.Fatalf("%d tau-bench runs, want 200", len(all))
	}
	runs := tauSample(all)
	t.Logf("tau-bench sample: %d of %d runs", len(runs), len(all))
	requireRedis(t)
	s3 := newS3(t, "AKIDTESTTESTTEST", "test-secret-key-never-stored")
	stream := fmt.Sprintf("camproxy:test:%d", time.Now().UnixNano())
	dir := t.TempDir()
	sinks := []string{
		"file://" + dir + "/replay",
		"redis://127.0.0.1:6379/0?stream=" + stream,
		"s3://replay/tau?region=us-east-1&endpoint=" + s3.URL,
	}
	e := newEnv(t, func(c *config.Config) {
		c.Replay.Sinks = sinks
		c.Replay.SpoolDir = dir + "/spool"
		c.Upstreams["openai"].APIKey = "sk-upstream-secret"
		ac := c.Augmenters["cam"]
		ac.APIKey = "sk-cam-secret"
		c.Augmenters["cam"] = ac
	})
	t.Cleanup(func() { requireRedis(t).Del(context.Background(), stream) })
	tauUpstream(e.up, runs)

	byTask := map[int][]int{}
	for i, r := range runs {
		byTask[r.TaskID] = append(byTask[r.TaskID], i)
	}
	episodes := make([]string, len(runs))
	sem := make(chan struct{}, 4) // four tasks at a time, each with its four runs interleaved
	var wg sync.WaitGroup
	for _, idx := range byTask {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var inner sync.WaitGroup
			for _, i := range idx {
				inner.Go(func() {
					var moved int
					episodes[i], moved = playRun(t, e.base, i, runs[i])
					if moved > 0 && !samePrefix(runs, i, moved-1) {
						t.Errorf("run %d changed episode at message %d although no other run shares its history", i, moved)
					}
				})
			}
			inner.Wait()
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	seen := map[string]bool{}
	for i, ep := range episodes {
		if ep == "" || seen[ep] {
			t.Fatalf("run %d: episode %q missing or shared", i, ep)
		}
		seen[ep] = true
		postFeedback(t, e.admin, ep, runs[i].Reward)
	}
	// No deadline: a hang meets go test's -timeout.
	ctx := context.Background()
	if err := e.app.Shutdown(ctx); err != nil { // flushes the recorder
		t.Fatal(err)
	}

	var exports [][]byte
	for _, uri := range sinks {
		src, err := replay.OpenSource(ctx, uri)
		if err != nil {
			t.Fatal(err)
		}
		buf, err := replay.Read(ctx, src)
		if err != nil {
			t.Fatalf("%s: %v", uri, err)
		}
		checkTauBuffer(t, uri, buf, runs, episodes)
		var out bytes.Buffer
		if err := lake.ExportJSONL(&out, buf); err != nil {
			t.Fatal(err)
		}
		exports = append(exports, out.Bytes())
		assertNoSecrets(t, uri, src)
	}
	for i := 1; i < len(exports); i++ {
		if !bytes.Equal(exports[0], exports[i]) {
			t.Fatalf("export from %s differs from %s", sinks[i], sinks[0])
		}
	}
	assertNoSecretsInDir(t, dir)
	reportStorage(t, dir+"/replay", runs)
}

func checkTauBuffer(t *testing.T, uri string, buf *replay.Buffer, runs []tauRun, episodes []string) {
	t.Helper()
	if len(buf.Episodes) != len(runs) {
		t.Fatalf("%s: %d episodes, want %d", uri, len(buf.Episodes), len(runs))
	}
	wantTasks := map[int]bool{}
	for _, r := range runs {
		wantTasks[r.TaskID] = true
	}
	tasks := buf.Tasks()
	if len(tasks) != len(wantTasks) {
		t.Fatalf("%s: %d tasks, want %d", uri, len(tasks), len(wantTasks))
	}
	for _, task := range tasks {
		if len(task.Episodes) != 4 {
			t.Fatalf("%s: task %s has %d runs, want 4", uri, task.ID, len(task.Episodes))
		}
	}
	successes, wantSuccesses := 0, 0
	for i, run := range runs {
		if run.Reward >= 1 {
			wantSuccesses++
		}
		ep := episodeOf(buf, episodes[i])
		if ep == nil {
			t.Fatalf("%s: episode of run %d missing", uri, i)
		}
		want := make([]protocol.Message, 0, len(run.Traj)+1)
		for _, m := range run.Traj {
			want = append(want, normalise(t, m))
		}
		if want[len(want)-1].Role != "assistant" {
			want = append(want, protocol.Message{Role: "assistant", Content: finalAnswer})
		}
		if len(ep.Messages) != len(want) {
			t.Fatalf("%s: run %d has %d messages, want %d", uri, i, len(ep.Messages), len(want))
		}
		for k := range want {
			if !sameMessage(ep.Messages[k], want[k]) {
				t.Fatalf("%s: run %d message %d differs:\n got %+v\nwant %+v", uri, i, k, ep.Messages[k], want[k])
			}
		}
		if ep.Reward == nil || *ep.Reward != run.Reward || ep.Success == nil || *ep.Success != (run.Reward >= 1) {
			t.Fatalf("%s: run %d reward %v, want %v", uri, i, ep.Reward, run.Reward)
		}
		if *ep.Success {
			successes++
		}
		if ep.Context == "" || ep.Arm != "cam" || !strings.Contains(ep.Context, "Guidance for:") {
			t.Fatalf("%s: run %d context %q arm %q", uri, i, ep.Context, ep.Arm)
		}
	}
	if successes != wantSuccesses {
		t.Fatalf("%s: %d successes, want %d", uri, successes, wantSuccesses)
	}
}

func sameMessage(a, b protocol.Message) bool {
	if a.Role != b.Role || a.Content != b.Content || a.ToolCallID != b.ToolCallID || a.Name != b.Name || len(a.ToolCalls) != len(b.ToolCalls) {
		return false
	}
	for i := range a.ToolCalls {
		x, y := a.ToolCalls[i], b.ToolCalls[i]
		if x.ID != y.ID || x.Name != y.Name || x.Arguments != y.Arguments {
			return false
		}
	}
	return true
}

var secrets = []string{"sk-client-key", "sk-upstream-secret", "sk-cam-secret", "test-secret-key-never-stored", "AKIDTESTTESTTEST", "Authorization", "Bearer"}

func assertNoSecrets(t *testing.T, uri string, src replay.Source) {
	t.Helper()
	err := src.Scan(context.Background(), func(line []byte) error {
		for _, s := range secrets {
			if bytes.Contains(line, []byte(s)) {
				return fmt.Errorf("%s holds %q: %s", uri, s, line)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func assertNoSecretsInDir(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := os.ReadFile(p)
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds %q", p, s)
			}
		}
		return nil
	})
}

// reportStorage prints and bounds what the file buffer costs against the trajectories
// themselves and against storing the full history at every step.
func reportStorage(t *testing.T, dir string, runs []tauRun) {
	t.Helper()
	var stored int64
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			info, _ := d.Info()
			stored += info.Size()
		}
		return err
	})
	var traj, naive int64
	for _, r := range runs {
		b, _ := json.Marshal(r.Traj)
		traj += int64(len(b))
		prefix := int64(0)
		for _, m := range r.Traj {
			prefix += int64(len(m)) + 1
			if gjson.GetBytes(m, "role").String() == "assistant" {
				naive += prefix
			}
		}
	}
	ratio := float64(stored) / float64(traj)
	t.Logf("replay storage: %d bytes for %d bytes of trajectories = %.2fx (full history per step would be %d bytes = %.1fx)",
		stored, traj, ratio, naive, float64(naive)/float64(traj))
	if ratio > 1.3 {
		t.Fatalf("stored %.2fx the trajectories' size, want at most 1.3x", ratio)
	}
}
