package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/trainer"
)

// TestTrainMergeAndServeConfig: merge runs veRL's merger on the step asked for and
// records the run's chat template; serve-config prints vLLM's command and a config
// fragment camproxy loads, refusing a template other than the training's.
func TestTrainMergeAndServeConfig(t *testing.T) {
	calls := fakeGPU(t, "0.7.0")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "camproxy.yaml")
	if err := os.WriteFile(cfgPath, []byte("augmenters:\n  guide: {type: cam, system_prompt: \"Coach.\", extra_body: {chat_template_kwargs: {enable_thinking: false}}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	guidance := filepath.Join(dir, "guidance.jsonl")
	writeGuidance(t, guidance, 20)
	grpo := filepath.Join(dir, "grpo")
	if _, stderr, code := runCLI(t, "train", "grpo", "--data", guidance, "--out", grpo, "--config", cfgPath, "--model", baseModel(t), "--launch", "local"); code != 0 {
		t.Fatalf("grpo: %s", stderr)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--from", grpo}, 2, "--out is required"},
		{[]string{}, 2, "2 problems:\n  --from is required\n  --out is required"},
		{[]string{"--from", grpo, "--out", filepath.Join(dir, "x"), "--step", "last"}, 2, `--step "last"`},
		{[]string{"--from", grpo, "--out", dir}, 2, "is not empty"},
		{[]string{"--from", grpo, "--out", filepath.Join(dir, "x"), "--step", "7"}, 1, "no global_step_7"},
		{[]string{"--from", dir, "--out", filepath.Join(dir, "x")}, 1, "neither global_step_N directories nor the grpo.sh"},
	} {
		_, stderr, code := runCLI(t, append([]string{"train", "merge"}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("merge %q: exit %d, %s; want %d saying %q", c.args, code, stderr, c.code, c.want)
		}
	}
	merged := filepath.Join(dir, "merged")
	stdout, stderr, code := runCLI(t, "train", "merge", "--from", grpo, "--step", "2", "--out", merged)
	if code != 0 || !strings.Contains(stdout, "to serve it: camproxy train serve-config --model "+merged) {
		t.Fatalf("merge: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if log, _ := os.ReadFile(calls); !strings.Contains(string(log), "--local_dir "+filepath.Join(grpo, "checkpoints", "camproxy", "cam-grpo", "global_step_2", "actor")+" --target_dir "+merged) {
		t.Fatalf("merger calls:\n%s", log)
	}
	kw, _, found, err := trainer.TrainedTemplate(merged)
	if err != nil || !found || kw["enable_thinking"] != false {
		t.Fatalf("%s records %v %v %v", trainer.TrainedFile, kw, found, err)
	}

	frag := filepath.Join(dir, "arm.yaml")
	stdout, stderr, code = runCLI(t, "train", "serve-config", "--model", merged, "--config", cfgPath, "--out", frag, "--port", "8100")
	wantCmd := "vllm serve " + merged + ` --served-model-name cam-merged --port 8100 --default-chat-template-kwargs '{"enable_thinking":false}'`
	if code != 0 || !strings.Contains(stdout, wantCmd+"\n") {
		t.Fatalf("serve-config: exit %d, want %q in:\n%s\n%s", code, wantCmd, stdout, stderr)
	}
	b, _ := os.ReadFile(frag)
	cfg, err := config.Parse(b, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("the fragment is no camproxy config: %v\n%s", err, b)
	}
	a := cfg.Augmenters["cam-merged"]
	if a.Type != "cam" || a.BaseURL != "http://127.0.0.1:8100/v1" || a.Model != "cam-merged" || a.SystemPrompt != "Coach." ||
		cfg.Experiment.Arms[0].Augmenter != "cam-merged" {
		t.Fatalf("fragment:\n%s", b)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", merged, "--chat-template-kwargs", `{"enable_thinking": true}`}, "differs from the"},
		{[]string{"--model", baseModel(t)}, "give --chat-template-kwargs"},
		{[]string{"--model", filepath.Join(grpo, "checkpoints")}, "config.json"}, // a sharded checkpoint is no model
		{[]string{"--model", merged, "--config", writeCAMConfig(t, dir, "true")}, "sends chat_template_kwargs"},
	} {
		_, stderr, code := runCLI(t, append([]string{"train", "serve-config"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("serve-config %q: exit %d %s, want 2 saying %q", c.args, code, stderr, c.want)
		}
	}
	// Given where no training file says, the kwargs are taken as they are.
	if stdout, stderr, code := runCLI(t, "train", "serve-config", "--model", baseModel(t), "--name", "base", "--chat-template-kwargs", "{}"); code != 0 || strings.Contains(stdout, "--default-chat-template-kwargs") {
		t.Fatalf("--chat-template-kwargs {}: %d %s %s", code, stdout, stderr)
	}
}

func writeCAMConfig(t *testing.T, dir, thinking string) string {
	p := filepath.Join(dir, "thinking-"+thinking+".yaml")
	if err := os.WriteFile(p, []byte("augmenters:\n  g: {type: cam, extra_body: {chat_template_kwargs: {enable_thinking: "+thinking+"}}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTrainStageJobFlags: the Job's image, claims and retries come from the flags.
func TestTrainStageJobFlags(t *testing.T) {
	dir := t.TempDir()
	guidance := filepath.Join(dir, "guidance.jsonl")
	writeGuidance(t, guidance, 20)
	model := baseModel(t)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"sft", "--model", model, "--pvc", "train", "--job-path", "runs/sft", "--model-pvc", "models", "--model-subpath", "qwen3", "--backoff-limit", "0"},
			[]string{"claimName: models", "mountPath: " + model, "subPath: qwen3", "subPath: runs/sft", "backoffLimit: 0", "kind: ConfigMap"}},
		{[]string{"grpo", "--model", model, "--image", "example.com/verl:1", "--pvc", "train", "--model-pvc", "train", "--model-subpath", "sft/saves/cam-sft", "--job-name", "cam-g"},
			[]string{"image: example.com/verl:1", "name: cam-g", "backoffLimit: 2", "nvidia.com/gpu: \"8\""}},
	} {
		out := filepath.Join(dir, c.args[0]+"-out")
		args := append([]string{"train", c.args[0], "--data", guidance, "--out", out}, c.args[1:]...)
		if _, stderr, code := runCLI(t, args...); code != 0 {
			t.Fatalf("%q: %s", args, stderr)
		}
		b, err := os.ReadFile(filepath.Join(out, "job.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range c.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s job.yaml lacks %q", c.args[0], w)
			}
		}
	}
	// A local model without its claim: the stage is written, job.yaml is not, and it says why.
	out := filepath.Join(dir, "dpo-less")
	stdout, stderr, code := runCLI(t, "train", "sft", "--data", guidance, "--out", out, "--model", model)
	if _, err := os.Stat(filepath.Join(out, "job.yaml")); code != 0 || err == nil || !strings.Contains(stdout+stderr, "--model-pvc") {
		t.Fatalf("exit %d, job.yaml %v:\n%s\n%s", code, err, stdout, stderr)
	}
}
