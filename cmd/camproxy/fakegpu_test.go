package main

// The "fake GPU" chain: stand-ins for llamafactory-cli, python3 -m verl.… and vllm
// run the whole documented path, sft → dpo → grpo → merge → serve-config → a
// camproxy serving the new model as an arm, through `--launch local`. Each stand-in
// is this test binary under the tool's name (a symbolic link on PATH): it fails
// unless every path it is given exists and every file it reads parses as the real
// tool parses it — the keys of LLaMA-Factory v0.9.4's argument dataclasses, its
// templates and dataset_info.json, the Hydra keys of veRL's generated config
// (v0.6.1 and v0.7.0, trainer/testdata/fakegpu), the Parquet rows RLHFDataset
// reads, reward.py imported as veRL imports it and its function bound to the call
// shape of the reward manager that version runs — and then writes what the tool
// would: a Hugging Face save, a sharded FSDP checkpoint, a merged model.

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/tidwall/gjson"
	"go.yaml.in/yaml/v3"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/trainer"
)

// Environment of the stand-ins.
const (
	fakeGPUEnv     = "CAMPROXY_FAKEGPU"        // "1": act as the tool named by argv[0]
	fakeDataEnv    = "CAMPROXY_FAKEGPU_DATA"   // trainer/testdata/fakegpu, absolute
	fakePythonEnv  = "CAMPROXY_FAKEGPU_PYTHON" // the real python3
	fakeVersionEnv = "CAMPROXY_FAKEGPU_VERL"   // the veRL version python3 -c 'import verl' reports
	fakeLogEnv     = "CAMPROXY_FAKEGPU_LOG"    // a file each stand-in appends its argv to
)

func init() {
	if os.Getenv(fakeGPUEnv) != "1" {
		return
	}
	var err error
	switch tool := filepath.Base(os.Args[0]); tool {
	case "llamafactory-cli":
		err = fakeLlamaFactory(os.Args[1:])
	case "python3":
		err = fakePython(os.Args[1:])
	case "vllm":
		err = fakeVLLM(os.Args[1:])
	default:
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakegpu %s: %v\n", filepath.Base(os.Args[0]), err)
		os.Exit(1)
	}
	os.Exit(0)
}

func fakeLog(argv ...string) {
	if p := os.Getenv(fakeLogEnv); p != "" {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(f, strings.Join(argv, " "))
			f.Close()
		}
	}
}

// fakeList reads one of the lists in trainer/testdata/fakegpu.
func fakeList(name string) (map[string]bool, error) {
	b, err := os.ReadFile(filepath.Join(os.Getenv(fakeDataEnv), name))
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			set[l] = true
		}
	}
	return set, nil
}

// hfDir checks a Hugging Face model directory as transformers' from_pretrained
// would find it: config.json that parses, and a tokenizer with a chat template.
func hfDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("model %q is not an absolute path (and there is no network for a hub id)", dir)
	}
	var cfg struct {
		ModelType string `json:"model_type"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return fmt.Errorf("model %s: %w", dir, err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil || cfg.ModelType == "" {
		return fmt.Errorf("model %s: config.json has no model_type (%v)", dir, err)
	}
	b, err = os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return fmt.Errorf("model %s: %w", dir, err)
	}
	if !gjson.GetBytes(b, "chat_template").Exists() {
		return fmt.Errorf("model %s: tokenizer_config.json has no chat_template", dir)
	}
	return nil
}

// saveHF writes a Hugging Face model as a trainer saves one: config and tokenizer
// from the model it started from, and weights.
func saveHF(from, to string, weights string) error {
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	for _, f := range []string{"config.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(from, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, f), b, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(to, weights), []byte("weights"), 0o644)
}

// fakeLlamaFactory is `llamafactory-cli train X.yaml`, run where run.sh runs it.
func fakeLlamaFactory(args []string) error {
	fakeLog(append([]string{"llamafactory-cli"}, args...)...)
	if len(args) != 1+1 || args[0] != "train" {
		return fmt.Errorf("want train CONFIG.yaml, got %q", args)
	}
	if os.Getenv("FORCE_TORCHRUN") != "1" {
		return fmt.Errorf("FORCE_TORCHRUN is not 1: DeepSpeed would run in one process")
	}
	wd, _ := os.Getwd()
	raw, err := os.ReadFile(args[1])
	if err != nil {
		return err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	keys, err := fakeList("llamafactory-0.9.4.keys")
	if err != nil {
		return err
	}
	for k := range cfg {
		if !keys[k] {
			return fmt.Errorf("%s: HfArgumentParser: unknown key %q", args[1], k)
		}
	}
	templates, err := fakeList("llamafactory-0.9.4.templates")
	if err != nil {
		return err
	}
	if tpl, _ := cfg["template"].(string); !templates[tpl] {
		return fmt.Errorf("template %q is not one of LLaMA-Factory's", cfg["template"])
	}
	if v, ok := cfg["enable_thinking"]; ok {
		if _, isBool := v.(bool); !isBool {
			return fmt.Errorf("enable_thinking %v is not a bool", v)
		}
	}
	if _, err := testkit.CheckLlamaFactory(wd, args[1]); err != nil {
		return err
	}
	model, _ := cfg["model_name_or_path"].(string)
	if err := hfDir(model); err != nil {
		return err
	}
	out, _ := cfg["output_dir"].(string)
	if !filepath.IsAbs(out) {
		return fmt.Errorf("output_dir %q is relative: it lands wherever the tool runs", out)
	}
	fmt.Println("fakegpu llamafactory-cli: trained", cfg["stage"], "on", model, "into", out)
	return saveHF(model, out, "model.safetensors")
}

// fakePython is python3: `-c 'import verl…'`, `-m verl.trainer.main_ppo`, `-m
// verl.model_merger`; anything else goes to the real python3.
func fakePython(args []string) error {
	switch {
	case len(args) >= 2 && args[0] == "-c" && strings.Contains(args[1], "import verl"):
		if strings.Contains(args[1], "__version__") {
			fmt.Println(os.Getenv(fakeVersionEnv))
		}
		return nil
	case len(args) >= 2 && args[0] == "-m" && args[1] == "verl.trainer.main_ppo":
		fakeLog(append([]string{"python3"}, args...)...)
		return fakeMainPPO(args[2:])
	case len(args) >= 2 && args[0] == "-m" && args[1] == "verl.model_merger":
		fakeLog(append([]string{"python3"}, args...)...)
		return fakeMerger(args[2:])
	}
	cmd := exec.Command(os.Getenv(fakePythonEnv), args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			os.Exit(ee.ExitCode())
		}
		return err
	}
	return nil
}

// fakeRow is what RLHFDataset reads of a row (verl/utils/dataset/rl_dataset.py).
type fakeRow struct {
	DataSource string `parquet:"data_source"`
	Prompt     []struct {
		Role    string `parquet:"role"`
		Content string `parquet:"content"`
	} `parquet:"prompt,list"`
	RewardModel struct {
		GroundTruth string `parquet:"ground_truth"`
	} `parquet:"reward_model"`
	ExtraInfo struct {
		Task string `parquet:"task"`
	} `parquet:"extra_info"`
}

// Reward managers by veRL version: 0.6.1 registers naive, batch, dapo and prime
// (verl/workers/reward_manager) and calls the function synchronously; 0.7.0 runs
// the reward loop by default (use_reward_loop: true), whose managers are naive,
// dapo, limited and remote, and awaits an async function.
var fakeManagers = map[string][]string{"0.6": {"naive", "batch", "dapo", "prime"}, "0.7": {"naive", "dapo", "limited", "remote"}}

func fakeMainPPO(args []string) error {
	version := os.Getenv(fakeVersionEnv)
	minor := "0.6"
	if mode, _ := trainer.VerlRewardMode(version); mode == trainer.RewardLoop {
		minor = "0.7"
	}
	keys, err := fakeList("verl-" + map[string]string{"0.6": "0.6.1", "0.7": "0.7.0"}[minor] + ".keys")
	if err != nil {
		return err
	}
	ov := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("override %q is not key=value", a)
		}
		plus := strings.HasPrefix(k, "+")
		k = strings.TrimLeft(k, "+")
		if !plus && !keys[k] {
			return fmt.Errorf("hydra: could not override %q: key not in veRL %s's config (prefix + to add it)", k, version)
		}
		ov[k] = v
	}
	for _, k := range []string{"data.train_files", "data.val_files"} {
		rows, err := parquet.ReadFile[fakeRow](ov[k])
		if err != nil {
			return fmt.Errorf("%s=%s: %w", k, ov[k], err)
		}
		if len(rows) == 0 || len(rows[0].Prompt) == 0 || rows[0].RewardModel.GroundTruth == "" {
			return fmt.Errorf("%s: rows without a prompt or ground_truth", ov[k])
		}
	}
	if ov["data.prompt_key"] != "prompt" {
		return fmt.Errorf("data.prompt_key %q: the rows hold prompt", ov["data.prompt_key"])
	}
	model := ov["actor_rollout_ref.model.path"]
	if err := hfDir(model); err != nil {
		return err
	}
	if kw, ok := ov["data.apply_chat_template_kwargs"]; ok && !regexp.MustCompile(`^\{([a-z_]+:[^,{}]+)(,[a-z_]+:[^,{}]+)*\}$`).MatchString(kw) {
		return fmt.Errorf("data.apply_chat_template_kwargs=%s is not a Hydra dict", kw)
	}
	// The reward function, imported as get_custom_reward_fn imports it and bound to
	// the reward manager's call.
	loop := minor == "0.7" && ov["reward_model.use_reward_loop"] != "False"
	manager := cmpOr(ov["reward_model.reward_manager"], "naive")
	allowed := fakeManagers[minor]
	if !loop {
		allowed = fakeManagers["0.6"]
	}
	if !slices.Contains(allowed, manager) {
		return fmt.Errorf("Unknown reward manager: %s (veRL %s, reward loop %v)", manager, version, loop)
	}
	call := "fn(data_source='camproxy', solution_str='ctx', ground_truth='t1', extra_info={'task': 'x'})"
	if manager == "batch" {
		call = "fn(data_sources=['camproxy'], solution_strs=['ctx'], ground_truths=['t1'], extra_infos=[{'task': 'x'}])"
	}
	py := fmt.Sprintf(`import importlib.util, inspect, sys
spec = importlib.util.spec_from_file_location("custom_module", %q)
m = importlib.util.module_from_spec(spec)
sys.modules["custom_module"] = m
spec.loader.exec_module(m)
fn = getattr(m, %q)
inspect.signature(fn).bind(*[], **eval("dict" + %q[2:]))
if inspect.iscoroutinefunction(fn) and not %s:
    sys.exit("an async reward function: veRL %s without the reward loop would get an un-awaited coroutine")
`, ov["custom_reward_function.path"], ov["custom_reward_function.name"], call, map[bool]string{true: "True", false: "False"}[loop], version)
	if out, err := exec.Command(os.Getenv(fakePythonEnv), "-c", py).CombinedOutput(); err != nil {
		return fmt.Errorf("reward.py: %v: %s", err, out)
	}
	// Train, and save as veRL does: global_step_N/actor sharded, with huggingface/.
	root := ov["trainer.default_local_dir"]
	if !filepath.IsAbs(root) {
		return fmt.Errorf("trainer.default_local_dir %q is relative", root)
	}
	gpus, _ := strconv.Atoi(ov["trainer.n_gpus_per_node"])
	nodes, _ := strconv.Atoi(ov["trainer.nnodes"])
	ws, step := gpus*nodes, 2
	actor := filepath.Join(root, fmt.Sprintf("global_step_%d", step), "actor")
	if err := saveHF(model, filepath.Join(actor, "huggingface"), "generation_config.json"); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(actor, "fsdp_config.json"), fmt.Appendf(nil, `{"FSDP_version": 1, "world_size": %d}`, ws), 0o644); err != nil {
		return err
	}
	for r := range ws {
		if err := os.WriteFile(filepath.Join(actor, fmt.Sprintf("model_world_size_%d_rank_%d.pt", ws, r)), []byte("shard"), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("fakegpu main_ppo: veRL %s, reward manager %s (loop %v), saved %s\n", version, manager, loop, actor)
	return os.WriteFile(filepath.Join(root, "latest_checkpointed_iteration.txt"), []byte(strconv.Itoa(step)), 0o644)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// fakeMerger is `python -m verl.model_merger merge` (verl/model_merger/base_model_merger.py).
func fakeMerger(args []string) error {
	if len(args) == 0 || args[0] != "merge" {
		return fmt.Errorf("want the merge operation, got %q", args)
	}
	f := flag.NewFlagSet("model_merger merge", flag.ContinueOnError)
	backend := f.String("backend", "", "")
	local := f.String("local_dir", "", "")
	target := f.String("target_dir", "tmp", "")
	if err := f.Parse(args[1:]); err != nil {
		return err
	}
	if *backend != "fsdp" && *backend != "megatron" {
		return fmt.Errorf("--backend %q: choose from fsdp, megatron", *backend)
	}
	if err := trainer.CheckActor(*local); err != nil {
		return err
	}
	if err := hfDir(filepath.Join(*local, "huggingface")); err != nil {
		return err
	}
	return saveHF(filepath.Join(*local, "huggingface"), *target, "model.safetensors")
}

// fakeVLLM is `vllm serve MODEL …`: it checks and returns, as a server that
// would start (the test serves the model with testkit's CAM).
func fakeVLLM(args []string) error {
	fakeLog(append([]string{"vllm"}, args...)...)
	if len(args) < 2 || args[0] != "serve" {
		return fmt.Errorf("want serve MODEL, got %q", args)
	}
	if err := hfDir(args[1]); err != nil {
		return err
	}
	if m, _ := filepath.Glob(filepath.Join(args[1], "*.safetensors")); len(m) == 0 {
		return fmt.Errorf("%s has no safetensors weights: a sharded checkpoint?", args[1])
	}
	f := flag.NewFlagSet("vllm serve", flag.ContinueOnError)
	f.String("served-model-name", "", "")
	f.Int("port", 8000, "")
	f.Int("tensor-parallel-size", 1, "")
	kw := f.String("default-chat-template-kwargs", "", "")
	if err := f.Parse(args[2:]); err != nil {
		return err
	}
	if *kw != "" && !gjson.Valid(*kw) || *kw != "" && !gjson.Parse(*kw).IsObject() {
		return fmt.Errorf("--default-chat-template-kwargs %q is not a JSON object", *kw)
	}
	return nil
}

// fakeGPU puts the stand-ins first on PATH for the rest of the test.
func fakeGPU(t *testing.T, verl string) (logPath string) {
	t.Helper()
	realPython, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 to import reward.py with")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for _, tool := range []string{"llamafactory-cli", "python3", "vllm"} {
		if err := os.Symlink(self, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := filepath.Abs(filepath.Join("..", "..", "trainer", "testdata", "fakegpu"))
	logPath = filepath.Join(t.TempDir(), "calls.log")
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(fakeGPUEnv, "1")
	t.Setenv(fakeDataEnv, data)
	t.Setenv(fakePythonEnv, realPython)
	t.Setenv(fakeVersionEnv, verl)
	t.Setenv(fakeLogEnv, logPath)
	return logPath
}

// baseModel is a local Hugging Face model: the chain runs without a network.
func baseModel(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "Qwen3-0.6B")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"config.json":           `{"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}`,
		"tokenizer_config.json": `{"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}"}`,
		"model.safetensors":     "weights",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func writeGuidance(t *testing.T, path string, n int) {
	t.Helper()
	var b bytes.Buffer
	for i := range n {
		rec := trainer.Record{TaskID: fmt.Sprintf("task-%02d", i), TaskDescription: fmt.Sprintf("Change booking %d to a later flight.", i),
			Guidance: "Check the fare class first.", SourceEpisodes: []string{fmt.Sprintf("ep-%d", i)}, Rewards: []float64{1}, Model: "openai/r", PromptVersion: "v1"}
		line, _ := json.Marshal(rec)
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFakeGPUChain runs the documented path end to end on stand-in tools, for each
// veRL version whose reward wiring differs.
func TestFakeGPUChain(t *testing.T) {
	for _, verl := range []string{"0.6.1", "0.7.0"} {
		t.Run("verl-"+verl, func(t *testing.T) { fakeGPUChain(t, verl) })
	}
}

func fakeGPUChain(t *testing.T, verl string) {
	calls := fakeGPU(t, verl)
	dir := t.TempDir()
	cam := testkit.NewCAM()
	defer cam.Close()
	up := testkit.NewUpstream()
	defer up.Close()
	// The serving config training follows: its prompt, and Qwen3 without thinking.
	cfgPath := camConfig(t, dir, cam.URL, up.URL)
	baseCfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	guidance := filepath.Join(dir, "guidance.jsonl")
	writeGuidance(t, guidance, 20)
	base := baseModel(t)
	step := func(args ...string) string {
		t.Helper()
		stdout, stderr, code := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("camproxy %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout, stderr)
		}
		return stdout
	}

	// The stages, each written and launched here; each starts from the last's save.
	sft, dpo, grpo := filepath.Join(dir, "sft"), filepath.Join(dir, "dpo"), filepath.Join(dir, "grpo")
	step("train", "sft", "--data", guidance, "--out", sft, "--config", cfgPath, "--model", base, "--launch", "local")
	sftSave := filepath.Join(sft, "saves", "cam-sft")
	step("train", "dpo", "--from", dpoEvents(t), "--out", dpo, "--config", cfgPath, "--model", sftSave, "--val", "0", "--launch", "local")
	dpoSave := filepath.Join(dpo, "saves", "cam-dpo")
	step("train", "grpo", "--data", guidance, "--out", grpo, "--config", cfgPath, "--model", dpoSave, "--launch", "local")
	// The SFT save is served as trained too: its template read back from sft.yaml.
	if out := step("train", "serve-config", "--model", sftSave, "--name", "cam-sft"); !strings.Contains(out, `--default-chat-template-kwargs '{"enable_thinking":false}'`) {
		t.Errorf("serve-config of the SFT save:\n%s", out)
	}

	merged := filepath.Join(dir, "cam-grpo")
	out := step("train", "merge", "--from", grpo, "--out", merged)
	if !strings.Contains(out, "step 2 of ") {
		t.Errorf("merge: %s", out)
	}
	frag := filepath.Join(dir, "arm.yaml")
	out = step("train", "serve-config", "--model", merged, "--name", "cam-grpo", "--base-url", cam.URL+"/v1", "--config", cfgPath, "--out", frag)
	var vllm string
	for l := range strings.Lines(out) {
		if strings.HasPrefix(l, "vllm serve ") {
			vllm = strings.TrimSpace(l)
		}
	}
	if vllm == "" {
		t.Fatalf("serve-config printed no vllm command:\n%s", out)
	}
	if b, err := exec.Command("bash", "-c", vllm).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", vllm, err, b)
	}
	log, _ := os.ReadFile(calls)
	for _, want := range []string{"llamafactory-cli train sft.yaml", "llamafactory-cli train dpo.yaml", "python3 -m verl.trainer.main_ppo",
		"python3 -m verl.model_merger merge --backend fsdp --local_dir " + filepath.Join(grpo, "checkpoints", "camproxy", "cam-grpo", "global_step_2", "actor"),
		"vllm serve " + merged + " --served-model-name cam-grpo"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("no call %q in:\n%s", want, log)
		}
	}

	// camproxy with the generated arm as its only one: the agent's call gets the
	// new model's context, asked for as trained.
	var fragCfg map[string]any
	if b, err := os.ReadFile(frag); err != nil || yaml.Unmarshal(b, &fragCfg) != nil {
		t.Fatalf("%s: %v", frag, err)
	}
	var full map[string]any
	_ = yaml.Unmarshal(baseCfg, &full)
	full["augmenters"].(map[string]any)["cam-grpo"] = fragCfg["augmenters"].(map[string]any)["cam-grpo"]
	full["experiment"].(map[string]any)["arms"] = fragCfg["experiment"].(map[string]any)["arms"]
	b, _ := yaml.Marshal(full)
	armCfg := filepath.Join(dir, "camproxy-armed.yaml")
	if err := os.WriteFile(armCfg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if sys, _ := capturedCAMPrompt(t, armCfg, cam, "Change booking 3 to a later flight."); !strings.HasPrefix(sys, "You coach airline agents.") {
		t.Fatalf("the CAM's system prompt %q is not the one trained on", sys)
	}
	bodies := cam.Bodies()
	req := gjson.ParseBytes(bodies[0])
	if req.Get("model").String() != "cam-grpo" || req.Get("chat_template_kwargs.enable_thinking").Type != gjson.False ||
		!strings.HasPrefix(req.Get("messages.0.content").String(), "You coach airline agents.") {
		t.Fatalf("the CAM was not asked as trained: %s", bodies[0])
	}
	seen := up.Requests()
	if len(seen) != 1 || !strings.Contains(string(seen[0].Body), "Guidance for: ") {
		t.Fatalf("the agent's call lacks the CAM's context: %+v", seen)
	}
}

// TestFakeGPURefuses: the stand-ins fail where the real tools would, or the chain
// above would prove nothing.
func TestFakeGPURefuses(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "camproxy.yaml")
	if err := os.WriteFile(cfgPath, []byte("augmenters:\n  guide: {type: cam, extra_body: {chat_template_kwargs: {enable_thinking: false}}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	guidance := filepath.Join(dir, "guidance.jsonl")
	writeGuidance(t, guidance, 20)
	base := baseModel(t)
	sft, grpo := filepath.Join(dir, "sft"), filepath.Join(dir, "grpo")
	for _, args := range [][]string{
		{"train", "sft", "--data", guidance, "--out", sft, "--config", cfgPath, "--model", base},
		{"train", "grpo", "--data", guidance, "--out", grpo, "--config", cfgPath, "--model", base},
	} {
		if _, stderr, code := runCLI(t, args...); code != 0 {
			t.Fatalf("%s: %s", args, stderr)
		}
	}
	sftYAML, _ := os.ReadFile(filepath.Join(sft, "sft.yaml"))
	for _, c := range []struct {
		name, verl string
		edit       func(t *testing.T) // of the files, restored after
		argv       []string
		env        []string
		want       string
	}{
		{"an unknown LLaMA-Factory key", "0.7.0", func(t *testing.T) {
			editFile(t, filepath.Join(sft, "sft.yaml"), "learning_rate:", "learning_rat:")
		}, []string{"bash", filepath.Join(sft, "run.sh")}, nil, `unknown key "learning_rat"`},
		{"a relative model path (issue 19.1)", "0.7.0", func(t *testing.T) {
			editFile(t, filepath.Join(sft, "sft.yaml"), `model_name_or_path: "`+base+`"`, `model_name_or_path: "saves/cam-sft"`)
		}, []string{"bash", filepath.Join(sft, "run.sh")}, nil, "not an absolute path"},
		{"an unknown template", "0.7.0", func(t *testing.T) {
			editFile(t, filepath.Join(sft, "sft.yaml"), `template: "qwen3"`, `template: "qwen9"`)
		}, []string{"bash", filepath.Join(sft, "run.sh")}, nil, `template "qwen9"`},
		{"an unknown Hydra key", "0.7.0", nil, []string{"bash", filepath.Join(grpo, "grpo.sh"), "trainer.nonsense=1"}, nil, `could not override "trainer.nonsense"`},
		{"the batch manager on veRL 0.7's reward loop (issue 19.2)", "0.7.0", nil,
			[]string{"bash", filepath.Join(grpo, "grpo.sh"), "reward_model.use_reward_loop=True"}, []string{"CAMPROXY_REWARD_MODE=batch"}, "Unknown reward manager: batch"},
		{"an async reward on veRL 0.6.1 (issue 19.2)", "0.6.1", nil,
			[]string{"bash", filepath.Join(grpo, "grpo.sh")}, []string{"CAMPROXY_REWARD_MODE=loop"}, "un-awaited coroutine"},
		{"a missing parquet file", "0.7.0", func(t *testing.T) {
			moveAside(t, filepath.Join(grpo, "val.parquet"))
		}, []string{"bash", filepath.Join(grpo, "grpo.sh")}, nil, "val.parquet"},
		{"a sharded checkpoint served as it is (issue 19.4)", "0.7.0", nil, []string{"vllm", "serve", grpo}, nil, "config.json"},
		{"a merge of an incomplete step", "0.7.0", nil,
			[]string{"python3", "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", filepath.Join(grpo, "checkpoints"), "--target_dir", filepath.Join(dir, "m")}, nil, "fsdp_config.json"},
		{"vLLM kwargs that are not JSON", "0.7.0", nil, []string{"vllm", "serve", base, "--default-chat-template-kwargs", "{enable_thinking:false}"}, nil, "not a JSON object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fakeGPU(t, c.verl)
			if err := os.WriteFile(filepath.Join(sft, "sft.yaml"), sftYAML, 0o644); err != nil {
				t.Fatal(err)
			}
			if c.edit != nil {
				c.edit(t)
			}
			cmd := exec.Command(c.argv[0], c.argv[1:]...)
			cmd.Env = append(os.Environ(), c.env...)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), c.want) {
				t.Fatalf("%q: %v, want a failure saying %q:\n%s", c.argv, err, c.want, out)
			}
		})
	}
}

func editFile(t *testing.T, p, old, new string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil || !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s lacks %q (%v)", p, old, err)
	}
	if err := os.WriteFile(p, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}

func moveAside(t *testing.T, p string) {
	t.Helper()
	if err := os.Rename(p, p+".aside"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Rename(p+".aside", p) })
}
