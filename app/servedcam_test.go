package app

import (
	"strings"
	"testing"

	"github.com/camproxy/camproxy/config"
)

// TestServedCAMOf: the named cam augmenter, else the only one, else the built-in
// prompt as "default"; several without a name, a name that is no cam augmenter and
// chat_template_kwargs that are no mapping are refused, saying what to give.
func TestServedCAMOf(t *testing.T) {
	cam := func(prompt string, kwargs any) config.Augmenter {
		a := config.DefaultAugmenter()
		a.Type, a.BaseURL, a.SystemPrompt = config.AugmenterCAM, "http://127.0.0.1:1/v1", prompt
		if kwargs != nil {
			a.ExtraBody = map[string]any{"chat_template_kwargs": kwargs}
		}
		return a
	}
	rag := config.DefaultAugmenter()
	rag.Type = config.AugmenterRAG
	with := func(augs map[string]config.Augmenter) *config.Config {
		c := config.Default()
		c.Augmenters = augs
		return c
	}
	for _, tc := range []struct {
		name, cam string
		cfg       *config.Config
		want      string // the served name
		prompt    string
		thinking  string // Kwargs.Thinking, "" = unset
		err       string
	}{
		{name: "none: the built-in prompt", cfg: with(map[string]config.Augmenter{"rag": rag}), want: "default", prompt: config.DefaultCAMSystemPrompt},
		{name: "the only one", cfg: with(map[string]config.Augmenter{"rag": rag, "cam-a": cam("A", map[string]any{"enable_thinking": false})}),
			want: "cam-a", prompt: "A", thinking: "false"},
		{name: "named", cam: "cam-b", cfg: with(map[string]config.Augmenter{"cam-a": cam("A", nil), "cam-b": cam("B", nil)}), want: "cam-b", prompt: "B"},
		{name: "several", cfg: with(map[string]config.Augmenter{"cam-b": cam("B", nil), "cam-a": cam("A", nil)}),
			err: "several cam augmenters (cam-a, cam-b): choose one with --cam"},
		{name: "not a cam", cam: "rag", cfg: with(map[string]config.Augmenter{"rag": rag}),
			err: `--cam "rag": the config has no cam augmenter of that name (cam augmenters: none)`},
		{name: "kwargs not a mapping", cfg: with(map[string]config.Augmenter{"cam": cam("A", "thinking")}),
			err: "augmenters.cam.extra_body.chat_template_kwargs is a string, want a mapping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := ServedCAMOf(tc.cfg, tc.cam)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			system, _ := sc.CAM.Prompt("a task")
			thinking := ""
			if b := sc.Kwargs.Thinking(); b != nil {
				thinking = map[bool]string{true: "true", false: "false"}[*b]
			}
			if sc.Name != tc.want || system != tc.prompt || thinking != tc.thinking {
				t.Errorf("served %q, prompt %q, thinking %q; want %q %q %q", sc.Name, system, thinking, tc.want, tc.prompt, tc.thinking)
			}
		})
	}
}
