package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/learn"
	"github.com/camproxy/camproxy/playbook"
	"github.com/camproxy/camproxy/playbook/storage"
)

// The seed playbook of these tests: one entry the mutator deletes, one the reflector
// tags harmful into pruning, one it tags helpful every iteration.
const seedJSON = `{"entries": [
  {"content": "Delete me: a stale rule.", "section": "others"},
  {"content": "HARMFUL: refund without checking.", "section": "refunds", "entry_id": "harm0001", "helpful_count": 0, "harmful_count": 2},
  {"content": "Be polite.", "section": "style", "entry_id": "polite01", "helpful_count": 0, "harmful_count": 0}
], "version": "1.0"}`

var (
	reIteration = regexp.MustCompile(`# Batch of iteration (\d+)`)
	reItem      = regexp.MustCompile(`(?m)^## Item \d+: task (\S+)$`)
	reEpisode   = regexp.MustCompile(`, episode (\S+), reward`)
	reLine      = regexp.MustCompile(`(?m)^\[(\w+)\] \((\S+)\) (.*)$`)
	reRule      = regexp.MustCompile(`For task (\S+): `)
)

func ruleFor(task string) string {
	return "For task " + task + ": confirm the reservation id before acting."
}

// optimiserFake is the scripted reflector and mutator over HTTP. Per turn:
// reflector — 0: grep the failure run and read batch.md; 1: tag "Be polite." helpful,
// the HARMFUL entry harmful, and an unknown id; 2: finish. Mutator — 0: add the rule
// of the first task of the batch that has none, add it again (a duplicate), delete
// "Delete me", and update with arguments that are not JSON; 1: finish.
type optimiserFake struct {
	mu         sync.Mutex
	problems   []string
	added      map[int]string   // iteration → the task whose rule it added ("" = none)
	sources    map[int][]string // iteration → the episodes of its batch, in order
	mutatorIts map[int]bool
}

func newOptimiserFake() *optimiserFake {
	return &optimiserFake{added: map[int]string{}, sources: map[int][]string{}, mutatorIts: map[int]bool{}}
}

func (f *optimiserFake) problem(format string, a ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.problems = append(f.problems, fmt.Sprintf(format, a...))
}

func (f *optimiserFake) reply(body gjson.Result) testkit.Reply {
	msgs := body.Get("messages").Array()
	system, prompt := msgs[0].Get("content").String(), msgs[1].Get("content").String()
	turn := 0
	results := map[string]string{}
	for _, m := range msgs {
		switch m.Get("role").String() {
		case "assistant":
			turn++
		case "tool":
			results[m.Get("tool_call_id").String()] = m.Get("content").String()
		}
	}
	it := 0
	if m := reIteration.FindStringSubmatch(prompt); m != nil {
		fmt.Sscan(m[1], &it)
	}
	lines := reLine.FindAllStringSubmatch(prompt, -1)
	idOf := func(prefix string) string {
		for _, l := range lines {
			if strings.HasPrefix(l[3], prefix) {
				return l[1]
			}
		}
		return ""
	}
	tc := func(id, name, args string) testkit.ToolCall {
		return testkit.ToolCall{ID: id, Name: name, Arguments: args}
	}
	if strings.Contains(system, "You are the reflector") {
		switch turn {
		case 0:
			return testkit.Reply{ToolCalls: []testkit.ToolCall{
				tc("g", "grep", `{"pattern":"^reward: ","path":"item_1_failure.md"}`),
				tc("b", "read_file", `{"path":"batch.md"}`),
			}}
		case 1:
			if !strings.Contains(results["g"], "item_1_failure.md:3: reward: ") || !strings.Contains(results["b"], "## Item 1: task ") {
				f.problem("it%d: sandbox answers: grep %q, batch %q", it, results["g"], results["b"])
			}
			calls := []testkit.ToolCall{tc("h", "tag_entry", `{"entry_id":"`+idOf("Be polite.")+`","tag":"helpful"}`)}
			if id := idOf("HARMFUL"); id != "" {
				calls = append(calls, tc("x", "tag_entry", `{"entry_id":"`+id+`","tag":"harmful"}`))
			}
			calls = append(calls, tc("bad", "tag_entry", `{"entry_id":"nope","tag":"helpful"}`))
			return testkit.Reply{Content: "Tagging.", ToolCalls: calls}
		default:
			if !strings.HasPrefix(results["bad"], "error: no entry has entry_id") || !strings.HasPrefix(results["h"], "ok: [polite01]") {
				f.problem("it%d: tag results %v", it, results)
			}
			return testkit.Reply{ToolCalls: []testkit.ToolCall{tc("f", "finish", fmt.Sprintf(`{"summary":"diagnosis %d"}`, it))}}
		}
	}
	switch turn {
	case 0:
		if !strings.Contains(prompt, fmt.Sprintf("diagnosis %d", it)) {
			f.problem("it%d: the mutator did not get the reflector's summary", it)
		}
		if it > 1 && !strings.Contains(prompt, fmt.Sprintf("iteration %d: changes %d", it-1, it-1)) {
			f.problem("it%d: the optimizer state lacks the last summary:\n%s", it, prompt)
		}
		have := map[string]bool{}
		for _, l := range lines {
			if m := reRule.FindStringSubmatch(l[3]); m != nil {
				have[m[1]] = true
			}
		}
		task := ""
		for _, m := range reItem.FindAllStringSubmatch(prompt, -1) {
			if !have[m[1]] {
				task = m[1]
				break
			}
		}
		var eps []string
		for _, m := range reEpisode.FindAllStringSubmatch(prompt, -1) {
			eps = append(eps, m[1])
		}
		f.mu.Lock()
		f.added[it], f.sources[it], f.mutatorIts[it] = task, eps, true
		f.mu.Unlock()
		var calls []testkit.ToolCall
		if task != "" {
			rule, _ := json.Marshal(ruleFor(task))
			loud, _ := json.Marshal("  " + strings.ToUpper(ruleFor(task)) + "  ")
			calls = append(calls, tc("add", "add_entry", `{"section":"tasks","content":`+string(rule)+`}`),
				tc("dup", "add_entry", `{"section":"tasks","content":`+string(loud)+`}`))
		}
		if id := idOf("Delete me"); id != "" {
			calls = append(calls, tc("del", "delete_entry", `{"entry_id":"`+id+`"}`))
		}
		calls = append(calls, tc("bad", "update_entry", `{"entry_id": "polite01", "content": `))
		return testkit.Reply{ToolCalls: calls}
	default:
		if results["add"] != "" && !regexp.MustCompile(`^[0-9a-f]{8}$`).MatchString(results["add"]) {
			f.problem("it%d: add_entry answered %q, not an entry_id", it, results["add"])
		}
		if results["dup"] != "" && !strings.HasPrefix(results["dup"], "error: duplicate: entry [") {
			f.problem("it%d: the duplicate was answered %q", it, results["dup"])
		}
		if !strings.HasPrefix(results["bad"], "error: the arguments of update_entry must be a JSON object") {
			f.problem("it%d: a call with bad JSON was answered %q", it, results["bad"])
		}
		return testkit.Reply{ToolCalls: []testkit.ToolCall{tc("f", "finish", fmt.Sprintf(`{"summary":"changes %d"}`, it))}}
	}
}

const callsPerIteration = 5 // reflector 3 turns, mutator 2

func newOptimiserUpstream(f *optimiserFake) *testkit.Upstream {
	up := testkit.NewUpstream()
	up.Configure(func(u *testkit.Upstream) { u.Reply = f.reply })
	return up
}

type manifestRow struct {
	Version   int      `json:"version"`
	File      string   `json:"file"`
	Parent    int      `json:"parent"`
	Iteration int      `json:"iteration"`
	Scored    bool     `json:"scored"`
	Score     *float64 `json:"score"`
	Runs      int      `json:"runs"`
	Entries   int      `json:"entries"`
	Summary   string   `json:"summary"`
	Sources   []string `json:"sources"`
}

func readManifest(t *testing.T, dir string) []manifestRow {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Versions []manifestRow }
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m.Versions
}

func loadVersion(t *testing.T, dir string, n int) *playbook.Playbook {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, storage.FileName(n)))
	if err != nil {
		t.Fatal(err)
	}
	pb, err := playbook.ParseJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	return pb
}

// snapshot is every file of dir, by name.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(data)
	}
	return out
}

// expectVersions checks every version against what the fake did: v1 is the seed;
// after iteration k, "Be polite." has k helpful tags, "Delete me" and the HARMFUL
// entry (pruned at harmful 3) are gone, and the rules of the tasks the mutator added
// are there, newest last, at most maxEntries entries (the oldest rule evicted).
func expectVersions(t *testing.T, dir string, f *optimiserFake, iterations, maxEntries int) []manifestRow {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.problems) > 0 {
		t.Fatalf("the scripted model saw:\n%s", strings.Join(f.problems, "\n"))
	}
	rows := readManifest(t, dir)
	if len(rows) != iterations+1 {
		t.Fatalf("%d versions, want %d (every iteration tags, so every one writes)", len(rows), iterations+1)
	}
	seed, _ := playbook.ParseJSON([]byte(seedJSON))
	if got, _ := os.ReadFile(filepath.Join(dir, "playbook.v1.json")); string(got) != string(seed.JSON()) {
		t.Fatalf("v1 is not the seed:\n%s", got)
	}
	var rules []string // task ids, oldest first
	ruleVersion := map[string]int{}
	for n, row := range rows {
		if row.Version != n+1 || row.File != storage.FileName(n+1) || row.Parent != n || row.Iteration != n {
			t.Fatalf("manifest row %d: %+v", n, row)
		}
		if n == 0 {
			continue
		}
		if task := f.added[n]; task != "" {
			rules = append(rules, task)
			ruleVersion[task] = n + 1
		}
		var want []string
		want = append(want, fmt.Sprintf("polite01 style %q helpful=%d harmful=0 v0", "Be polite.", n))
		kept := rules
		if len(kept) > maxEntries-1 {
			kept = kept[len(kept)-(maxEntries-1):]
		}
		for _, task := range kept {
			want = append(want, fmt.Sprintf("tasks %q helpful=0 harmful=0 v%d", ruleFor(task), ruleVersion[task]))
		}
		pb := loadVersion(t, dir, n+1)
		var got []string
		for _, e := range pb.Entries {
			s := fmt.Sprintf("%s %q helpful=%d harmful=%d v%d", e.Section, e.Content, e.Helpful, e.Harmful, e.Version)
			if e.ID == "polite01" {
				s = "polite01 " + s
			} else if !slices.Equal(e.Sources, f.sources[e.Version-1]) || len(e.Sources) == 0 {
				t.Errorf("v%d: %s sources %v, want the episodes of iteration %d: %v", n+1, e.ID, e.Sources, e.Version-1, f.sources[e.Version-1])
			}
			got = append(got, s)
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("v%d:\n%s\nwant\n%s", n+1, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if row.Entries != len(want) || row.Summary != fmt.Sprintf("changes %d", n) || !slices.Equal(row.Sources, f.sources[n]) {
			t.Fatalf("manifest row %d: %+v", n, row)
		}
	}
	return rows
}

func TestTrainPlaybookUsage(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "pb")
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"entries": [{"section": "x"}]}`), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "playbook", "--model", "openai/x"}, "--out is required"},
		{[]string{"train", "playbook", "--out", out}, "--model is required"},
		{[]string{"train", "playbook", "--out", out, "--model", "gpt-4o"}, "--model: bad model"},
		{[]string{"train", "playbook", "--out", out, "--model", "openai/x", "--mutator-model", "azure/x"}, "--mutator-model: bad model"},
		{[]string{"train", "playbook", "--out", out, "--model", "openai/x", "--val", "0.3"}, "--val needs --rollout-url"},
		{[]string{"train", "playbook", "--out", out, "--model", "openai/x", "--group", "2"}, "--group needs --rollout-url"},
		{[]string{"train", "playbook", "--out", out, "--model", "openai/x", "--rollout-url", "http://127.0.0.1:1", "--val", "1"}, "--val 1"},
		{[]string{"train", "playbook", "--out", out, "--model", "openai/x", "--rollout-url", "127.0.0.1:1"}, "--rollout-url"},
		{[]string{"train", "playbook", "--out", out, "--model", "openai/x", "--iterations", "0"}, "--iterations 0"},
		{[]string{"train", "playbook", "--out", out, "--model", "openai/x", "--batch-size", "0"}, "--batch-size 0"},
		{[]string{"train", "playbook", "--out", out, "--model", "openai/x", "--prune", "-1"}, "--prune -1"},
		{[]string{"train", "playbook", "--out", out, "--model", "openai/x", "--evict", "0"}, "--evict 0"},
		{[]string{"train", "playbook", "--out", bad, "--model", "openai/x"}, "is not a directory"},
		{[]string{"train", "playbook", "--out", dir + "/no/such", "--model", "openai/x"}, "does not exist"},
		{[]string{"train", "playbook", "--out", out, "--model", "openai/x", "--api-key-env", "CAMPROXY_TEST_NO_KEY"}, "$CAMPROXY_TEST_NO_KEY is not set"},
		{[]string{"train", "playbook", "--out", out, "--model", "openai/x", "--base-url", "http://127.0.0.1:1/v1", "--seed", bad}, `--seed`},
		{[]string{"train", "playbook", "--out", out, "--model", "openai/x", "--base-url", "http://127.0.0.1:1/v1", "--seed", dir + "/none"}, `--seed`},
		{[]string{"train", "playbook", "--out", out, "--model", "openai/x", "--base-url", "http://127.0.0.1:1/v1", "--from", "file://" + dir + "/none"}, "--from"},
		{[]string{"train", "playbook", "extra", "--out", out, "--model", "openai/x"}, `unexpected argument "extra"`},
	} {
		_, errOut, code := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
	if out, _, code := runCLI(t, "train", "playbook", "-h"); code != 0 || !strings.Contains(out, "--max-entries") || !strings.Contains(out, "(default 100)") {
		t.Errorf("-h: exit %d\n%s", code, out)
	}
	if out, _, _ := runCLI(t, "help", "train"); !strings.Contains(out, "playbook") {
		t.Errorf("train's help lacks playbook:\n%s", out)
	}
	if _, errOut, _ := runCLI(t, "train", "nope"); !strings.Contains(errOut, "playbook") {
		t.Errorf("train's subcommands: %s", errOut)
	}
}

// TestTrainPlaybookAirline runs the loop on the real tau-bench buffer against the
// scripted model over HTTP (the SIGKILL resume on its sample).
func TestTrainPlaybookAirline(t *testing.T) {
	t.Parallel()
	uri := importedAirline(t)
	seed := filepath.Join(t.TempDir(), "seed.json")
	if err := os.WriteFile(seed, []byte(seedJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("dry-run", func(t *testing.T) { checkPlaybookDryRun(t, uri, seed) })
	t.Run("run, rerun, other flags", func(t *testing.T) { checkPlaybookRun(t, uri, seed) })
	t.Run("sigkill and resume", func(t *testing.T) { checkPlaybookSIGKILL(t, airlineSample(t), seed) })
	t.Run("rollouts", func(t *testing.T) { checkPlaybookRollouts(t, uri, seed) })
}

func checkPlaybookDryRun(t *testing.T, uri, seed string) {
	up := newOptimiserUpstream(newOptimiserFake())
	defer up.Close()
	dir := filepath.Join(t.TempDir(), "out")
	out, errOut, code := runCLI(t, "train", "playbook", "--from", uri, "--out", dir, "--model", "openai/m", "--base-url", up.URL+"/v1",
		"--seed", seed, "--iterations", "3", "--batch-size", "4", "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"plan: 3 iterations of up to 4 items; 50 training tasks (200 rewarded episodes, 116 failures); no scoring",
		"iteration 1: 4 items (0 replayed), ~", "iteration 2: 4 items (2 replayed), ~", "iteration 3: 4 items (2 replayed), ~",
		"estimated model input ~", "dry run: no model and no rollout was called",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	// Iteration 2 replays iteration 1's first two failed tasks.
	first := regexp.MustCompile(`(?m)^iteration 1: .*?: (tau-airline-\d+) \(failure [^;]*; (tau-airline-\d+) \(failure`).FindStringSubmatch(out)
	if first == nil || !strings.Contains(out, "iteration 2: 4 items (2 replayed), ~") ||
		!regexp.MustCompile(`(?m)^iteration 2: .*: replay `+first[1]+` \(failure [^;]*; replay `+first[2]+` \(failure`).MatchString(out) {
		t.Errorf("replay order:\n%s", out)
	}
	if len(up.Requests()) != 0 {
		t.Fatalf("the dry run called the model %d times", len(up.Requests()))
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatal("the dry run made --out")
	}
	// With --rollout-url: the validation split.
	out, _, code = runCLI(t, "train", "playbook", "--from", uri, "--dry-run", "--rollout-url", "http://127.0.0.1:1", "--val", "0.2", "--group", "2")
	if code != 0 || !strings.Contains(out, "40 training tasks (160 rewarded episodes, ") || !strings.Contains(out, "10 validation tasks (--val 0.2) scored with 2 run(s)") ||
		!strings.Contains(out, "rollouts: at most 220 to score versions") {
		t.Fatalf("dry run with rollouts:\n%s", out)
	}
}

func checkPlaybookRun(t *testing.T, uri, seed string) {
	f := newOptimiserFake()
	up := newOptimiserUpstream(f)
	defer up.Close()
	dir := filepath.Join(t.TempDir(), "out")
	args := []string{"train", "playbook", "--from", uri, "--out", dir, "--model", "openai/opt-1", "--base-url", up.URL + "/v1",
		"--seed", seed, "--iterations", "4", "--batch-size", "3", "--max-entries", "3", "--work-dir", t.TempDir()}
	stdout, stderr, code := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	expectVersions(t, dir, f, 4, 3)
	if n := len(up.Requests()); n != 4*callsPerIteration {
		t.Fatalf("%d model calls, want %d", n, 4*callsPerIteration)
	}
	if got := gjson.GetBytes(up.Last().Body, "model").String(); got != "opt-1" {
		t.Fatalf("model %q", got)
	}
	for _, r := range readManifest(t, dir) {
		if r.Scored || r.Score != nil {
			t.Fatalf("unscored run: %+v", r)
		}
	}
	last, _ := os.ReadFile(filepath.Join(dir, "playbook.v5.json"))
	if best, _ := os.ReadFile(filepath.Join(dir, "playbook.json")); string(best) != string(last) {
		t.Fatal("playbook.json is not the last version")
	}
	for i := 1; i <= 4; i++ {
		re := regexp.MustCompile(fmt.Sprintf(`(?m)^iteration %d/4: batch 3 \(\d failures, \d replayed\), \d+ edits applied \(\d+ refused\), \d entries, wrote v%d, tokens [\d.]+k? in / [\d.]+k? out$`, i, i+1))
		if !re.MatchString(stderr) {
			t.Fatalf("no progress line for iteration %d:\n%s", i, stderr)
		}
	}
	if !strings.Contains(stdout, "train playbook: 4 iterations, 5 versions in "+dir+"; playbook.json is v5 (the last; unscored); 20 model calls (0 answered from the journal)") {
		t.Fatalf("summary: %s", stdout)
	}

	// A finished run rerun: no call, the same files, byte for byte.
	before := snapshot(t, dir)
	stdout, stderr, code = runCLI(t, args...)
	if code != 0 || len(up.Requests()) != 4*callsPerIteration {
		t.Fatalf("rerun: exit %d, %d calls\n%s\n%s", code, len(up.Requests()), stdout, stderr)
	}
	if !strings.Contains(stdout, "0 model calls (20 answered from the journal)") {
		t.Fatalf("rerun summary: %s", stdout)
	}
	after := snapshot(t, dir)
	for name, data := range before {
		if after[name] != data {
			t.Errorf("the rerun changed %s", name)
		}
	}
	if len(after) != len(before) {
		t.Errorf("the rerun left %d files, had %d", len(after), len(before))
	}

	// Two more iterations continue the run: only their calls are made.
	args6 := slices.Clone(args)
	args6[slices.Index(args6, "--iterations")+1] = "6"
	if _, stderr, code = runCLI(t, args6...); code != 0 || len(up.Requests()) != 6*callsPerIteration {
		t.Fatalf("--iterations 6: exit %d, %d calls\n%s", code, len(up.Requests()), stderr)
	}
	expectVersions(t, dir, f, 6, 3)

	// Other flags on the same --out: refused, naming it.
	other := slices.Clone(args)
	other[slices.Index(other, "--batch-size")+1] = "2"
	if _, stderr, code = runCLI(t, other...); code != 2 || !strings.Contains(stderr, "--out "+dir) || !strings.Contains(stderr, "belongs to another run") {
		t.Fatalf("other flags: exit %d: %s", code, stderr)
	}
}

// checkPlaybookSIGKILL kills a real camproxy process midway, then reruns it: the
// rerun sends exactly the calls whose answers the journal did not hold, and the
// result is the one an uninterrupted run makes. Any buffer with failures to learn
// from will do: the test takes the sample (two reads of the full one cost ~4 s of
// CPU under -race).
func checkPlaybookSIGKILL(t *testing.T, uri, seed string) {
	f := newOptimiserFake()
	up := newOptimiserUpstream(f)
	defer up.Close()
	up.Configure(func(u *testkit.Upstream) { u.Delay = 20 * time.Millisecond })
	dir := filepath.Join(t.TempDir(), "out")
	const iterations = 4
	args := func(base string) string {
		return "train playbook --from " + uri + " --out " + dir + " --model openai/opt-1 --base-url " + base + "/v1 --seed " + seed +
			fmt.Sprintf(" --iterations %d --batch-size 3 --max-entries 3", iterations)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "CAMPROXY_BE_MAIN=1", "CAMPROXY_ARGS="+args(up.URL))
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	// Eight calls: inside iteration 2.
	wait(t, "camproxy making 8 calls", func() bool { return len(up.Requests()) >= 8 })
	_ = cmd.Process.Kill() // SIGKILL
	_ = cmd.Wait()
	// A call the killed process sent may still be in the fake's hands: Close waits for
	// it, and the rerun talks to a fake of its own (the same script), so that what it
	// sends is counted alone.
	up.Close()
	data, err := os.ReadFile(filepath.Join(dir, learn.JournalName))
	if err != nil {
		t.Fatal(err)
	}
	j, err := learn.ParseJournal(data)
	if err != nil {
		t.Fatal(err)
	}
	answered := len(j.Replies)
	if answered == 0 || answered >= iterations*callsPerIteration {
		t.Fatalf("the kill came at a bad time: %d answers journaled", answered)
	}

	up2 := newOptimiserUpstream(f)
	defer up2.Close()
	stdout, stderr, code := runCLI(t, strings.Fields(args(up2.URL))...)
	if code != 0 {
		t.Fatalf("rerun: exit %d\n%s\n%s", code, stdout, stderr)
	}
	resent := len(up2.Requests())
	if resent != iterations*callsPerIteration-answered {
		t.Fatalf("the rerun made %d calls; %d of %d were answered before the kill", resent, answered, iterations*callsPerIteration)
	}
	if !strings.Contains(stdout, fmt.Sprintf("%d model calls (%d answered from the journal)", resent, answered)) {
		t.Fatalf("summary: %s", stdout)
	}
	expectVersions(t, dir, f, iterations, 3)
}

// rolloutFake is camproxy's POST /v1/rollouts with a scripted harness: a task whose
// own rule is in the context passes; otherwise the reward depends on how many task
// rules the context holds, so versions score differently and the best is not the last.
type rolloutFake struct {
	mu    sync.Mutex
	calls int
	bad   []string
}

var valReward = map[int]float64{0: 0.2, 1: 0.9, 2: 0.5}

func scoreOf(context string) float64 { return valReward[len(reRule.FindAllString(context, -1))] }

func (r *rolloutFake) counts() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls, slices.Clone(r.bad)
}

func (r *rolloutFake) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	doc := gjson.ParseBytes(body)
	r.mu.Lock()
	r.calls++
	if req.Method != http.MethodPost || req.URL.Path != "/v1/rollouts" || doc.Get("task_id").String() == "" || doc.Get("task").String() == "" ||
		!doc.Get("timeout_s").Exists() || !strings.Contains(doc.Get("context").String(), "## style\n- Be polite.") {
		r.bad = append(r.bad, req.Method+" "+req.URL.Path+" "+string(body))
	}
	r.mu.Unlock()
	task, ctxText := doc.Get("task_id").String(), doc.Get("context").String()
	reward := scoreOf(ctxText)
	if strings.Contains(ctxText, ruleFor(task)) {
		reward = 1
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"episode_id":"ro-%d","reward":%g,"success":%v,"turns":3}`, time.Now().UnixNano(), reward, reward >= 1)
}

func checkPlaybookRollouts(t *testing.T, uri, seed string) {
	f := newOptimiserFake()
	up := newOptimiserUpstream(f)
	defer up.Close()
	rf := &rolloutFake{}
	harness := httptest.NewServer(rf)
	defer harness.Close()
	dir := filepath.Join(t.TempDir(), "out")
	const iterations = 4
	args := []string{"train", "playbook", "--from", uri, "--out", dir, "--model", "openai/opt-1", "--base-url", up.URL + "/v1",
		"--seed", seed, "--iterations", fmt.Sprint(iterations), "--batch-size", "3", "--max-entries", "3",
		"--rollout-url", harness.URL, "--val", "0.2", "--group", "2", "--graduate", "1", "--evict", "9"}
	stdout, stderr, code := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	rows := expectVersions(t, dir, f, iterations, 3)
	if _, bad := rf.counts(); len(bad) > 0 {
		t.Fatalf("bad rollout requests:\n%s", strings.Join(bad, "\n"))
	}
	best, bestScore := 0, -1.0
	for _, r := range rows {
		pb := loadVersion(t, dir, r.Version)
		want := scoreOf(pb.Context(0))
		if !r.Scored || r.Score == nil || math.Abs(*r.Score-want) > 1e-9 || r.Runs != 10*2 {
			t.Fatalf("v%d: scored %v score %v runs %d; want %g over 20 runs", r.Version, r.Scored, deref(r.Score), r.Runs, want)
		}
		if want > bestScore {
			best, bestScore = r.Version, want
		}
	}
	if best == len(rows) || best == 1 {
		t.Fatalf("the script should make a middle version best, got v%d", best)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "playbook.json"))
	want, _ := os.ReadFile(filepath.Join(dir, storage.FileName(best)))
	if string(got) != string(want) {
		t.Fatalf("playbook.json is not v%d, the best", best)
	}
	if !strings.Contains(stdout, fmt.Sprintf("playbook.json is v%d (best mean reward %.4f over 20 runs)", best, bestScore)) {
		t.Fatalf("summary: %s", stdout)
	}
	// A replayed task whose rule was added passes its rollouts and graduates: the
	// later batches show new tasks rather than replaying it.
	if !regexp.MustCompile(`replay: [1-9]\d* graduated`).MatchString(stdout) {
		t.Fatalf("no task graduated: %s", stdout)
	}

	// The rerun calls neither the model nor the harness.
	calls := len(up.Requests())
	rollouts, _ := rf.counts()
	before := snapshot(t, dir)
	_, stderr, code = runCLI(t, args...)
	if again, _ := rf.counts(); code != 0 || len(up.Requests()) != calls || again != rollouts {
		t.Fatalf("rerun: exit %d, %d model and %d rollout calls more\n%s", code, len(up.Requests())-calls, again-rollouts, stderr)
	}
	for name, data := range snapshot(t, dir) {
		if before[name] != data {
			t.Errorf("the rerun changed %s", name)
		}
	}
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}
