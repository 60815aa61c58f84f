package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/trainer"
)

// reflectorScript is a reflection model in three turns: it lists the sandbox, reads
// run_1.md from line 3, and answers with guidance quoting what it read.
func reflectorScript(turn int, read string) (string, []testkit.ToolCall) {
	switch turn {
	case 0:
		return "", []testkit.ToolCall{{ID: "l", Name: "list_files", Arguments: `{}`}}
	case 1:
		return "", []testkit.ToolCall{{ID: "r", Name: "read_file", Arguments: `{"path":"run_1.md","offset":3,"limit":1}`}}
	}
	return "<guidance>Start from what the first run shows: " + read + "</guidance>", nil
}

func scriptedOpenAI() *testkit.Upstream {
	up := testkit.NewUpstream()
	// Configure: requests may come from another process (the SIGKILL test).
	up.Configure(func(u *testkit.Upstream) { u.Reply = reflectorReply })
	return up
}

func reflectorReply(body gjson.Result) testkit.Reply {
	turn, read := 0, ""
	for _, m := range body.Get("messages").Array() {
		switch m.Get("role").String() {
		case "assistant":
			turn++
		case "tool":
			read = m.Get("content").String()
		}
	}
	text, calls := reflectorScript(turn, read)
	return testkit.Reply{Content: text, ToolCalls: calls}
}

type guidanceLine struct {
	TaskID          string    `json:"task_id"`
	TaskDescription string    `json:"task_description"`
	Guidance        string    `json:"guidance"`
	SourceEpisodes  []string  `json:"source_episodes"`
	Rewards         []float64 `json:"rewards"`
	Model           string    `json:"model"`
	PromptVersion   string    `json:"prompt_version"`
	Tokens          struct{ Input, Output int64 }
}

func readGuidance(t *testing.T, path string) []guidanceLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []guidanceLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var g guidanceLine
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatalf("line %d: %v: %q", len(out)+1, err, sc.Text())
		}
		out = append(out, g)
	}
	return out
}

// planJobs are the job keys of the default plan of a buffer, in plan order.
func planJobs(t *testing.T, uri string) []string {
	t.Helper()
	src, err := replay.OpenSource(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	b, err := replay.Read(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	var jobs []string
	for _, j := range trainer.Sample(b.Tasks(), trainer.SampleOptions{}).Jobs {
		jobs = append(jobs, j.Key)
	}
	return jobs
}

// keySet is a set of job keys.
func keySet(jobs []string) map[string]bool {
	keys := map[string]bool{}
	for _, k := range jobs {
		keys[k] = true
	}
	return keys
}

// checkNoDupNoGap: the output holds each planned job exactly once.
func checkNoDupNoGap(t *testing.T, lines []guidanceLine, keys map[string]bool) {
	t.Helper()
	seen := map[string]bool{}
	for _, g := range lines {
		k := trainer.JobKey(g.TaskID, g.SourceEpisodes)
		if seen[k] {
			t.Errorf("duplicate: %s %v", g.TaskID, g.SourceEpisodes)
		}
		if !keys[k] {
			t.Errorf("not a planned job: %s %v", g.TaskID, g.SourceEpisodes)
		}
		seen[k] = true
	}
	if len(seen) != len(keys) {
		t.Errorf("%d distinct jobs in the output, %d planned", len(seen), len(keys))
	}
}

func TestTrainReflectUsage(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "g.jsonl")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"train"}, "train: want a command: dpo, grpo, merge, playbook, reflect, serve-config, sft"},
		{[]string{"train", "distill"}, `unknown command "distill"`},
		{[]string{"train", "sft"}, "--out is required"},
		{[]string{"train", "reflect", "--model", "openai/x"}, "--out is required"},
		{[]string{"train", "reflect", "--out", out}, "--model is required"},
		{[]string{"train", "reflect", "--out", out, "--model", "gpt-4o"}, "want openai/NAME or bedrock/MODEL_ID"},
		{[]string{"train", "reflect", "--out", out, "--model", "azure/gpt-4o"}, "want openai/NAME or bedrock/MODEL_ID"},
		{[]string{"train", "reflect", "--out", dir + "/no/such/g.jsonl", "--model", "openai/x"}, "does not exist"},
		{[]string{"train", "reflect", "--out", dir, "--model", "openai/x"}, "is a directory"},
		{[]string{"train", "reflect", "--out", "-", "--model", "openai/x"}, "--out must be a file"},
		{[]string{"train", "reflect", "--out", out, "--model", "openai/x", "--api-key-env", "CAMPROXY_TEST_NO_KEY"}, "$CAMPROXY_TEST_NO_KEY is not set"},
		{[]string{"train", "reflect", "--out", out, "--model", "openai/x", "--subset-size", "0"}, "--subset-size 0"},
		{[]string{"train", "reflect", "--out", out, "--model", "openai/x", "--concurrency", "0"}, "--concurrency 0"},
		{[]string{"train", "reflect", "--out", out, "--model", "openai/x", "--temperature", "3"}, "--temperature 3"},
		{[]string{"train", "reflect", "--out", out, "--model", "openai/x", "--progress", "fancy"}, `--progress "fancy"`},
		{[]string{"train", "reflect", "--out", out, "--model", "openai/x", "--system-prompt", dir + "/none.md"}, "--system-prompt"},
		{[]string{"train", "reflect", "--out", out, "--model", "bedrock/x", "--from", "file://" + dir + "/none"}, "--from"},
		{[]string{"train", "reflect", "--out", out, "--model", "openai/x", "--base-url", "http://127.0.0.1:1/v1", "--from", "ftp://x"}, "unknown scheme"},
		{[]string{"train", "reflect", "extra", "--out", out, "--model", "openai/x"}, `unexpected argument "extra"`},
	} {
		_, errOut, code := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
	if out, _, code := runCLI(t, "train", "reflect", "-h"); code != 0 || !strings.Contains(out, "--subset-size") || !strings.Contains(out, "(default 3)") {
		t.Errorf("-h: exit %d\n%s", code, out)
	}
	if out, _, _ := runCLI(t, "help", "train"); !strings.Contains(out, "reflect") {
		t.Errorf("train's help lacks reflect:\n%s", out)
	}
}

// TestTrainReflectAirline runs reflect on the real data. A read of it is a second
// of CPU under -race, so the plan to check against is read once, and the runs
// that check what the command does with a model (OpenAI: flags, progress, summary,
// rerun; Bedrock; custom prompts) read the sample: trainer.TestReflectOpenAIAirline
// runs the 50 jobs of the whole data through the same Reflect.
func TestTrainReflectAirline(t *testing.T) {
	uri := importedAirline(t)
	keys := keySet(planJobs(t, uri))
	t.Run("dry-run", func(t *testing.T) { checkDryRun(t, uri) })
	t.Run("openai", func(t *testing.T) {
		sample := airlineSample(t)
		checkReflectOpenAI(t, sample, keySet(planJobs(t, sample)))
	})
	t.Run("bedrock", func(t *testing.T) { checkReflectBedrock(t, airlineSample(t)) })
	t.Run("sigkill", func(t *testing.T) { checkReflectSIGKILL(t, uri, keys) })
}

func checkDryRun(t *testing.T, uri string) {
	out, errOut, code := runCLI(t, "train", "reflect", "--from", uri, "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(out, "\n")
	row := regexp.MustCompile(`^(\d+)\s+(tau-airline-\d+)\s+(yes|no)\s+((?:tau-airline-\d+-\d \([01]\) ?){3})\s+~[\d.]+k\s*$`)
	jobs := 0
	for _, l := range lines[1:] {
		m := row.FindStringSubmatch(l)
		if m == nil {
			break
		}
		jobs++
		if mixed := m[3] == "yes"; mixed != (jobs <= 26) {
			t.Fatalf("job %d mixed=%v: the 26 mixed tasks come first:\n%s", jobs, mixed, out)
		}
	}
	if jobs != 50 {
		t.Fatalf("%d job rows, want 50:\n%s", jobs, out)
	}
	for _, frag := range []string{
		"50 jobs over 50 tasks (26 with mixed outcomes); 0 already in --out, 50 to run",
		"50 tasks in the buffer; left out: 0 with too few rewarded runs",
		"the runs to reflect on hold ~",
		"prompt version " + trainer.DefaultPrompts().Version(),
	} {
		if !strings.Contains(out, frag) {
			t.Errorf("dry run lacks %q:\n%s", frag, out)
		}
	}
	// --limit and --subsets shape the plan.
	out, _, _ = runCLI(t, "train", "reflect", "--from", uri, "--dry-run", "--subsets", "2", "--limit", "60")
	if !strings.Contains(out, "60 jobs over 50 tasks") {
		t.Errorf("--subsets 2 --limit 60:\n%s", out)
	}
}

func checkReflectOpenAI(t *testing.T, uri string, keys map[string]bool) {
	up := scriptedOpenAI()
	defer up.Close()
	dir := t.TempDir()
	out := filepath.Join(dir, "guidance.jsonl")
	args := []string{"train", "reflect", "--from", uri, "--out", out, "--model", "openai/reflector-1", "--base-url", up.URL + "/v1",
		"--concurrency", "4", "--progress", "lines", "--work-dir", dir, "--temperature", "0.2", "--max-tokens", "900"}
	stdout, stderr, code := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	n := len(keys)
	if n < 2 {
		t.Fatalf("the plan of %s has %d jobs", uri, n)
	}
	if want := fmt.Sprintf("reflect: %d jobs: %d written, 0 already in %s, 0 failed; %d model calls, 0 retries", n, n, out, 3*n); !strings.Contains(stdout, want) {
		t.Fatalf("summary: %s\nwant %q", stdout, want)
	}
	if !strings.Contains(stderr, fmt.Sprintf("%d/%d 100%%", n, n)) || !strings.Contains(stderr, "written (3 steps") {
		t.Fatalf("progress lines:\n%s", stderr)
	}
	lines := readGuidance(t, out)
	checkNoDupNoGap(t, lines, keys)
	for _, g := range lines {
		if !strings.HasPrefix(g.Guidance, "Start from what the first run shows: run_1.md, lines 3-3 of ") ||
			!strings.Contains(g.Guidance, fmt.Sprintf("     3  reward: %g", g.Rewards[0])) {
			t.Fatalf("guidance: %q", g.Guidance)
		}
		if g.Model != "openai/reflector-1" || g.TaskDescription == "" || len(g.SourceEpisodes) != 3 || g.Tokens.Input == 0 {
			t.Fatalf("line: %+v", g)
		}
	}
	body := gjson.ParseBytes(up.Last().Body)
	if body.Get("temperature").Float() != 0.2 || body.Get("max_completion_tokens").Int() != 900 || body.Get("model").String() != "reflector-1" {
		t.Fatalf("request: %s", up.Last().Body)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Fatalf("work dir holds %d entries: the sandboxes must go", len(left))
	}

	// A rerun has nothing left to do; the dry run says so.
	calls := len(up.Requests())
	stdout, _, code = runCLI(t, args...)
	if code != 0 || !strings.Contains(stdout, fmt.Sprintf("0 written, %d already in", n)) || len(up.Requests()) != calls {
		t.Fatalf("rerun: exit %d, %s", code, stdout)
	}
	stdout, _, _ = runCLI(t, "train", "reflect", "--from", uri, "--out", out, "--dry-run")
	if !strings.Contains(stdout, fmt.Sprintf("%d already in --out, 0 to run", n)) || strings.Count(stdout, " done\n") != n {
		t.Fatalf("dry run after the run:\n%s", stdout)
	}

	// Overridden prompts reach the model and change the prompt version.
	sys := filepath.Join(dir, "system.md")
	os.WriteFile(sys, []byte("Compare the runs. Answer in <guidance> tags.\n"), 0o644)
	usr := filepath.Join(dir, "user.md")
	os.WriteFile(usr, []byte("Task: {{task}}\nRuns:\n{{runs}}\nTurns: {{max_steps}}\n"), 0o644)
	out2 := filepath.Join(dir, "custom.jsonl")
	_, stderr, code = runCLI(t, "train", "reflect", "--from", airlineSample(t), "--out", out2, "--model", "openai/reflector-1", "--base-url", up.URL+"/v1",
		"--system-prompt", sys, "--user-prompt", usr, "--limit", "2", "--progress", "off", "--max-steps", "5")
	if code != 0 {
		t.Fatalf("custom prompts: exit %d: %s", code, stderr)
	}
	body = gjson.ParseBytes(up.Last().Body)
	if body.Get("messages.0.content").String() != "Compare the runs. Answer in <guidance> tags.\n" ||
		!strings.HasPrefix(body.Get("messages.1.content").String(), "Task: ") || !strings.Contains(body.Get("messages.1.content").String(), "\nTurns: 5") {
		t.Fatalf("prompts sent: %s", up.Last().Body)
	}
	custom := readGuidance(t, out2)
	if len(custom) != 2 || custom[0].PromptVersion == lines[0].PromptVersion {
		t.Fatalf("custom prompt version %q, default %q", custom[0].PromptVersion, lines[0].PromptVersion)
	}
}

// checkReflectBedrock runs reflect's first 3 jobs of uri on Bedrock.
func checkReflectBedrock(t *testing.T, uri string) {
	const ak, sk = "AKIDTRAINREFLECT", "train/reflect+secret"
	t.Setenv("AWS_ACCESS_KEY_ID", ak)
	t.Setenv("AWS_SECRET_ACCESS_KEY", sk)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	br := testkit.NewBedrock(ak, sk, "eu-west-3")
	defer br.Close()
	br.ReplyFn = func(kind, model string, body gjson.Result) testkit.BedrockReply {
		turn, read := 0, ""
		for _, m := range body.Get("messages").Array() {
			if m.Get("role").String() == "assistant" {
				turn++
			}
			if r := m.Get("content.0.toolResult.content.0.text"); r.Exists() {
				read = r.String()
			}
		}
		text, calls := reflectorScript(turn, read)
		return testkit.BedrockReply{Content: text, ToolCalls: calls}
	}
	out := filepath.Join(t.TempDir(), "guidance.jsonl")
	const id = "us.anthropic.claude-3-5-sonnet-20241022-v2:0"
	stdout, stderr, code := runCLI(t, "train", "reflect", "--from", uri, "--out", out, "--model", "bedrock/"+id,
		"--base-url", br.URL, "--region", "eu-west-3", "--limit", "3", "--progress", "off")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	lines := readGuidance(t, out)
	checkNoDupNoGap(t, lines, keySet(planJobs(t, uri)[:3]))
	for _, g := range lines {
		if g.Model != "bedrock/"+id || !strings.Contains(g.Guidance, "     3  reward: ") {
			t.Fatalf("line %+v", g)
		}
	}
	for _, r := range br.Requests() {
		if r.AuthError != "" || r.Model != id || r.Region != "eu-west-3" {
			t.Fatalf("Bedrock saw model %q region %q auth error %q", r.Model, r.Region, r.AuthError)
		}
	}
}

// checkReflectSIGKILL kills a real camproxy process while it writes guidance, then
// reruns the command: the output ends with every job once.
func checkReflectSIGKILL(t *testing.T, uri string, keys map[string]bool) {
	up := scriptedOpenAI()
	defer up.Close()
	up.Configure(func(u *testkit.Upstream) { u.Delay = 15 * time.Millisecond }) // slow enough to be killed midway
	out := filepath.Join(t.TempDir(), "guidance.jsonl")
	args := "train reflect --from " + uri + " --out " + out + " --model openai/reflector-1 --base-url " + up.URL + "/v1 --concurrency 3 --progress lines"
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "CAMPROXY_BE_MAIN=1", "CAMPROXY_ARGS="+args)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	wait(t, "camproxy writing 10 lines", func() bool {
		data, _ := os.ReadFile(out)
		return strings.Count(string(data), "\n") >= 10
	})
	_ = cmd.Process.Kill() // SIGKILL
	_ = cmd.Wait()
	data, _ := os.ReadFile(out)
	killed := strings.Count(string(data), "\n")
	if killed >= len(keys) {
		t.Fatalf("the kill came too late: %d lines", killed)
	}

	stdout, stderr, code := runCLI(t, strings.Fields(args)...)
	if code != 0 {
		t.Fatalf("rerun: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, fmt.Sprintf("%d written, %d already in", len(keys)-killed, killed)) {
		t.Fatalf("rerun after %d lines: %s", killed, stdout)
	}
	checkNoDupNoGap(t, readGuidance(t, out), keys)
}
