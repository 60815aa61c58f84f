package trainer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/openai/openai-go/v3"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
)

const (
	fakeAK     = "AKIDREFLECTFAKE"
	fakeSK     = "reflect/fake+secret"
	claudeID   = "anthropic.claude-3-5-sonnet-20241022-v2:0"
	openAIName = "openai/reflector-1"
)

func newOpenAIModel(t *testing.T, up *testkit.Upstream) Model {
	t.Helper()
	m, err := NewModel(context.Background(), openAIName, ModelOptions{BaseURL: up.URL + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newBedrockModel(t *testing.T, br *testkit.Bedrock) Model {
	t.Helper()
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	m, err := NewModel(context.Background(), "bedrock/"+claudeID, ModelOptions{
		BaseURL: br.URL, Region: "us-east-1",
		AWSCredentials: credentials.NewStaticCredentialsProvider(fakeAK, fakeSK, ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// testOptions: fast retries, a log kept for the test, sandboxes in a temp dir.
func testOptions(t *testing.T, m Model, name string) (Options, *bytes.Buffer) {
	var log bytes.Buffer
	return Options{
		Model: m, ModelName: name, Out: filepath.Join(t.TempDir(), "guidance.jsonl"),
		Concurrency: 4, WorkDir: t.TempDir(),
		Retry:  RetryPolicy{Base: time.Millisecond, Max: time.Second, Timeout: 30 * time.Second},
		Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &log}, nil)),
	}, &log
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// checkExplored: the guidance quotes the task and the two lines read from run_1.md
// at offset 3 (its reward and outcome), which only a real loop over this job's
// sandbox can produce.
func checkExplored(t *testing.T, recs []Record, model string) {
	t.Helper()
	version := DefaultPrompts().Version()
	for _, r := range recs {
		wantRead := fmt.Sprintf("     3  reward: %s\n     4  outcome: ", formatReward(r.Rewards[0]))
		if !strings.HasPrefix(r.Guidance, "Task: "+strings.TrimSpace(r.TaskDescription)+"\nRead:\nrun_1.md, lines 3-4 of ") || !strings.Contains(r.Guidance, wantRead) {
			t.Fatalf("guidance of %s does not quote its task and run_1.md lines 3-4:\n%s", r.TaskID, r.Guidance)
		}
		if strings.Contains(r.Guidance, "<think>") || strings.Contains(r.Guidance, "Here it is") || strings.Contains(r.Guidance, "guidance>") {
			t.Fatalf("guidance keeps what is outside the tags: %q", r.Guidance)
		}
		if r.Model != model || r.PromptVersion != version || r.Tokens.Input <= 0 || r.Tokens.Output != 4*7 {
			t.Fatalf("record %s: model %q version %q tokens %+v", r.TaskID, r.Model, r.PromptVersion, r.Tokens)
		}
	}
}

func TestReflectOpenAIAirline(t *testing.T) {
	b := airlineBuffer(t)
	plan := Sample(b.Tasks(), SampleOptions{})
	up := testkit.NewUpstream()
	defer up.Close()
	up.Reply = openAIScript(exploreScript)
	o, log := testOptions(t, newOpenAIModel(t, up), openAIName)
	var progress bytes.Buffer
	o.Progress = NewProgress(&syncWriter{w: &progress}, ProgressLines)
	s, err := Reflect(context.Background(), plan.Jobs, o)
	if err != nil {
		t.Fatal(err)
	}
	if s.Jobs != 50 || s.Done != 50 || s.Failed != 0 || s.Resumed != 0 || s.Calls != 200 || s.Retries != 0 {
		t.Fatalf("stats %+v\n%s", s, log)
	}
	recs := readRecords(t, o.Out)
	checkCoverage(t, recs, plan.Jobs)
	checkExplored(t, recs, openAIName)

	// What the model was sent: the system prompt, the task, the tools; the listing,
	// the read from an offset and the grep over every file.
	reqs := up.Requests()
	if len(reqs) != 200 {
		t.Fatalf("%d model calls", len(reqs))
	}
	var final gjson.Result
	for _, r := range reqs {
		body := gjson.ParseBytes(r.Body)
		if body.Get("model").String() != "reflector-1" || body.Get("tools.#").Int() != 3 || body.Get("messages.0.role").String() != "system" {
			t.Fatalf("request: %s", r.Body)
		}
		if body.Get("messages.#").Int() == 8 {
			final = body
			break
		}
	}
	msgs := final.Get("messages").Array()
	if len(msgs) != 8 {
		t.Fatal("no request of the last turn")
	}
	list, read, grep := msgs[3].Get("content").String(), msgs[5].Get("content").String(), msgs[7].Get("content").String()
	if !strings.HasPrefix(list, "4 files:\ntask.md  ") || !strings.Contains(list, "\nrun_3.md  ") {
		t.Fatalf("list_files result: %q", list)
	}
	if msgs[5].Get("tool_call_id").String() != "call_read" || !strings.HasPrefix(read, "run_1.md, lines 3-4 of ") || !strings.Contains(read, "more lines: read_file with offset 5") {
		t.Fatalf("read_file result: %q", read)
	}
	for _, f := range []string{"run_1.md:3: reward: ", "run_2.md:3: reward: ", "run_3.md:3: reward: "} {
		if !strings.Contains(grep, f) {
			t.Fatalf("grep result lacks %q: %q", f, grep)
		}
	}
	if progress.Len() == 0 || !strings.Contains(progress.String(), "50/50 100%") {
		t.Fatalf("progress lines:\n%s", progress.String())
	}
	// Sandboxes are gone.
	if left, _ := os.ReadDir(o.WorkDir); len(left) != 0 {
		t.Fatalf("%d sandboxes left behind", len(left))
	}

	// A rerun finds everything done and calls no model.
	s, err = Reflect(context.Background(), plan.Jobs, o)
	if err != nil || s.Resumed != 50 || s.Done != 0 || len(up.Requests()) != 200 {
		t.Fatalf("rerun: %+v %v, %d calls", s, err, len(up.Requests()))
	}
}

func TestReflectBedrockAirline(t *testing.T) {
	b := airlineBuffer(t)
	plan := Sample(b.Tasks(), SampleOptions{})
	jobs := plan.Jobs[:30] // the 26 mixed tasks and a few more
	br := testkit.NewBedrock(fakeAK, fakeSK, "us-east-1")
	defer br.Close()
	br.ReplyFn = bedrockScript(exploreScript)
	o, log := testOptions(t, newBedrockModel(t, br), "bedrock/"+claudeID)
	s, err := Reflect(context.Background(), jobs, o)
	if err != nil || s.Done != 30 || s.Failed != 0 {
		t.Fatalf("stats %+v %v\n%s", s, err, log)
	}
	recs := readRecords(t, o.Out)
	checkCoverage(t, recs, jobs)
	checkExplored(t, recs, "bedrock/"+claudeID)
	for _, r := range br.Requests() {
		if r.AuthError != "" || r.Kind != testkit.BedrockConverse || r.Model != claudeID {
			t.Fatalf("Bedrock saw %s %q, auth error %q", r.Kind, r.Model, r.AuthError)
		}
	}
	// The last turn of a job: system prompt, tool config, tool results in user turns.
	var body gjson.Result
	for _, r := range br.Requests() {
		if b := gjson.ParseBytes(r.Body); b.Get("messages.#").Int() == 7 {
			body = b
			break
		}
	}
	if !strings.Contains(body.Get("system.0.text").String(), "<guidance>") || body.Get("toolConfig.tools.#").Int() != 3 {
		t.Fatalf("converse request: %s", body.Raw)
	}
	if body.Get("messages.3.content.1.toolUse.name").String() != "read_file" || body.Get("messages.3.content.1.toolUse.input.offset").Int() != 3 {
		t.Fatalf("assistant tool use sent back: %s", body.Get("messages.3").Raw)
	}
	if !strings.HasPrefix(body.Get("messages.4.content.0.toolResult.content.0.text").String(), "run_1.md, lines 3-4 of ") {
		t.Fatalf("tool result: %s", body.Get("messages.4").Raw)
	}
}

// escapeScript tries to leave the sandbox in every way in one turn, then answers.
func escapeScript(v turnView) scriptStep {
	if v.turn == 0 {
		return scriptStep{calls: []testkit.ToolCall{
			{ID: "c1", Name: "read_file", Arguments: `{"path":"../../etc/passwd"}`},
			{ID: "c2", Name: "read_file", Arguments: `{"path":"/etc/passwd"}`},
			{ID: "c3", Name: "read_file", Arguments: `{"path":"evil.md"}`},
			{ID: "c4", Name: "grep", Arguments: `{"pattern":"SECRET|root:","path":"linkdir"}`},
			{ID: "c5", Name: "read_file", Arguments: `{"path":"../secret.txt"}`},
			{ID: "c6", Name: "grep", Arguments: `{"pattern":"SECRET|root:","path":"."}`},
		}}
	}
	return scriptStep{text: "<guidance>saw: " + strings.Join(v.results, " | ") + "</guidance>"}
}

func TestReflectSandboxEscapesRefused(t *testing.T) {
	job := miniJob()
	for _, api := range []string{"openai", "bedrock"} {
		t.Run(api, func(t *testing.T) {
			var m Model
			var results func() []string
			switch api {
			case "openai":
				up := testkit.NewUpstream()
				defer up.Close()
				up.Reply = openAIScript(escapeScript)
				m = newOpenAIModel(t, up)
				results = func() []string {
					return openAIView(gjson.ParseBytes(up.Last().Body)).results
				}
			default:
				br := testkit.NewBedrock(fakeAK, fakeSK, "us-east-1")
				defer br.Close()
				br.ReplyFn = bedrockScript(escapeScript)
				m = newBedrockModel(t, br)
				results = func() []string {
					return bedrockView(gjson.ParseBytes(br.Last().Body)).results
				}
			}
			o, log := testOptions(t, m, api+"/x")
			o.prepareSandbox = func(dir string) error { plantEscapes(t, dir); return nil }
			s, err := Reflect(context.Background(), []*Job{job}, o)
			if err != nil || s.Done != 1 {
				t.Fatalf("%+v %v\n%s", s, err, log)
			}
			got := results()
			if len(got) != 6 {
				t.Fatalf("the model saw %d tool results: %q", len(got), got)
			}
			want := []string{`".." is refused`, "absolute paths are refused", "evil.md is a symbolic link", "linkdir is a symbolic link", `".." is refused`, "no line matches"}
			for i, r := range got {
				if !strings.Contains(r, want[i]) || (i < 5 && !strings.HasPrefix(r, "error: ")) {
					t.Errorf("result %d: %q, want an error with %q", i+1, r, want[i])
				}
				if strings.Contains(r, secret) || strings.Contains(r, "root:x") {
					t.Errorf("result %d leaked: %q", i+1, r)
				}
			}
			if g := readRecords(t, o.Out)[0].Guidance; strings.Contains(g, secret) {
				t.Fatalf("the secret reached the output: %q", g)
			}
		})
	}
}

func TestReflectKilledMidwayResumes(t *testing.T) {
	b := airlineBuffer(t)
	plan := Sample(b.Tasks(), SampleOptions{Subsets: 2})
	up := testkit.NewUpstream()
	defer up.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var answers atomic.Int64
	script := openAIScript(exploreScript)
	up.Reply = func(body gjson.Result) testkit.Reply {
		rep := script(body)
		if len(rep.ToolCalls) == 0 && answers.Add(1) == 12 {
			cancel() // the run is killed while jobs are in flight
		}
		return rep
	}
	o, _ := testOptions(t, newOpenAIModel(t, up), openAIName)
	s, err := Reflect(ctx, plan.Jobs, o)
	if err == nil || s.Done == 0 || s.Done >= len(plan.Jobs) || s.Failed != 0 {
		t.Fatalf("interrupted run: %+v, %v", s, err)
	}
	first := readRecords(t, o.Out)
	if len(first) != s.Done {
		t.Fatalf("%d records after the interruption, %d written", len(first), s.Done)
	}
	// A kill mid-write leaves a torn last line.
	f, err := os.OpenFile(o.Out, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"task_id":"tau-airline-1","task_description":"half a li`)
	f.Close()

	s2, err := Reflect(context.Background(), plan.Jobs, o)
	if err != nil || s2.Resumed != s.Done || s2.Done != len(plan.Jobs)-s.Done || s2.Failed != 0 {
		t.Fatalf("rerun: %+v, %v (first run wrote %d)", s2, err, s.Done)
	}
	checkCoverage(t, readRecords(t, o.Out), plan.Jobs)
}

func TestReflectRetries429(t *testing.T) {
	job := miniJob()
	up := testkit.NewUpstream()
	defer up.Close()
	var calls atomic.Int64
	script := openAIScript(exploreScript)
	up.Reply = func(body gjson.Result) testkit.Reply {
		if calls.Add(1) <= 2 {
			return testkit.Reply{Status: 429, ErrorMsg: "Rate limit reached", Header: http.Header{"Retry-After-Ms": {"40"}}}
		}
		return script(body)
	}
	o, log := testOptions(t, newOpenAIModel(t, up), openAIName)
	s, err := Reflect(context.Background(), []*Job{job}, o)
	if err != nil || s.Done != 1 || s.Failed != 0 || s.Retries != 2 || s.Calls != 4 {
		t.Fatalf("%+v %v\n%s", s, err, log)
	}
	// The waits came from the server's retry-after (that they are slept is
	// TestChatWithRetrySleepsRetryAfter's, on synctest's clock).
	if n := strings.Count(log.String(), "wait=40ms"); n != 2 {
		t.Fatalf("%d retries waited the server's 40ms, want 2:\n%s", n, log)
	}
	if !strings.Contains(log.String(), "retrying") || strings.Contains(log.String(), "level=ERROR") {
		t.Fatalf("log:\n%s", log)
	}
	if len(readRecords(t, o.Out)) != 1 {
		t.Fatal("no record")
	}

	// Bedrock throttling, without retry-after: the base backoff.
	br := testkit.NewBedrock(fakeAK, fakeSK, "us-east-1")
	defer br.Close()
	var bcalls atomic.Int64
	bscript := bedrockScript(exploreScript)
	br.ReplyFn = func(kind, model string, body gjson.Result) testkit.BedrockReply {
		if bcalls.Add(1) <= 2 {
			return testkit.BedrockReply{Status: 429, ErrorMsg: "Too many requests, please wait before trying again."}
		}
		return bscript(kind, model, body)
	}
	o, log = testOptions(t, newBedrockModel(t, br), "bedrock/"+claudeID)
	if s, err := Reflect(context.Background(), []*Job{job}, o); err != nil || s.Done != 1 || s.Retries != 2 {
		t.Fatalf("bedrock: %+v %v\n%s", s, err, log)
	}
}

func TestReflectFailedJobIsNotFatal(t *testing.T) {
	jobs := []*Job{miniJob(), miniJob(), miniJob()}
	jobs[1].Task, jobs[1].TaskID = "A task the model cannot take.", "t2"
	jobs[1].Key = JobKey("t2", jobs[1].Episodes())
	jobs[2].Task, jobs[2].TaskID = "A task the model errs on.", "t3"
	jobs[2].Key = JobKey("t3", jobs[2].Episodes())
	up := testkit.NewUpstream()
	defer up.Close()
	script := openAIScript(exploreScript)
	var calls atomic.Int64
	up.Reply = func(body gjson.Result) testkit.Reply {
		calls.Add(1)
		switch task := openAIView(body).task; {
		case strings.Contains(task, "cannot"):
			return testkit.Reply{Status: 400, ErrorMsg: "context length exceeded"} // not retried
		case strings.Contains(task, "errs"):
			return testkit.Reply{Status: 503, ErrorMsg: "overloaded"} // retried, then failed
		}
		return script(body)
	}
	o, log := testOptions(t, newOpenAIModel(t, up), openAIName)
	o.Retry.Retries = 2
	s, err := Reflect(context.Background(), jobs, o)
	if err != nil || s.Done != 1 || s.Failed != 2 || s.Retries != 2 {
		t.Fatalf("%+v %v\n%s", s, err, log)
	}
	if calls.Load() != 4+1+3 {
		t.Fatalf("%d model calls, want 4 (the good job) + 1 (400) + 3 (503 and 2 retries)", calls.Load())
	}
	if n := strings.Count(log.String(), "reflection job failed"); n != 2 || !strings.Contains(log.String(), "after 2 retries") {
		t.Fatalf("log:\n%s", log)
	}
	recs := readRecords(t, o.Out)
	if len(recs) != 1 || recs[0].TaskID != "t1" {
		t.Fatalf("records %+v", recs)
	}
}

func TestReflectAbortsWhenEveryJobFails(t *testing.T) {
	b := airlineBuffer(t)
	jobs := Sample(b.Tasks(), SampleOptions{}).Jobs
	up := testkit.NewUpstream()
	defer up.Close()
	up.Reply = func(gjson.Result) testkit.Reply {
		return testkit.Reply{Status: 404, ErrorMsg: "The model `reflector-1` does not exist"}
	}
	o, log := testOptions(t, newOpenAIModel(t, up), openAIName)
	o.Concurrency = 2
	s, err := Reflect(context.Background(), jobs, o)
	if !errors.Is(err, ErrAborted) || s.Failed < 5 || s.Failed > 7 || s.Done != 0 {
		t.Fatalf("%+v %v\n%s", s, err, log)
	}
	if n := len(up.Requests()); n > 7 {
		t.Fatalf("%d model calls after the run should have stopped", n)
	}
	if !strings.Contains(err.Error(), "the first 5 jobs all failed") || !strings.Contains(err.Error(), "404") {
		t.Fatalf("error: %v", err)
	}
}

func TestReflectMaxSteps(t *testing.T) {
	job := miniJob()
	up := testkit.NewUpstream()
	defer up.Close()
	var noTools atomic.Int64
	up.Reply = func(body gjson.Result) testkit.Reply {
		if body.Get("tool_choice").String() == "none" {
			noTools.Add(1)
			msgs := body.Get("messages").Array()
			if last := msgs[len(msgs)-1]; last.Get("role").String() != "user" || !strings.Contains(last.Get("content").String(), "Stop exploring now") {
				return testkit.Reply{Status: 400, ErrorMsg: "no final prompt"}
			}
			return testkit.Reply{Content: "<guidance>Check the fare before changing the booking.</guidance>"}
		}
		return testkit.Reply{ToolCalls: []testkit.ToolCall{{ID: "c", Name: "list_files", Arguments: "{}"}}} // explores forever
	}
	o, log := testOptions(t, newOpenAIModel(t, up), openAIName)
	o.MaxSteps = 3
	s, err := Reflect(context.Background(), []*Job{job}, o)
	if err != nil || s.Done != 1 || s.Calls != 3 || noTools.Load() != 1 {
		t.Fatalf("%+v %v, %d final turns\n%s", s, err, noTools.Load(), log)
	}
	if g := readRecords(t, o.Out)[0].Guidance; g != "Check the fare before changing the booking." {
		t.Fatalf("guidance %q", g)
	}

	// A model that never answers fails the job at --max-steps.
	up.Reply = func(gjson.Result) testkit.Reply {
		return testkit.Reply{ToolCalls: []testkit.ToolCall{{ID: "c", Name: "list_files", Arguments: "{}"}}}
	}
	o, log = testOptions(t, newOpenAIModel(t, up), openAIName)
	o.MaxSteps = 2
	if s, err := Reflect(context.Background(), []*Job{job}, o); err != nil || s.Failed != 1 || !strings.Contains(log.String(), "no guidance within 2 steps") {
		t.Fatalf("%+v %v\n%s", s, err, log)
	}
}

func TestOutputTornLineAndLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	good := `{"task_id":"t1","task_description":"x","guidance":"g","source_episodes":["b","a"],"rewards":[1,0],"model":"m","prompt_version":"v","tokens":{"input":1,"output":2}}` + "\n"
	if err := os.WriteFile(path, []byte(good+"not json\n"+`{"task_id":"t2","gui`), 0o644); err != nil {
		t.Fatal(err)
	}
	done, err := DoneKeys(path)
	if err != nil || len(done) != 1 || !done[JobKey("t1", []string{"a", "b"})] {
		t.Fatalf("done keys %v %v", done, err)
	}
	out, scan, err := openOutput(path)
	if err != nil {
		t.Fatal(err)
	}
	if scan.lines != 1 || scan.bad != 1 || scan.torn == 0 {
		t.Fatalf("scan %+v", scan)
	}
	if _, _, err := openOutput(path); err == nil || !strings.Contains(err.Error(), "in use by another run") {
		t.Fatalf("second writer: %v", err)
	}
	if err := out.Append(&Record{TaskID: "t3", Guidance: "<b>&</b>", SourceEpisodes: []string{"c"}}); err != nil {
		t.Fatal(err)
	}
	out.Close()
	data, _ := os.ReadFile(path)
	want := good + "not json\n" + `{"task_id":"t3","task_description":"","guidance":"<b>&</b>","source_episodes":["c"],"rewards":null,"model":"","prompt_version":"","tokens":{"input":0,"output":0}}` + "\n"
	if string(data) != want {
		t.Fatalf("output:\n%s\nwant\n%s", data, want)
	}
	if done, _ := DoneKeys(filepath.Join(t.TempDir(), "none.jsonl")); len(done) != 0 {
		t.Fatal("a missing output holds nothing")
	}
}

func TestPrompts(t *testing.T) {
	p := DefaultPrompts()
	all := strings.ToLower(p.System + p.User + p.Final)
	for _, word := range []string{"airline", "appworld", "tau", "flight", "reservation", "benchmark"} {
		if strings.Contains(all, word) {
			t.Errorf("the default prompts name %q: they must stay benchmark-agnostic", word)
		}
	}
	v := p.Version()
	if len(v) != 12 || v != DefaultPrompts().Version() {
		t.Fatalf("version %q", v)
	}
	q := p
	q.System += "\nBe terse."
	if q.Version() == v {
		t.Fatal("an edited prompt keeps the version")
	}
	u := p.userMessage(miniJob(), 7)
	for _, frag := range []string{"Change booking ABC123 to Friday.", "- run_1.md: reward 1 (success), 5 messages", "- run_2.md: reward 0 (failure), 3 messages", "at most 7 turns"} {
		if !strings.Contains(u, frag) {
			t.Errorf("user message lacks %q:\n%s", frag, u)
		}
	}
	if strings.Contains(u, "{{") {
		t.Errorf("placeholder left: %s", u)
	}
	path := filepath.Join(t.TempDir(), "user.md")
	os.WriteFile(path, []byte("Task: {{task}}\n"), 0o644)
	if s, err := ReadPromptFile(path); err != nil || s != "Task: {{task}}\n" {
		t.Fatal(s, err)
	}
	os.WriteFile(path, []byte("  \n"), 0o644)
	if _, err := ReadPromptFile(path); err == nil {
		t.Fatal("an empty prompt file was accepted")
	}
	for in, want := range map[string]string{
		"<think>hmm</think>\n<guidance>\nDo X.\n</guidance>\nbye": "Do X.",
		"Do Y.":                      "Do Y.",
		"reasoning</think>Do Z.":     "Do Z.",
		"<guidance>unclosed":         "unclosed",
		"<think>never closed":        "",
		"a <guidance>b</guidance> c": "b",
	} {
		if got := guidanceText(in); got != want {
			t.Errorf("guidanceText(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRetryAfterAndBackoff(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for h, want := range map[string]time.Duration{
		"Retry-After-Ms: 250":                        250 * time.Millisecond,
		"Retry-After: 3":                             3 * time.Second,
		"Retry-After: Wed, 01 Jan 2025 00:00:05 GMT": 5 * time.Second,
	} {
		k, v, _ := strings.Cut(h, ": ")
		got, ok := retryAfter(http.Header{k: {v}}, now)
		if !ok || got != want {
			t.Errorf("%s: %s %v", h, got, ok)
		}
	}
	if _, ok := retryAfter(http.Header{"Retry-After": {"soon"}}, now); ok {
		t.Error("a bad Retry-After was read")
	}
	p := RetryPolicy{Base: 100 * time.Millisecond, Max: time.Second}
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 9: time.Second} {
		if got := p.backoff(n, fmt.Errorf("x"), func() float64 { return 1 }); got != want {
			t.Errorf("backoff(%d) = %s, want %s", n, got, want)
		}
	}
	if got := p.backoff(1, fmt.Errorf("x"), func() float64 { return 0 }); got != 50*time.Millisecond {
		t.Errorf("jitter floor %s", got)
	}
}

// scriptedModel fails its first calls with errs, then answers.
type scriptedModel struct {
	errs  []error
	calls int
}

func (m *scriptedModel) Chat(context.Context, *Request) (*Reply, error) {
	m.calls++
	if m.calls <= len(m.errs) {
		return nil, m.errs[m.calls-1]
	}
	return &Reply{}, nil
}

// TestChatWithRetrySleepsRetryAfter: each retry waits what the server's
// retry-after asked (capped at Max), measured on synctest's clock.
func TestChatWithRetrySleepsRetryAfter(t *testing.T) {
	tooMany := func(ms string) error {
		return &openai.Error{StatusCode: 429, Response: &http.Response{StatusCode: 429, Header: http.Header{"Retry-After-Ms": {ms}}}}
	}
	synctest.Test(t, func(t *testing.T) {
		m := &scriptedModel{errs: []error{tooMany("40"), tooMany("40"), tooMany("60000")}}
		var waits []time.Duration
		start := time.Now()
		_, err := chatWithRetry(context.Background(), m, &Request{}, RetryPolicy{Retries: 5, Base: time.Millisecond, Max: time.Second, Timeout: time.Minute},
			func(_ int, wait time.Duration, _ error) { waits = append(waits, wait) })
		if err != nil || m.calls != 4 {
			t.Fatalf("err %v after %d calls, want an answer on the 4th", err, m.calls)
		}
		if want := []time.Duration{40 * time.Millisecond, 40 * time.Millisecond, time.Second}; !slices.Equal(waits, want) {
			t.Errorf("waits %v, want %v", waits, want)
		}
		if d := time.Since(start); d != 40*time.Millisecond+40*time.Millisecond+time.Second {
			t.Errorf("slept %v, want the three waits (1.08s)", d)
		}
	})
}

func TestEstimate(t *testing.T) {
	files, input := Estimate(miniJob(), DefaultPrompts(), 30, 0)
	if files <= 0 || input <= files {
		t.Fatalf("files %d input %d", files, input)
	}
}
