package trainer

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// ChatTemplateKwargs is the one choice of chat template arguments the CAM is served
// with: the cam augmenter's extra_body.chat_template_kwargs, which vLLM passes to
// the tokenizer's apply_chat_template. Training has to render prompts the same
// way, or the model learns on prompts it never sees: Qwen3's template with
// enable_thinking false ends the prompt with an empty <think></think> block.
// It is carried into
//   - SFT and DPO: LLaMA-Factory's reasoning template ("qwen3") with its
//     enable_thinking, which puts the same empty block at the end of the prompt;
//   - GRPO: veRL's data.apply_chat_template_kwargs (verl/utils/dataset/rl_dataset.py
//     and the agent loop pass it to apply_chat_template).
type ChatTemplateKwargs map[string]any

// Thinking is enable_thinking when it is set to a boolean, else nil (the model's
// template decides; Qwen3's thinks).
func (k ChatTemplateKwargs) Thinking() *bool {
	if b, ok := k["enable_thinking"].(bool); ok {
		return &b
	}
	return nil
}

// String is the kwargs as JSON, keys sorted ({"enable_thinking":false}), or "none".
func (k ChatTemplateKwargs) String() string {
	if len(k) == 0 {
		return "none"
	}
	b, _ := json.Marshal(map[string]any(k))
	return string(b)
}

// Hydra renders the kwargs as a Hydra dict override value, keys sorted:
// {enable_thinking:false}. Only scalars can be carried.
func (k ChatTemplateKwargs) Hydra() (string, error) {
	var parts []string
	for _, key := range slices.Sorted(maps.Keys(k)) {
		var v string
		switch x := k[key].(type) {
		case bool:
			v = strconv.FormatBool(x)
		case int:
			v = strconv.Itoa(x)
		case float64:
			v = strconv.FormatFloat(x, 'g', -1, 64)
		case string:
			v = "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(x) + "'"
		default:
			return "", fmt.Errorf("chat_template_kwargs.%s: a %T cannot be passed to veRL; only strings, numbers and booleans", key, x)
		}
		if !hydraKey(key) {
			return "", fmt.Errorf("chat_template_kwargs: key %q is not an identifier", key)
		}
		parts = append(parts, key+":"+v)
	}
	return "{" + strings.Join(parts, ",") + "}", nil
}

func hydraKey(s string) bool {
	return s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == ""
}

// nothinkTemplate reports a LLaMA-Factory template that renders no think block:
// by LLaMA-Factory's naming, the _nothink variants of reasoning templates.
func nothinkTemplate(name string) bool { return strings.HasSuffix(name, "_nothink") }

// checkTemplate says when the LLaMA-Factory template cannot render the prompt the
// CAM is served with.
func (r Recipe) checkTemplate() string {
	if t := r.Thinking; t != nil && !*t && nothinkTemplate(r.Template) {
		return fmt.Sprintf("template %q renders no think block, but the CAM is served with chat_template_kwargs enable_thinking: false, "+
			"whose prompt ends in an empty <think></think>: use --template %s (camproxy writes enable_thinking: false)",
			r.Template, strings.TrimSuffix(r.Template, "_nothink"))
	}
	return ""
}
