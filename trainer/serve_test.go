package trainer

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestGRPOTemplateRoundTrip(t *testing.T) {
	for _, kw := range []ChatTemplateKwargs{nil, {"enable_thinking": false}, {"enable_thinking": true, "effort": "lo'w", "n": 3, "t": 0.5}} {
		o := DefaultGRPOOptions()
		o.Out, o.Prompter, o.Model, o.ChatTemplate = t.TempDir(), fixedPrompt{}, hfModel(t), kw
		if _, err := WriteGRPO(kubeExamples(16, 0), o); err != nil {
			t.Fatal(err)
		}
		got, err := GRPOTemplate(o.Out)
		if err != nil || len(kw) == 0 && len(got) != 0 || len(kw) > 0 && !reflect.DeepEqual(got, kw) {
			t.Errorf("kwargs %v read back as %v (%v)", kw, got, err)
		}
	}
}

func TestTrainedTemplate(t *testing.T) {
	no := false
	r := DefaultSFTRecipe()
	r.Thinking = &no
	sft := t.TempDir()
	if _, err := WriteSFT(kubeExamples(4, 0), LFOptions{Out: sft, Prompter: fixedPrompt{}, Recipe: r}); err != nil {
		t.Fatal(err)
	}
	save := filepath.Join(sft, "saves", "cam-sft")
	merged := t.TempDir()
	if err := WriteTrained(merged, Trained{Stage: "grpo", Step: 3, ChatTemplate: ChatTemplateKwargs{"enable_thinking": true}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		model string
		want  ChatTemplateKwargs
		found bool
	}{
		{save, ChatTemplateKwargs{"enable_thinking": false}, true},
		{merged, ChatTemplateKwargs{"enable_thinking": true}, true},
		{t.TempDir(), nil, false},
	} {
		os.MkdirAll(c.model, 0o755)
		kw, src, found, err := TrainedTemplate(c.model)
		if err != nil || found != c.found || !reflect.DeepEqual(kw, c.want) {
			t.Errorf("%s: %v %v (%s, %v), want %v", c.model, kw, found, src, err, c.want)
		}
	}
}

func TestServeOptions(t *testing.T) {
	o := ServeOptions{Model: "/m/cam", Name: "cam-grpo", Port: 8001, TP: 2, ChatTemplate: ChatTemplateKwargs{"enable_thinking": false}, SystemPrompt: "S", UserTemplate: "T {{task}}", Weight: 0.5}
	argv, err := o.VLLMCommand()
	want := []string{"vllm", "serve", "/m/cam", "--served-model-name", "cam-grpo", "--port", "8001", "--tensor-parallel-size", "2", "--default-chat-template-kwargs", `{"enable_thinking":false}`}
	if err != nil || !reflect.DeepEqual(argv, want) {
		t.Fatalf("vllm: %q %v", argv, err)
	}
	if got := ShellJoin(argv[len(argv)-2:]); got != `--default-chat-template-kwargs '{"enable_thinking":false}'` {
		t.Fatalf("shell: %s", got)
	}
	b, err := o.AugmenterConfig()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Augmenters map[string]map[string]any
		Experiment struct{ Arms []map[string]any }
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	a := doc.Augmenters["cam-grpo"]
	if a["type"] != "cam" || a["base_url"] != "http://127.0.0.1:8001/v1" || a["model"] != "cam-grpo" || a["system_prompt"] != "S" ||
		!reflect.DeepEqual(a["extra_body"], map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": false}}) {
		t.Fatalf("augmenter:\n%s", b)
	}
	if len(doc.Experiment.Arms) != 1 || doc.Experiment.Arms[0]["augmenter"] != "cam-grpo" || doc.Experiment.Arms[0]["weight"] != 0.5 {
		t.Fatalf("arm:\n%s", b)
	}
}

// TestServeOptionsName: with no Name, the model is served, reached and armed as cam-
// and its directory's name, lower case.
func TestServeOptionsName(t *testing.T) {
	o := ServeOptions{Model: "/models/Cam-GRPO", Port: 8000, Weight: 1}
	argv, err := o.VLLMCommand()
	if err != nil || argv[4] != "cam-cam-grpo" {
		t.Fatalf("vllm: %q %v", argv, err)
	}
	b, err := o.AugmenterConfig()
	if err != nil || !strings.Contains(string(b), "cam-cam-grpo:") || !strings.Contains(string(b), "augmenter: cam-cam-grpo") || !strings.Contains(string(b), "name: cam-cam-grpo") {
		t.Fatalf("fragment %v:\n%s", err, b)
	}
}
