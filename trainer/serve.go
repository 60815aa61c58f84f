package trainer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A trained CAM is served by vLLM and reached by a cam augmenter. Its prompts must
// be rendered as in training: the model directory carries the tokenizer's chat
// template (LLaMA-Factory saves it, veRL's merger copies actor/huggingface), and
// the chat template arguments training used (ChatTemplateKwargs: enable_thinking)
// go both to vLLM (--default-chat-template-kwargs) and into the augmenter's
// extra_body.chat_template_kwargs, which camproxy sends with every request.

// TrainedTemplate reads the chat template arguments a model was trained with: from
// TrainedFile (a merged GRPO checkpoint), else from the LLaMA-Factory YAML whose
// output_dir is the model (an SFT or DPO save, which lives under its stage's
// --out). found is false when no training file names the model.
func TrainedTemplate(model string) (kw ChatTemplateKwargs, source string, found bool, err error) {
	abs, err := filepath.Abs(model)
	if err != nil {
		return nil, "", false, err
	}
	if b, err := os.ReadFile(filepath.Join(abs, TrainedFile)); err == nil {
		var t Trained
		if err := json.Unmarshal(b, &t); err != nil {
			return nil, "", false, fmt.Errorf("%s: %w", filepath.Join(abs, TrainedFile), err)
		}
		return t.ChatTemplate, filepath.Join(abs, TrainedFile), true, nil
	}
	for dir, i := filepath.Dir(abs), 0; i < 4; dir, i = filepath.Dir(dir), i+1 {
		for _, stage := range []string{"dpo", "sft"} {
			p := filepath.Join(dir, stage+".yaml")
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			var cfg struct {
				OutputDir      string `yaml:"output_dir"`
				EnableThinking *bool  `yaml:"enable_thinking"`
			}
			if err := yaml.Unmarshal(b, &cfg); err != nil {
				return nil, "", false, fmt.Errorf("%s: %w", p, err)
			}
			out := cfg.OutputDir
			if !filepath.IsAbs(out) {
				out = filepath.Join(dir, out)
			}
			if filepath.Clean(out) != abs {
				continue
			}
			if cfg.EnableThinking != nil {
				kw = ChatTemplateKwargs{"enable_thinking": *cfg.EnableThinking}
			}
			return kw, p, true, nil
		}
		if dir == filepath.Dir(dir) {
			break
		}
	}
	return nil, "", false, nil
}

// GRPOTemplate reads the chat template arguments grpo.sh passes veRL
// (data.apply_chat_template_kwargs={k:v,…}); none when it passes none.
func GRPOTemplate(grpoDir string) (ChatTemplateKwargs, error) {
	v, ok, err := scriptArg(filepath.Join(grpoDir, "grpo.sh"), "data.apply_chat_template_kwargs=")
	if err != nil || !ok {
		return nil, err
	}
	if !strings.HasPrefix(v, "{") || !strings.HasSuffix(v, "}") {
		return nil, fmt.Errorf("grpo.sh: data.apply_chat_template_kwargs=%s is not a Hydra dict", v)
	}
	return parseHydraDict(v[1 : len(v)-1])
}

// parseHydraDict reads the inside of a flat Hydra dict as ChatTemplateKwargs.Hydra
// writes it: k:v pairs, strings single-quoted.
func parseHydraDict(s string) (ChatTemplateKwargs, error) {
	kw := ChatTemplateKwargs{}
	for s != "" {
		k, rest, ok := strings.Cut(s, ":")
		if !ok {
			return nil, fmt.Errorf("data.apply_chat_template_kwargs: %q is not key:value", s)
		}
		var v string
		if strings.HasPrefix(rest, "'") {
			var b strings.Builder
			i := 1
			for ; i < len(rest) && rest[i] != '\''; i++ {
				if rest[i] == '\\' && i+1 < len(rest) {
					i++
				}
				b.WriteByte(rest[i])
			}
			if i >= len(rest) {
				return nil, fmt.Errorf("data.apply_chat_template_kwargs: unterminated string in %q", rest)
			}
			kw[k], rest = b.String(), rest[i+1:]
			if rest != "" && rest[0] != ',' {
				return nil, fmt.Errorf("data.apply_chat_template_kwargs: %q after a string", rest)
			}
			s = strings.TrimPrefix(rest, ",")
			continue
		}
		v, s, _ = strings.Cut(rest, ",")
		switch {
		case v == "true" || v == "false":
			kw[k] = v == "true"
		default:
			if n, err := strconv.Atoi(v); err == nil {
				kw[k] = n
			} else if f, err := strconv.ParseFloat(v, 64); err == nil {
				kw[k] = f
			} else {
				return nil, fmt.Errorf("data.apply_chat_template_kwargs: value %q", v)
			}
		}
	}
	return kw, nil
}

// scriptArg finds the argument of a generated script that starts with prefix, as
// bash reads it (quotes removed), and returns what follows the prefix.
func scriptArg(path, prefix string) (string, bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSuffix(strings.TrimSpace(line), "\\")
		arg, err := shellUnquote(strings.TrimSpace(line))
		if err != nil {
			continue
		}
		if v, ok := strings.CutPrefix(arg, prefix); ok {
			return v, true, nil
		}
	}
	return "", false, nil
}

// shellUnquote reads one bash word made of plain, '…' and "…" parts.
func shellUnquote(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return "", fmt.Errorf("unterminated '")
			}
			b.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				b.WriteByte(s[i])
			}
			if i >= len(s) {
				return "", fmt.Errorf("unterminated \"")
			}
		case '\\':
			if i+1 < len(s) {
				i++
				b.WriteByte(s[i])
			}
		case ' ', '\t':
			return "", fmt.Errorf("more than one word")
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// ServeOptions describe a trained CAM's serving.
type ServeOptions struct {
	Model        string // the Hugging Face model directory
	Name         string // --served-model-name, the augmenter's model, and its name; "" = cam-<Model's directory name>
	Port         int    // vLLM's port
	BaseURL      string // where camproxy reaches vLLM; "" = http://127.0.0.1:PORT/v1
	TP           int    // --tensor-parallel-size; 0 = vLLM's default
	ChatTemplate ChatTemplateKwargs
	SystemPrompt string // the prompt training rendered (the cam augmenter of --config); "" = the default
	UserTemplate string
	MaxTokens    int
	Arm          string  // the arm's name; "" = Name
	Weight       float64 // the arm's weight
}

// ServedName is Name, else cam- and the model directory's name, lower case.
func (o ServeOptions) ServedName() string {
	if o.Name != "" {
		return o.Name
	}
	return "cam-" + strings.ToLower(filepath.Base(o.Model))
}

// VLLMCommand is the vllm serve command line.
func (o ServeOptions) VLLMCommand() ([]string, error) {
	argv := []string{"vllm", "serve", o.Model, "--served-model-name", o.ServedName(), "--port", strconv.Itoa(o.Port)}
	if o.TP > 0 {
		argv = append(argv, "--tensor-parallel-size", strconv.Itoa(o.TP))
	}
	if len(o.ChatTemplate) > 0 {
		b, err := json.Marshal(o.ChatTemplate) // keys sorted
		if err != nil {
			return nil, err
		}
		argv = append(argv, "--default-chat-template-kwargs", string(b))
	}
	return argv, nil
}

type augmenterYAML struct {
	Type         string         `yaml:"type"`
	BaseURL      string         `yaml:"base_url"`
	Model        string         `yaml:"model"`
	SystemPrompt string         `yaml:"system_prompt,omitempty"`
	UserTemplate string         `yaml:"user_template,omitempty"`
	MaxTokens    int            `yaml:"max_tokens,omitempty"`
	ExtraBody    map[string]any `yaml:"extra_body,omitempty"`
}

type armYAML struct {
	Name      string  `yaml:"name"`
	Weight    float64 `yaml:"weight"`
	Augmenter string  `yaml:"augmenter"`
}

// AugmenterConfig is the camproxy config fragment for the model: a cam augmenter
// named Name, and an arm using it, to merge into augmenters: and experiment.arms.
func (o ServeOptions) AugmenterConfig() ([]byte, error) {
	base := o.BaseURL
	if base == "" {
		base = "http://127.0.0.1:" + strconv.Itoa(o.Port) + "/v1"
	}
	name := o.ServedName()
	a := augmenterYAML{Type: "cam", BaseURL: base, Model: name, SystemPrompt: o.SystemPrompt, UserTemplate: o.UserTemplate, MaxTokens: o.MaxTokens}
	if len(o.ChatTemplate) > 0 {
		a.ExtraBody = map[string]any{"chat_template_kwargs": map[string]any(o.ChatTemplate)}
	}
	arm := o.Arm
	if arm == "" {
		arm = name
	}
	doc := struct {
		Augmenters map[string]augmenterYAML `yaml:"augmenters"`
		Experiment struct {
			Arms []armYAML `yaml:"arms"`
		} `yaml:"experiment"`
	}{Augmenters: map[string]augmenterYAML{name: a}}
	doc.Experiment.Arms = []armYAML{{Name: arm, Weight: o.Weight, Augmenter: name}}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}

// ShellJoin renders argv as one bash command line.
func ShellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}
