package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const threeExperiments = `
augmenters:
  cam: {type: cam, base_url: "http://127.0.0.1:8000/v1"}
task:
  rules: [{first_user_message: true}]
experiments:
  - name: default
    arms: [{name: baseline, weight: 1, augmenter: none}]
  - name: support
    match: {agents: [support-bot]}
    arms: [{name: baseline, weight: 1, augmenter: none}, {name: cam, weight: 1, augmenter: cam}]
  - name: coding
    match: {models: ["claude-*", "gpt-5*"], protocols: [anthropic, responses]}
    task: {rules: [{last_user_message: true}]}
    arms: [{name: baseline, weight: 1, augmenter: none}, {name: cam, weight: 1, augmenter: cam}]
    learn: {enabled: true, store: "./pb-coding", model: openai/gpt-4o-mini}
  - name: research
    match: {key_fingerprints: ["3f9a1c2e"]}
    sticky: task
    arms: [{name: baseline, weight: 1, augmenter: none}]
`

func TestExperimentsList(t *testing.T) {
	cfg, err := Parse([]byte(threeExperiments), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	views := cfg.PerExperiment()
	if got := cfg.ExperimentNames(); !slices.Equal(got, []string{"support", "coding", "research", "default"}) {
		t.Fatalf("order %v: default must come last, the rest in file order", got)
	}
	support, coding, research, def := views[0], views[1], views[2], views[3]
	// Each entry starts from DefaultExperiment(): keys it omits keep their defaults.
	if support.Experiment.Sticky != StickyEpisode || support.Experiment.Adaptive.UpdatePeriod != 30*time.Second {
		t.Errorf("support did not start from the defaults: %+v", support.Experiment)
	}
	if research.Experiment.Sticky != StickyTask {
		t.Errorf("research sticky = %q", research.Experiment.Sticky)
	}
	// Task rules: its own, else the top-level ones.
	if !coding.Task.Rules[0].LastUserMessage || !support.Task.Rules[0].FirstUserMessage {
		t.Errorf("task rules: coding %+v support %+v", coding.Task.Rules, support.Task.Rules)
	}
	// Learn: its own over DefaultLearn(); none elsewhere.
	if !coding.Learn.Enabled || coding.Learn.Store != "./pb-coding" || coding.Learn.Every != DefaultLearn().Every {
		t.Errorf("coding learn = %+v", coding.Learn)
	}
	if support.Learn.Enabled || def.Learn.Enabled {
		t.Error("a learn given to one experiment reached another")
	}
	if coding.Experiment.Match.Models[0] != "claude-*" || !def.Experiment.Match.Empty() {
		t.Errorf("matches: %+v / %+v", coding.Experiment.Match, def.Experiment.Match)
	}
	// The one-experiment form is its own single view.
	one := Default()
	if v := one.PerExperiment(); len(v) != 1 || v[0] != one {
		t.Errorf("the one-experiment form's views: %v", v)
	}
	// A deep copy: redacting or cloning leaves the original's entries alone.
	cfg.Experiments[2].Learn.APIKey = "sk-learn"
	r := cfg.Redacted()
	if r.Experiments[2].Learn.APIKey != "****" || cfg.Experiments[2].Learn.APIKey != "sk-learn" {
		t.Errorf("redacted %q original %q", r.Experiments[2].Learn.APIKey, cfg.Experiments[2].Learn.APIKey)
	}
}

func TestExperimentsBad(t *testing.T) {
	base := "augmenters: {cam: {type: cam}}\n"
	for _, tc := range []struct{ name, doc, key, msg string }{
		{"both forms", "experiment: {name: x}\nexperiments: [{name: default}]", "experiments", "not both"},
		{"no name", "experiments: [{match: {agents: [a]}}]", "experiments[0].name", "required"},
		{"name not a label", "experiments: [{name: 'Support Bot', match: {agents: [a]}}]", "experiments[0].name", "metric label"},
		{"duplicate name", "experiments: [{name: a, match: {agents: [x]}}, {name: a, match: {agents: [y]}}]", "experiments[1].name", "already"},
		{"shadowing", "experiments: [{name: a}, {name: b, match: {agents: [y]}}]", "experiments[0].match", "takes every call"},
		{"shadowing default", "experiments: [{name: a}, {name: default}]", "experiments[0].match", "takes every call"},
		{"default with match", "experiments: [{name: default, match: {agents: [y]}}]", "experiments[0].match", "remove its match"},
		{"fingerprint", "experiments: [{name: a, match: {key_fingerprints: [sk-abc123]}}]", "experiments[0].match.key_fingerprints[0]", "hex"},
		{"fingerprint short", "experiments: [{name: a, match: {key_fingerprints: [3f9a]}}]", "experiments[0].match.key_fingerprints[0]", "8-64"},
		{"protocol", "experiments: [{name: a, match: {protocols: [claude]}}]", "experiments[0].match.protocols[0]", "anthropic"},
		{"model glob", "experiments: [{name: a, match: {models: ['gpt-[']}}]", "experiments[0].match.models[0]", "glob"},
		{"task regexp", "experiments: [{name: a, match: {task: '(unclosed'}}]", "experiments[0].match.task", "regexp"},
		{"arm augmenter", "experiments: [{name: a, match: {agents: [x]}, arms: [{name: c, weight: 1, augmenter: rag}]}]", "experiments[0].arms[0].augmenter", "not defined"},
		{"task rules", "experiments: [{name: a, match: {agents: [x]}, task: {rules: [{regex: '('}]}}]", "experiments[0].task.rules[0].regex", ""},
		{"learn keys", "experiments: [{name: a, match: {agents: [x]}, learn: {enabled: true, every: 0, model: openai/m}}]", "experiments[0].learn.every", ">= 1"},
		{"shared store", "experiments: [{name: a, match: {agents: [x]}, learn: {enabled: true, model: openai/m}}, {name: b, match: {agents: [y]}, learn: {enabled: true, model: openai/m}}]",
			"experiments[1].learn.store", "experiments[0]'s store"},
		{"shared guidance file", "experiments: [{name: a, match: {agents: [x]}, learn: {enabled: true, model: openai/m, store: ./a, guidance_file: g.jsonl}}, {name: b, match: {agents: [y]}, learn: {enabled: true, model: openai/m, store: ./b, guidance_file: g.jsonl}}]",
			"experiments[1].learn.guidance_file", "experiments[0]'s too"},
		{"top-level learn", "learn: {enabled: true, model: openai/m}\nexperiments: [{name: default}]", "learn.enabled", "each experiment"},
		{"match in the one form", "experiment: {match: {agents: [x]}}", "experiment.match", "experiments entries only"},
		{"unknown match key", "experiments: [{name: a, match: {agent: [x]}}]", "experiments[0].match.agent", "agents"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(base+tc.doc), noEnv)
			if err == nil {
				t.Fatal("accepted")
			}
			if keys := fieldKeys(err); !slices.Contains(keys, tc.key) {
				t.Fatalf("error %q names keys %q, want %q", err, keys, tc.key)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not contain %q", err, tc.msg)
			}
		})
	}
}
