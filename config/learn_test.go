package config

import (
	"slices"
	"strings"
	"testing"
)

// TestLearnValidate: the learn section is checked only when enabled, and each
// problem names its dotted key.
func TestLearnValidate(t *testing.T) {
	const ok = "learn: {enabled: true, model: openai/gpt-4o-mini}\n"
	tests := []struct {
		name, doc string
		keys      []string // every key reported, sorted
		msg       string   // optional substring
	}{
		{"disabled: nothing read", "learn: {every: 0, store: '', model: nope}", nil, ""},
		{"enabled minimal", ok, nil, ""},
		{"model required", "learn: {enabled: true}", []string{"learn.model"}, "openai/NAME"},
		{"both role models replace model", "learn: {enabled: true, reflector_model: openai/a, mutator_model: bedrock/b}", nil, ""},
		{"bad model", "learn: {enabled: true, model: gpt-4o}", []string{"learn.model"}, "openai/NAME or bedrock/MODEL_ID"},
		{"bad role model", "learn: {enabled: true, model: openai/x, mutator_model: vertex/y}", []string{"learn.mutator_model"}, ""},
		{"every", "learn: {enabled: true, model: openai/x, every: 0}", []string{"learn.every"}, ">= 1"},
		{"alpha", "learn: {enabled: true, model: openai/x, promote_alpha: 0.7}", []string{"learn.promote_alpha"}, ""},
		{"candidates", "learn: {enabled: true, model: openai/x, max_candidates: 0}", []string{"learn.max_candidates"}, ""},
		{"candidates over min_share", "experiment: {adaptive: {min_share: 0.2}}\nlearn: {enabled: true, model: openai/x, max_candidates: 4}",
			[]string{"learn.max_candidates"}, "min_share"},
		{"min episodes", "learn: {enabled: true, model: openai/x, min_episodes: 0}", []string{"learn.min_episodes"}, ""},
		{"max trial below min episodes", "learn: {enabled: true, model: openai/x, min_episodes: 30, max_trial: 10}", []string{"learn.max_trial"}, ""},
		{"guidance tasks", "learn: {enabled: true, model: openai/x, guidance_tasks: -1}", []string{"learn.guidance_tasks"}, ""},
		{"store empty", "learn: {enabled: true, model: openai/x, store: ''}", []string{"learn.store"}, "required"},
		{"store scheme", "learn: {enabled: true, model: openai/x, store: 'ftp://x/y'}", []string{"learn.store"}, "scheme"},
		{"store redis with key", "learn: {enabled: true, model: openai/x, store: 'redis://127.0.0.1:6379/0?key=a:b'}", nil, ""},
		{"store redis stream", "learn: {enabled: true, model: openai/x, store: 'redis://127.0.0.1:6379/0?stream=s'}", []string{"learn.store"}, "unexpected option: stream"},
		{"store file host", "learn: {enabled: true, model: openai/x, store: 'file://myhost/pb'}", []string{"learn.store"}, `file URI host "myhost"`},
		{"store s3 without bucket", "learn: {enabled: true, model: openai/x, store: 's3://'}", []string{"learn.store"}, "bucket"},
		{"from", "learn: {enabled: true, model: openai/x, from: 'http://x'}", []string{"learn.from"}, `unknown scheme "http"`},
		{"champion unknown", "learn: {enabled: true, model: openai/x, champion: nope}", []string{"learn.champion"}, "not an arm"},
		{"champion serves a cam", "augmenters: {cam: {type: cam}}\nexperiment: {arms: [{name: baseline, weight: 1, augmenter: none}, {name: c, weight: 1, augmenter: cam}]}\nlearn: {enabled: true, model: openai/x, champion: c}",
			[]string{"learn.champion"}, "cam augmenter"},
		{"learner's arm names reserved", "experiment: {arms: [{name: learn-v2, weight: 1, augmenter: none}]}\nlearn: {enabled: true, model: openai/x}",
			[]string{"experiment.arms[0].name"}, "learner's arms"},
		{"negatives", "learn: {enabled: true, model: openai/x, batch_size: -1, prune: -1, max_entries: -1, top_n: -1, max_turns: 0}",
			[]string{"learn.batch_size", "learn.max_entries", "learn.max_turns", "learn.prune", "learn.top_n"}, ""},
		{"durations", "learn: {enabled: true, model: openai/x, check_every: 0s, lease_ttl: 0s, step_timeout: 0s}",
			[]string{"learn.check_every", "learn.lease_ttl", "learn.step_timeout"}, ""},
		{"base url", "learn: {enabled: true, model: openai/x, base_url: 'localhost:8000'}", []string{"learn.base_url"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), noEnv)
			keys := fieldKeys(err)
			slices.Sort(keys)
			if !slices.Equal(keys, tc.keys) {
				t.Fatalf("keys %v, want %v (error: %v)", keys, tc.keys, err)
			}
			if tc.msg != "" && !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q lacks %q", err, tc.msg)
			}
		})
	}
}

func TestLearnDefaults(t *testing.T) {
	c, err := Parse([]byte("experiment: {arms: [{name: a, weight: 1, augmenter: none}, {name: baseline, weight: 1, augmenter: none}]}\nreplay: {sinks: ['file:///r']}\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.LearnChampion(); got != "baseline" {
		t.Errorf("champion %q, want the control arm baseline", got)
	}
	if got := c.LearnFrom(); got != "file:///r" {
		t.Errorf("from %q, want the first sink", got)
	}
	c.Experiment.Adaptive.Control = "a"
	c.Learn.From = "redis://r:6379/0?stream=s"
	if c.LearnChampion() != "a" || c.LearnFrom() != "redis://r:6379/0?stream=s" {
		t.Errorf("champion %q from %q", c.LearnChampion(), c.LearnFrom())
	}
	r := fullConfig().Redacted()
	if r.Learn.APIKey != mask || strings.Contains(r.Learn.Store, ":pw@") || strings.Contains(r.Learn.From, ":pw@") {
		t.Errorf("learn secrets not masked: %+v", r.Learn)
	}
}
