package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/app"
	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/trainer"
)

// camConfig writes a serving config whose cam augmenter has its own prompt, the
// one every training file must carry.
func camConfig(t *testing.T, dir, camURL, upURL string) string {
	t.Helper()
	yml := fmt.Sprintf(`server: {listen: "127.0.0.1:0", admin_listen: "127.0.0.1:0"}
upstreams:
  openai: {base_url: %q}
augmenters:
  guide:
    type: cam
    base_url: %q
    model: cam-7b
    system_prompt: "You coach airline agents. Write the rules that matter for this exact task."
    user_template: "<task>\n{{task}}\n</task>\nWrite the guidance."
    extra_body:
      chat_template_kwargs: {enable_thinking: false}
experiment:
  name: train-test
  arms:
    - {name: cam, weight: 1, augmenter: guide}
replay: {sinks: [%q], spool_dir: %q}
`, upURL, camURL+"/v1", "file://"+filepath.Join(dir, "replay"), filepath.Join(dir, "spool"))
	p := filepath.Join(dir, "camproxy.yaml")
	if err := os.WriteFile(p, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// capturedCAMPrompt runs camproxy on cfgPath, sends one agent call for task and
// returns the system and user messages the cam augmenter sent the CAM.
func capturedCAMPrompt(t *testing.T, cfgPath string, cam *testkit.CAM, task string) (string, string) {
	t.Helper()
	cfg, err := config.Load(cfgPath, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(cfg, app.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	}()
	body, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": []map[string]string{{"role": "system", "content": "You are an airline agent."}, {"role": "user", "content": task}}})
	resp, err := http.Post("http://"+a.Addr()+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-CAM-Context") == "fail-open" {
		t.Fatalf("agent call: %d %s", resp.StatusCode, resp.Header.Get("X-CAM-Context"))
	}
	bodies := cam.Bodies()
	if len(bodies) != 1 {
		t.Fatalf("%d CAM calls, want 1", len(bodies))
	}
	msgs := gjson.GetBytes(bodies[0], "messages").Array()
	if len(msgs) != 2 || msgs[0].Get("role").String() != "system" || msgs[1].Get("role").String() != "user" {
		t.Fatalf("CAM request: %s", bodies[0])
	}
	return msgs[0].Get("content").String(), msgs[1].Get("content").String()
}

// TestTrainStagesAirline: the real tau-bench buffer → a scripted reflection → SFT
// and GRPO files that LLaMA-Factory's format and an independent Parquet reader
// accept, whose prompts are byte for byte what the running camproxy sent its CAM.
func TestTrainStagesAirline(t *testing.T) {
	t.Parallel()
	uri := importedAirline(t)
	dir := t.TempDir()
	up := scriptedOpenAI()
	defer up.Close()
	guidance := filepath.Join(dir, "guidance.jsonl")
	if _, errOut, code := runCLI(t, "train", "reflect", "--from", uri, "--out", guidance, "--model", "openai/r", "--base-url", up.URL+"/v1",
		"--concurrency", "8", "--progress", "off"); code != 0 {
		t.Fatalf("reflect: exit %d: %s", code, errOut)
	}
	recs, _, err := trainer.ReadRecords(guidance)
	if err != nil || len(recs) != 50 {
		t.Fatalf("reflect wrote %d records (%v)", len(recs), err)
	}
	cam := testkit.NewCAM()
	defer cam.Close()
	cfgPath := camConfig(t, dir, cam.URL, up.URL)
	wantSys, wantUser := capturedCAMPrompt(t, cfgPath, cam, recs[0].TaskDescription)
	// The chat template as served: what vLLM renders the CAM's prompt with.
	if kw := gjson.GetBytes(cam.Bodies()[0], "chat_template_kwargs"); kw.Raw != `{"enable_thinking":false}` {
		t.Fatalf("the CAM request's chat_template_kwargs: %s", kw.Raw)
	}
	ckpt := hfCheckpoint(t)

	t.Run("sft", func(t *testing.T) {
		out := filepath.Join(dir, "sft")
		stdout, errOut, code := runCLI(t, "train", "sft", "--data", guidance, "--out", out, "--config", cfgPath, "--seed", "5")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		for _, frag := range []string{"sft: 40 records over 40 tasks to train on, 10 over 10 tasks to validate on (--val 0.2, --seed 5)",
			`chat template: chat_template_kwargs {"enable_thinking":false} of augmenter "guide", as served`,
			`CAM prompt: augmenter "guide"`, "to train: cd " + out + " && bash run.sh", "kubectl apply -f " + filepath.Join(out, "job.yaml")} {
			if !strings.Contains(stdout, frag) {
				t.Errorf("output lacks %q:\n%s", frag, stdout)
			}
		}
		cfg, err := testkit.CheckLlamaFactory(out, "sft.yaml")
		if err != nil {
			t.Fatal(err)
		}
		// LLaMA-Factory's reasoning template with enable_thinking false ends the prompt
		// with the empty think block Qwen3's template adds when served so.
		if cfg.Raw["template"] != "qwen3" || cfg.Raw["enable_thinking"] != false {
			t.Fatalf("sft.yaml renders another prompt than the served one: template %v, enable_thinking %v", cfg.Raw["template"], cfg.Raw["enable_thinking"])
		}
		if _, errOut, code := runCLI(t, "train", "sft", "--data", guidance, "--out", filepath.Join(dir, "sft-nothink"), "--config", cfgPath, "--template", "qwen3_nothink"); code != 2 ||
			!strings.Contains(errOut, `template "qwen3_nothink" renders no think block, but the CAM is served with chat_template_kwargs enable_thinking: false`) {
			t.Fatalf("qwen3_nothink against enable_thinking false: exit %d: %s", code, errOut)
		}
		byPrompt := map[string]string{}
		found := false
		for _, sets := range [][]testkit.LFDataset{cfg.Train, cfg.Eval} {
			for _, s := range sets {
				for _, r := range s.Records {
					if side, dup := byPrompt[r.Prompt]; dup && side != s.Name {
						t.Fatalf("a task is in both %s and %s", side, s.Name)
					}
					byPrompt[r.Prompt] = s.Name
					if r.System != wantSys {
						t.Fatalf("system %q is not the served one %q", r.System, wantSys)
					}
					if r.Prompt == wantUser {
						found = true
					}
					if r.Response == "" || !strings.HasPrefix(r.Response, "Start from what the first run shows") {
						t.Fatalf("output is not the reflection's guidance: %q", r.Response)
					}
				}
			}
		}
		if !found {
			t.Fatalf("no record's instruction equals the user message camproxy sent the CAM:\n%q", wantUser)
		}
		if len(byPrompt) != 50 {
			t.Fatalf("%d distinct task prompts, want 50", len(byPrompt))
		}
		// Each recipe value is a flag.
		out2 := filepath.Join(dir, "sft-lora")
		if _, errOut, code := runCLI(t, "train", "sft", "--data", guidance, "--out", out2, "--config", cfgPath, "--model", ckpt,
			"--finetuning", "lora", "--epochs", "3", "--lr", "2e-4", "--deepspeed", "none", "--template", "qwen3", "--gpus", "2", "--val", "0"); code != 0 {
			t.Fatalf("flags: exit %d: %s", code, errOut)
		}
		cfg, err = testkit.CheckLlamaFactory(out2, "sft.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Raw["model_name_or_path"] != ckpt || cfg.Raw["finetuning_type"] != "lora" || cfg.Raw["num_train_epochs"] != 3.0 ||
			cfg.Raw["learning_rate"] != 2e-4 || cfg.Raw["deepspeed"] != nil || cfg.Raw["template"] != "qwen3" || len(cfg.Eval) != 0 {
			t.Fatalf("flags not applied: %v", cfg.Raw)
		}
		if pyYAMLAvailable() {
			checkPyYAML(t, filepath.Join(out, "sft.yaml"))
		}
	})

	t.Run("grpo", func(t *testing.T) {
		out := filepath.Join(dir, "grpo")
		stdout, errOut, code := runCLI(t, "train", "grpo", "--data", guidance, "--out", out, "--config", cfgPath, "--model", ckpt,
			"--rollout-url", "http://camproxy-admin:9090", "--n", "4", "--seed", "5")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if !strings.Contains(stdout, "grpo: 40 tasks to train on in batches of 20, 10 to validate on") {
			t.Fatalf("summary:\n%s", stdout)
		}
		train, val := readParquet(t, filepath.Join(out, "train.parquet")), readParquet(t, filepath.Join(out, "val.parquet"))
		if train.Get("numRows").Int() != 40 || val.Get("numRows").Int() != 10 {
			t.Fatalf("rows: train %d, val %d", train.Get("numRows").Int(), val.Get("numRows").Int())
		}
		checkVerlSchema(t, train.Get("schema"))
		// The same seed splits GRPO's tasks as SFT's.
		sftVal := map[string]bool{}
		cfg, err := testkit.CheckLlamaFactory(filepath.Join(dir, "sft"), "sft.yaml")
		if err != nil {
			t.Skip("sft subtest failed")
		}
		for _, r := range cfg.Eval[0].Records {
			sftVal[r.Prompt] = true
		}
		found := false
		for split, rows := range map[string]gjson.Result{"train": train, "val": val} {
			for i, row := range rows.Get("rows").Array() {
				msgs := row.Get("prompt").Array()
				if len(msgs) != 2 || msgs[0].Get("role").String() != "system" || msgs[0].Get("content").String() != wantSys || msgs[1].Get("role").String() != "user" {
					t.Fatalf("prompt: %s", row.Get("prompt").Raw)
				}
				user := msgs[1].Get("content").String()
				found = found || user == wantUser
				if sftVal[user] != (split == "val") {
					t.Fatalf("task %s is %s in GRPO but not in SFT", row.Get("extra_info.task_id"), split)
				}
				x := row.Get("extra_info")
				if row.Get("data_source").String() != "camproxy" || row.Get("reward_model.style").String() != "rule" ||
					row.Get("reward_model.ground_truth").String() != x.Get("task_id").String() || x.Get("split").String() != split ||
					x.Get("index").Int() != int64(i) || !strings.Contains(user, x.Get("task").String()) || !strings.HasPrefix(x.Get("task_id").String(), "tau-airline-") {
					t.Fatalf("row %d: %s", i, row.Raw)
				}
			}
		}
		if !found {
			t.Fatal("no GRPO prompt equals the user message camproxy sent the CAM")
		}
		script, _ := os.ReadFile(filepath.Join(out, "grpo.sh"))
		for _, frag := range []string{"algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.n=4",
			"trainer.total_epochs=15", `custom_reward_function.path="$GRPO_DIR/reward.py"`, "custom_reward_function.name=compute_score",
			"actor_rollout_ref.model.path=" + ckpt, `data.train_files="$GRPO_DIR/train.parquet"`, "data.train_batch_size=20",
			"data.apply_chat_template_kwargs={enable_thinking:false}", "trainer.default_local_dir=" + filepath.Join(out, "checkpoints/camproxy/cam-grpo"),
			`CAMPROXY_ROLLOUT_URL="${CAMPROXY_ROLLOUT_URL:-http://camproxy-admin:9090}"`} {
			if !strings.Contains(string(script), frag) {
				t.Errorf("grpo.sh lacks %s", frag)
			}
		}
		if out, err := exec.Command("bash", "-n", filepath.Join(out, "grpo.sh")).CombinedOutput(); err != nil {
			t.Fatalf("grpo.sh does not parse: %s", out)
		}
		ray, _ := os.ReadFile(filepath.Join(out, "grpo-ray.sh"))
		if !strings.Contains(string(ray), "ray job submit --address") || !strings.Contains(string(ray), "-- bash grpo.sh") {
			t.Fatalf("grpo-ray.sh:\n%s", ray)
		}
		// --from a replay buffer: every task once.
		out2 := filepath.Join(dir, "grpo-from")
		if _, errOut, code := runCLI(t, "train", "grpo", "--from", uri, "--out", out2, "--config", cfgPath, "--model", "hub:org/m", "--val", "0"); code != 0 {
			t.Fatalf("--from: exit %d: %s", code, errOut)
		}
		if n := readParquet(t, filepath.Join(out2, "train.parquet")).Get("numRows").Int(); n != 50 {
			t.Fatalf("--from: %d rows, want 50", n)
		}
	})
}

// checkVerlSchema: the nested types veRL's loader expects: prompt a list of
// {role, content} structs, reward_model and extra_info structs, index an int64.
func checkVerlSchema(t *testing.T, schema gjson.Result) {
	t.Helper()
	cols := map[string]gjson.Result{}
	for _, c := range schema.Get("children").Array() {
		cols[c.Get("name").String()] = c
	}
	var names []string
	for n := range cols {
		names = append(names, n)
	}
	slices.Sort(names)
	if strings.Join(names, ",") != "ability,data_source,extra_info,prompt,reward_model" {
		t.Fatalf("columns %v", names)
	}
	p := cols["prompt"]
	elem := p.Get("children.0.children.0") // LIST → repeated list → element
	if p.Get("converted").String() != "LIST" || elem.Get("children.#").Int() != 2 || elem.Get("children.0.name").String() != "role" ||
		elem.Get("children.1.name").String() != "content" || elem.Get("children.1.type").String() != "BYTE_ARRAY" {
		t.Fatalf("prompt: %s", p.Raw)
	}
	if cols["reward_model"].Get("children.#").Int() != 2 || cols["extra_info"].Get("children.#").Int() != 4 {
		t.Fatalf("structs: %s %s", cols["reward_model"].Raw, cols["extra_info"].Raw)
	}
	for _, c := range cols["extra_info"].Get("children").Array() {
		if c.Get("name").String() == "index" && c.Get("type").String() != "INT64" {
			t.Fatalf("extra_info.index: %s", c.Raw)
		}
	}
}

// readParquet reads a file with hyparquet (clients/node), not with the Go writer's
// own library.
func readParquet(t *testing.T, path string) gjson.Result {
	t.Helper()
	dir, _ := filepath.Abs("../../clients/node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "hyparquet")); err != nil {
		if os.Getenv("CAMPROXY_REQUIRE_NODE") == "1" {
			t.Fatal("clients/node/node_modules/hyparquet missing: run `npm ci` there (make test does)")
		}
		t.Skip("clients/node/node_modules missing; `make test` runs npm ci")
	}
	out, err := exec.Command("node", filepath.Join(dir, "read-parquet.mjs"), path).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("hyparquet: %v\n%s", err, stderr)
	}
	return gjson.ParseBytes(out)
}

func pyYAMLAvailable() bool {
	return exec.Command("python3", "-c", "import yaml").Run() == nil
}

// checkPyYAML loads the config with PyYAML, the YAML 1.1 reader LLaMA-Factory uses:
// the floats must be floats there too.
func checkPyYAML(t *testing.T, path string) {
	t.Helper()
	out, err := exec.Command("python3", "-c", `import sys, yaml, json
c = yaml.safe_load(open(sys.argv[1]))
print(json.dumps({k: type(c[k]).__name__ for k in ("learning_rate", "num_train_epochs", "warmup_ratio", "bf16", "cutoff_len")}))`, path).CombinedOutput()
	if err != nil {
		t.Fatalf("PyYAML: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != `{"learning_rate": "float", "num_train_epochs": "float", "warmup_ratio": "float", "bf16": "bool", "cutoff_len": "int"}` {
		t.Fatalf("PyYAML types: %s", got)
	}
}

// dpoEvents is a buffer with known contexts and rewards: task t1 has three
// contexts (0.9, 0.5 mean of two runs, 0.1) and a baseline run; t2 has two equal ones.
func dpoEvents(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	n := 0
	ep := func(task, arm, ctx string, reward float64) {
		n++
		id := fmt.Sprintf("ep-%d", n)
		at = at.Add(time.Second)
		fmt.Fprintf(&b, `{"v":1,"type":"episode","id":"e%d","episode_id":%q,"task_id":%q,"task":"Task %s: change the booking.","arm":%q,"context":%q,"context_source":%q,"protocol":"openai","model":"m","started_at":%q}`+"\n",
			n, id, task, task, arm, ctx, arm, at.Format(time.RFC3339))
		fmt.Fprintf(&b, `{"v":1,"type":"step","id":"s%d","episode_id":%q,"turn":1,"messages":[{"role":"user","content":"Task %s"}],"response":{"role":"assistant","content":"ok"},"usage":{},"timing_ms":{},"status":200,"at":%q}`+"\n",
			n, id, task, at.Format(time.RFC3339))
		fmt.Fprintf(&b, `{"v":1,"type":"reward","id":"r%d","episode_id":%q,"reward":%g,"at":%q}`+"\n", n, id, reward, at.Add(time.Second).Format(time.RFC3339))
	}
	ep("t1", "cam", "Check the fare class first.", 0.9)
	ep("t1", "rag", "Refund everything.", 0.1)
	ep("t1", "cam-v2", "Ask for the reservation id.", 1)
	ep("t1", "cam-v2", "Ask for the reservation id.", 0)
	ep("t1", "baseline", "", 1)
	ep("t2", "cam", "A.", 1)
	ep("t2", "rag", "B.", 1)
	p := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	uri := "file://" + t.TempDir()
	if _, errOut, code := runCLI(t, "replay", "import", "--format", "jsonl", p, "--to", uri); code != 0 {
		t.Fatalf("import: %s", errOut)
	}
	return uri
}

// TestTrainDPOExactPairs: the pairs train dpo writes for a buffer with known
// contexts and rewards, in LLaMA-Factory's ranking format.
func TestTrainDPOExactPairs(t *testing.T) {
	uri := dpoEvents(t)
	out := filepath.Join(t.TempDir(), "dpo")
	stdout, errOut, code := runCLI(t, "train", "dpo", "--from", uri, "--out", out, "--val", "0", "--model", hfCheckpoint(t))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(stdout, "dpo: 3 pairs over 1 tasks to train on, 0 over 0 tasks to validate on") ||
		!strings.Contains(stdout, "1 context pairs tied within --min-margin") || !strings.Contains(stdout, "1 rewarded runs without a context") {
		t.Fatalf("summary:\n%s", stdout)
	}
	cfg, err := testkit.CheckLlamaFactory(out, "dpo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sys, user := defaultCAMPrompt(t, "Task t1: change the booking.")
	var got []string
	for _, r := range cfg.Train[0].Records {
		if r.Prompt != user || r.System != sys {
			t.Fatalf("prompt is not the built-in CAM prompt: %+v", r)
		}
		got = append(got, r.Chosen+" > "+r.Rejected)
	}
	want := []string{
		"Check the fare class first. > Refund everything.",          // 0.9 vs 0.1
		"Ask for the reservation id. > Refund everything.",          // 0.5 vs 0.1
		"Check the fare class first. > Ask for the reservation id.", // 0.9 vs 0.5
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pairs:\n got %q\nwant %q", got, want)
	}
	// No pair at all is an error that says why.
	_, errOut, code = runCLI(t, "train", "dpo", "--from", uri, "--out", filepath.Join(t.TempDir(), "x"), "--min-margin", "0.9", "--model", "hub:o/m")
	if code != 1 || !strings.Contains(errOut, "no preference pair") {
		t.Fatalf("--min-margin 0.9: exit %d: %s", code, errOut)
	}
}

func defaultCAMPrompt(t *testing.T, task string) (string, string) {
	t.Helper()
	sc, err := camPrompter("", "", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := sc.CAM.Prompt(task); s != config.DefaultCAMSystemPrompt {
		t.Fatalf("built-in prompt is not config's default")
	}
	return sc.CAM.Prompt(task)
}

// TestTrainLaunch: --launch local runs the generated script, streams its output
// and exits with its status; a missing tool is named, not a stack trace.
func TestTrainLaunch(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("bash scripts")
	}
	uri := dpoEvents(t)
	bin := t.TempDir()
	// A stand-in llamafactory-cli: prints what it was asked and fails with 3.
	fake := "#!/usr/bin/env bash\necho \"fake llamafactory-cli $* in $(basename \"$PWD\") FORCE_TORCHRUN=$FORCE_TORCHRUN\"\necho 'training failed' >&2\nexit 3\n"
	if err := os.WriteFile(filepath.Join(bin, "llamafactory-cli"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out := filepath.Join(t.TempDir(), "dpo-run")
	ckpt := hfCheckpoint(t)
	stdout, errOut, code := runCLI(t, "train", "dpo", "--from", uri, "--out", out, "--launch", "local", "--model", ckpt)
	if code != 3 {
		t.Fatalf("exit %d, want the trainer's 3\n%s\n%s", code, stdout, errOut)
	}
	if !strings.Contains(stdout, "fake llamafactory-cli train dpo.yaml in dpo-run FORCE_TORCHRUN=1") || !strings.Contains(errOut, "training failed") ||
		!strings.Contains(errOut, "bash run.sh failed after") {
		t.Fatalf("output not streamed:\n%s\n%s", stdout, errOut)
	}
	// Without the tool: a clear message, the files still written.
	t.Setenv("PATH", "/usr/bin:/bin")
	out2 := filepath.Join(t.TempDir(), "dpo-missing")
	_, errOut, code = runCLI(t, "train", "dpo", "--from", uri, "--out", out2, "--launch", "local", "--model", ckpt)
	if code != 1 || !strings.Contains(errOut, "llamafactory-cli is not installed here: pip install") || !strings.Contains(errOut, "cd "+out2+" && bash run.sh") {
		t.Fatalf("missing tool: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(out2, "dpo.yaml")); err != nil {
		t.Fatal("files not written before the launch check")
	}
	if _, errOut, code = runCLI(t, "train", "dpo", "--from", uri, "--out", out2, "--launch", "ray", "--model", ckpt); code != 2 || !strings.Contains(errOut, `--launch "ray": want local`) {
		t.Fatalf("--launch ray for dpo: exit %d: %s", code, errOut)
	}
}

func TestTrainStagesUsage(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "g.jsonl")
	os.WriteFile(data, []byte(`{"task_id":"1","task_description":"t","guidance":"g","source_episodes":["a"],"rewards":[1]}`+"\n"), 0o644)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	multi := filepath.Join(dir, "multi.yaml")
	os.WriteFile(multi, []byte("augmenters:\n  a: {type: cam}\n  b: {type: cam}\n"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"train", "sft", "--out", dir}, 2, "--data is required"},
		{[]string{"train", "sft", "--data", data}, 2, "--out is required"},
		{[]string{"train", "sft", "--data", data, "--out", dir, "--val", "1"}, 2, "--val 1"},
		// Every problem of a command line at once, not one per run.
		{[]string{"train", "sft", "--out", dir, "--val", "1.5", "--lr", "0", "--epochs", "-1"}, 2,
			"train sft: 3 problems:\n  --val 1.5: want 0 (no validation) up to below 1\n  --data is required: the output of camproxy train reflect\n  sft recipe: epochs -1: want > 0; learning rate 0: want > 0"},
		{[]string{"train", "dpo", "--val", "2", "--min-runs", "0", "--pref-beta", "0", "--model", "hub:o/m"}, 2, "train dpo: 4 problems:\n  --out is required"},
		{[]string{"train", "sft", "--data", data, "--out", dir, "--epochs", "0", "--finetuning", "half"}, 2, "2 problems:\n  --finetuning \"half\": want full, lora or freeze\n  sft recipe: epochs 0: want > 0"},
		{[]string{"train", "sft", "--data", data, "--out", file}, 2, "not a directory"},
		{[]string{"train", "sft", "--data", filepath.Join(dir, "none.jsonl"), "--out", dir}, 2, "none.jsonl"},
		{[]string{"train", "sft", "--data", data, "--out", dir, "--config", multi}, 2, "several cam augmenters (a, b): choose one with --cam"},
		{[]string{"train", "sft", "--data", data, "--out", dir, "--config", multi, "--cam", "c"}, 2, `--cam "c"`},
		{[]string{"train", "grpo", "--data", data, "--out", dir}, 2, filepath.FromSlash("sft/saves/cam-sft: no such directory")}, // the default: train sft --out sft's
		{[]string{"train", "grpo", "--data", data, "--out", dir, "--model", "Qwen/Qwen3-8B"}, 2, "a Hugging Face id is written hub:Qwen/Qwen3-8B"},
		{[]string{"train", "sft", "--data", data, "--out", dir, "--model", "Qwen/Qwen3-8B"}, 2, "a Hugging Face id is written hub:Qwen/Qwen3-8B"},
		{[]string{"train", "dpo", "--out", dir, "--model", "hub:Qwen3"}, 2, "a hub id is ORG/NAME"},
		{[]string{"train", "grpo", "--data", data, "--out", dir, "--reward-manager", "sync"}, 2, `--reward-manager "sync": want auto, loop or batch`},
		{[]string{"train", "grpo", "--data", data, "--from", "file:///x", "--out", dir, "--model", "m"}, 2, "exactly one of --data"},
		{[]string{"train", "grpo", "--data", data, "--out", dir, "--model", "m", "--n", "1", "--rollout-url", "camproxy:9090"}, 2, "camproxy:9090\": want http(s)://HOST:PORT of camproxy's admin plane; n 1"},
		{[]string{"train", "dpo", "--out", dir, "--min-runs", "0"}, 2, "--min-runs 0: want 1 or more"},
		{[]string{"train", "ppo"}, 2, `unknown command "ppo": want dpo, grpo, merge, playbook, reflect, serve-config, sft`},
		{[]string{"train", "sft", "--dat", data, "--val", "x", "--epochs", "-1"}, 2, "train sft: 5 problems:\n  unknown flag --dat; did you mean --data?\n  --val \"x\": want a number\n  --out is required\n  --data is required"},
	} {
		_, errOut, code := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, want %d with %q:\n%s", c.args, code, c.code, c.want, errOut)
		}
	}
}

// hfCheckpoint is a directory that passes for a Hugging Face checkpoint.
func hfCheckpoint(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"qwen3"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
