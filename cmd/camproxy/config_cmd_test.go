package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/app"
	"github.com/camproxy/camproxy/config"
	cobracli "github.com/camproxy/camproxy/internal/cli"
)

// fullConfig is the config package's file with every key set, secrets included.
const fullConfig = "../../config/testdata/full.yaml"

// secrets are every secret value in fullConfig and secretsYAML: none may be printed.
var secrets = []string{"sk-openai", "sk-ant", "cam-secret", "emb-secret", "hunter2", "s3cret", ":pw@",
	"sk-live-from-env", "runnerpass", "tok-in-query", "adm1n-token-0123456789", "xyz-in-extra-body", "pa55"}

// secretsYAML hides secrets where Redacted alone does not look: the rollout runner's
// URL, a query parameter, extra_body, and a value that came from the environment.
const secretsYAML = `
upstreams:
  openai: {base_url: "https://api.openai.com", api_key: "${OPENAI_KEY}"}
augmenters:
  cam:
    type: cam
    base_url: "http://cam:8000/v1?api_key=pa55"
    extra_body: {api_key: "xyz-in-extra-body", top_p: 0.9}
experiment:
  arms: [{name: cam, weight: 1, augmenter: cam}]
rollouts:
  runner: "http://harness:runnerpass@harness.internal:7000/run?token=tok-in-query"
admin:
  token: "adm1n-token-0123456789"
`

func runCmd(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	err := run(context.Background(), args, &out, &errb, getenv)
	return cobracli.ExitCode(err, &errb), out.String(), errb.String()
}

func TestConfigCheck(t *testing.T) {
	bad := writeConfig(t, "server:\n  listn: \":1\"\nexperiment:\n  arms: [{name: a, weight: 1, augmenter: nope}]\n")
	withSecrets := writeConfig(t, secretsYAML)
	env := map[string]string{"OPENAI_KEY": "sk-live-from-env"}
	cases := []struct {
		name       string
		args       []string
		env        map[string]string
		code       int
		stdout     []string // each in stdout
		stderr     []string // each in stderr
		quietOut   bool     // nothing on stdout
		noWarnings bool
	}{
		{name: "every key", args: []string{"config", "check", fullConfig}, code: 0,
			stdout: []string{"full.yaml: valid", "api_key: '****'", "redis://:****@redis.internal:6379/1",
				"rediss://camproxy:****@episodes.internal:6380/0", "redis://:****@redis.internal:6379/0?stream=camproxy:replay",
				"model: cam-7b", "open_for: 1m", "ttl: 1h"},
			stderr: []string{"augmenters.rag.guidance_file", "augmenters.ace.file", "serve here would not start"}},
		{name: "secrets everywhere", args: []string{"config", "check", withSecrets}, env: env, code: 0,
			stdout: []string{"http://harness:****@harness.internal:7000/run?token=****", "api_key: '****'", "token: '****'",
				"http://cam:8000/v1?api_key=****", "top_p: 0.9"}, noWarnings: true},
		{name: "$CAMPROXY_CONFIG", args: []string{"config", "check"}, env: map[string]string{"CAMPROXY_CONFIG": fullConfig}, code: 0,
			stdout: []string{"full.yaml: valid"}},
		{name: "built-in defaults", args: []string{"config", "check"}, code: 0,
			stdout: []string{"the built-in defaults: valid", "listen: 127.0.0.1:8080", "shutdown_grace: 30s", "ttl: 24h", "augmenter: none"}, noWarnings: true},
		{name: "quiet", args: []string{"config", "check", "--quiet", withSecrets}, env: env, code: 0, quietOut: true, noWarnings: true},
		{name: "flag after the file", args: []string{"config", "check", withSecrets, "--quiet"}, env: env, code: 0, quietOut: true},
		{name: "unset variable", args: []string{"config", "check", withSecrets}, code: 2, stderr: []string{"OPENAI_KEY is not set"}},
		{name: "bad config names every key", args: []string{"config", "check", bad}, code: 2,
			stderr: []string{"server.listn", "experiment.arms[0].augmenter"}},
		{name: "missing file", args: []string{"config", "check", "/nonexistent/camproxy.yaml"}, code: 2, stderr: []string{"/nonexistent/camproxy.yaml"}},
		{name: "two files", args: []string{"config", "check", bad, bad}, code: 2, stderr: []string{"at most one FILE"}},
		{name: "bad flag", args: []string{"config", "check", "--loud"}, code: 2, stderr: []string{"loud"}},
		{name: "no subcommand", args: []string{"config"}, code: 2, stderr: []string{"config: want a command: check"}},
		{name: "unknown subcommand", args: []string{"config", "lint"}, code: 2, stderr: []string{`unknown command "lint": want check`}},
		{name: "a near miss", args: []string{"config", "chek"}, code: 2, stderr: []string{`did you mean "check"?`}},
		{name: "help", args: []string{"config", "check", "-h"}, code: 0, stdout: []string{"--quiet", "Examples:", "camproxy config check camproxy.yaml"}},
		{name: "help of the group", args: []string{"config", "--help"}, code: 0, stdout: []string{"check", "Validate a config"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runCmd(t, c.env, c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, out, errs)
			}
			for _, w := range c.stdout {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range c.stderr {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errs)
				}
			}
			if c.quietOut && out != "" {
				t.Errorf("--quiet printed:\n%s", out)
			}
			if c.noWarnings && errs != "" {
				t.Errorf("unexpected stderr:\n%s", errs)
			}
			for _, s := range secrets {
				if strings.Contains(out, s) || strings.Contains(errs, s) {
					t.Errorf("secret %q printed:\n%s\n%s", s, out, errs)
				}
			}
		})
	}
}

// TestExamples: every config in examples/ loads and validates, is the setup its name
// promises, points at files that are there, builds a camproxy, and passes
// `camproxy config check` from the repository root without a warning.
func TestExamples(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		arms       []string          // arm names, in order
		augmenters map[string]string // name → type
		adaptive   bool
		check      func(*config.Config) string
	}
	wants := map[string]want{
		"openai-vllm-cam.yaml": {arms: []string{"baseline", "cam"}, augmenters: map[string]string{"cam": "cam"},
			check: func(c *config.Config) string {
				if c.Upstreams["openai"].BaseURL != "https://api.openai.com" || c.Augmenters["cam"].BaseURL != "http://localhost:8000/v1" {
					return "not OpenAI + a local vLLM CAM"
				}
				return ""
			}},
		"bedrock-cam.yaml": {arms: []string{"baseline", "cam"}, augmenters: map[string]string{"cam": "cam"},
			check: func(c *config.Config) string {
				if c.Upstreams["bedrock"].Region != "us-east-1" || c.Upstreams["bedrock"].Endpoint != "" {
					return "not the regional Bedrock endpoint"
				}
				return ""
			}},
		"rag-only.yaml": {arms: []string{"baseline", "rag"}, augmenters: map[string]string{"rag": "rag"},
			check: func(c *config.Config) string {
				if c.Augmenters["rag"].Embeddings.BaseURL != "" {
					return "RAG without a GPU means BM25: no embeddings endpoint"
				}
				return ""
			}},
		"ab-four-arms.yaml": {arms: []string{"baseline", "cam", "rag", "playbook"}, adaptive: true,
			augmenters: map[string]string{"cam": "cam", "rag": "rag", "playbook": "playbook"}},
		"learn-playbook.yaml": {arms: []string{"baseline", "champion"}, augmenters: map[string]string{"playbook": "playbook"},
			check: func(c *config.Config) string {
				if !c.Learn.Enabled || c.LearnChampion() != "champion" || c.Learn.Model != "openai/gpt-4o-mini" || c.Learn.Store != "./camproxy-data/playbook" {
					return "not the learner on the champion arm with an OpenAI optimiser"
				}
				return ""
			}},
	}
	files, _ := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	if len(files) != len(wants) {
		t.Errorf("examples/ holds %d configs, the test knows %d: add the new one here", len(files), len(wants))
	}
	noEnv := func(string) (string, bool) { return "", false }
	for name, w := range wants {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(root, "examples", name)
			cfg, err := config.Load(path, noEnv)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("validate: %v", err)
			}
			var arms []string
			for _, a := range cfg.Experiment.Arms {
				arms = append(arms, a.Name)
				if a.Augmenter != config.AugmenterNone && cfg.Augmenters[a.Augmenter].Type == "" {
					t.Errorf("arm %s uses augmenter %s, which is not defined", a.Name, a.Augmenter)
				}
			}
			if !reflect.DeepEqual(arms, w.arms) || cfg.Experiment.Adaptive.Enabled != w.adaptive {
				t.Errorf("arms %v adaptive %v, want %v %v", arms, cfg.Experiment.Adaptive.Enabled, w.arms, w.adaptive)
			}
			types := map[string]string{}
			for n, a := range cfg.Augmenters {
				types[n] = a.Type
				for _, f := range []string{a.GuidanceFile, a.File} {
					if f != "" {
						if _, err := os.Stat(filepath.Join(root, f)); err != nil {
							t.Errorf("augmenters.%s points at %s, which is not in the repository: %v", n, f, err)
						}
					}
				}
			}
			if !reflect.DeepEqual(types, w.augmenters) {
				t.Errorf("augmenters %v, want %v", types, w.augmenters)
			}
			if w.check != nil {
				if msg := w.check(cfg); msg != "" {
					t.Error(msg)
				}
			}

			// It builds a camproxy: the guidance store and playbook it names load.
			t.Chdir(root)
			dir := t.TempDir()
			cfg.Server.Listen, cfg.Server.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
			cfg.Replay.Sinks, cfg.Replay.SpoolDir = []string{"file://" + dir + "/replay"}, dir+"/spool"
			cfg.Learn.Store = dir + "/playbook"
			a, err := app.New(cfg, app.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatalf("app.New: %v", err)
			}
			if err := a.Start(); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background() // no deadline of its own: a hang meets go test's -timeout
			if err := a.Shutdown(ctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}

			code, out, errs := runCmd(t, nil, "config", "check", filepath.Join("examples", name))
			if code != 0 || errs != "" || !strings.Contains(out, "valid") {
				t.Errorf("config check: exit %d\n%s\n%s", code, out, errs)
			}
		})
	}
}
