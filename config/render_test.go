package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestEffectiveYAMLRoundTrip: what config check prints is the effective config — it
// loads back to exactly the config camproxy runs (with Redacted's masks), with no
// key a strict load refuses. (The secrets only the second pass masks are
// cmd/camproxy's TestConfigCheck's.)
func TestEffectiveYAMLRoundTrip(t *testing.T) {
	examples, _ := filepath.Glob("../examples/*.yaml")
	files := append([]string{"", "experiments", "testdata/full.yaml"}, examples...)
	getenv := func(string) (string, bool) { return "", false }
	for _, f := range files {
		name := filepath.Base(f)
		if f == "" {
			name = "defaults"
		}
		t.Run(name, func(t *testing.T) {
			want := Default()
			switch f {
			case "":
			case "experiments": // the list form: experiment is left out, each entry has its match, task and learn
				lc := DefaultLearn()
				lc.Enabled, lc.Model, lc.Store = true, "openai/m", "/tmp/alpha-store"
				alpha, def := DefaultExperiment(), DefaultExperiment()
				alpha.Name, alpha.Match.Agents, alpha.Learn = "alpha", []string{"alpha-bot"}, &lc
				alpha.Task = &Task{Rules: []TaskRule{{FirstUserMessage: true}}}
				want.Experiments = []Experiment{alpha, def}
			default:
				cfg, err := Load(f, getenv)
				if err != nil {
					t.Fatal(err)
				}
				want = cfg
			}
			// A masked admin token is too short to validate: that one key is left
			// out of the round trip (TestConfigCheck shows it masked).
			want.Admin.Token = ""
			out, err := want.EffectiveYAML()
			if err != nil {
				t.Fatal(err)
			}
			got, err := Parse(out, func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatalf("the printed config does not load: %v\n%s", err, out)
			}
			if red := want.Redacted(); !reflect.DeepEqual(got, red) {
				t.Errorf("printed config loads to\n%+v\nwant\n%+v\n%s", got, red, out)
			}
		})
	}
}

// TestEffectiveYAMLMasks: the second pass masks what Redacted does not look at: a
// key named like a secret in extra_body, a password and a secret query parameter in
// any URL; keys of another augmenter type are left out.
func TestEffectiveYAMLMasks(t *testing.T) {
	c := Default()
	a := DefaultAugmenter()
	a.Type, a.BaseURL = AugmenterCAM, "http://cam:8000/v1?api_key=pa55"
	a.ExtraBody = map[string]any{"api_key": "xyz-in-extra-body", "top_p": 0.9}
	c.Augmenters = map[string]Augmenter{"cam": a}
	c.Rollouts.Runner = "http://harness:runnerpass@harness.internal:7000/run?token=tok-in-query"
	out, err := c.EffectiveYAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"pa55", "xyz-in-extra-body", "runnerpass", "tok-in-query"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("%q printed:\n%s", secret, out)
		}
	}
	for _, want := range []string{"http://harness:****@harness.internal:7000/run?token=****", "http://cam:8000/v1?api_key=****", "top_p: 0.9"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "min_score") || strings.Contains(string(out), "embeddings:") {
		t.Errorf("a cam augmenter printed a rag key:\n%s", out)
	}
}

func TestMissingFiles(t *testing.T) {
	dir := t.TempDir()
	there := filepath.Join(dir, "guidance.jsonl")
	if err := os.WriteFile(there, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c := Default()
	rag, pb, rag2 := DefaultAugmenter(), DefaultAugmenter(), DefaultAugmenter()
	rag.Type, rag.GuidanceFile = AugmenterRAG, there
	pb.Type, pb.File = AugmenterPlaybook, filepath.Join(dir, "none.json")
	rag2.Type, rag2.GuidanceFile = AugmenterRAG, filepath.Join(dir, "none.jsonl")
	c.Augmenters = map[string]Augmenter{"rag": rag, "pb": pb, "b-rag": rag2}
	got := c.MissingFiles()
	if len(got) != 2 || !strings.HasPrefix(got[0], "augmenters.b-rag.guidance_file: ") || !strings.HasPrefix(got[1], "augmenters.pb.file: ") ||
		!strings.Contains(got[1], "serve here would not start") {
		t.Errorf("MissingFiles = %q", got)
	}
}

func TestMaskURL(t *testing.T) {
	cases := []struct{ in, want string }{
		{"https://api.openai.com", "https://api.openai.com"},
		{"not a url at all", "not a url at all"},
		{"redis://:pw@h:6379/0", "redis://:****@h:6379/0"},
		{"redis://:****@h:6379/0", "redis://:****@h:6379/0"},
		{"http://u:p@h/run", "http://u:****@h/run"},
		{"http://u@h/run", "http://u@h/run"},
		// The parameters keep their order (one redactor, redisx.Redact, for logs and
		// this; cmd/camproxy's own masker sorted them).
		{"http://h/x?token=abc&region=eu", "http://h/x?token=****&region=eu"},
		{"s3://b/p?region=eu-west-1&endpoint=http://minio:9000", "s3://b/p?region=eu-west-1&endpoint=http://minio:9000"},
		{"redis://h/0?password=x", "redis://h/0?password=****"},
		// learn.store's key prefix is no secret (the printed config must keep it); an
		// HTTP ?key= (an API key) is.
		{"redis://:pw@h:6379/0?key=camproxy:playbook", "redis://:****@h:6379/0?key=camproxy:playbook"},
		{"rediss://h:6379/0?key=fleet", "rediss://h:6379/0?key=fleet"},
		{"https://h/v1?key=AIzaSecret", "https://h/v1?key=****"},
		{"http://h/x?X-Amz-Signature=abc", "http://h/x?X-Amz-Signature=****"},
		{"Write to ops@example.com, see https://docs/x?token=t", "Write to ops@example.com, see https://docs/x?token=t"},
	}
	for _, c := range cases {
		if got := maskURL(c.in); got != c.want {
			t.Errorf("maskURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestShortDuration(t *testing.T) {
	cases := []struct{ in, want string }{
		{"24h0m0s", "24h"}, {"1h30m0s", "1h30m"}, {"30s", "30s"}, {"10m0s", "10m"}, {"1m30s", "1m30s"},
		{"0s", "0s"}, {"1.5s", "1.5s"}, {"500ms", "500ms"}, {"cam-7b", "cam-7b"}, {"10", "10"}, {"", ""},
	}
	for _, c := range cases {
		if got := shortDuration(c.in); got != c.want {
			t.Errorf("shortDuration(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
