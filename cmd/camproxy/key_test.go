package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"
	"testing"

	cobracli "github.com/camproxy/camproxy/internal/cli"
)

// runStdin runs args with stdin, returning stdout and the exit status.
func runStdin(t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &cli{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, getenv: noEnv}
	err := c.execute(context.Background(), args)
	return out.String(), cobracli.ExitCode(err, io.Discard)
}

// TestKeyFingerprint: the sha256 hex of the key, from the argument or stdin (a
// trailing newline, surrounding spaces and a Bearer scheme dropped); no key is a
// usage error.
func TestKeyFingerprint(t *testing.T) {
	sum := sha256.Sum256([]byte("sk-research"))
	want := hex.EncodeToString(sum[:]) + "\n"
	for _, tt := range []struct {
		name  string
		stdin string
		args  []string
	}{
		{"argument", "", []string{"sk-research"}},
		{"stdin", "sk-research\n", nil},
		{"stdin, spaces", "  sk-research \r\n", nil},
		{"bearer", "", []string{"Bearer sk-research"}},
		{"bearer on stdin", "bearer  sk-research\n", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, code := runStdin(t, tt.stdin, append([]string{"key", "fingerprint"}, tt.args...)...)
			if code != 0 || out != want {
				t.Fatalf("exit %d, printed %q, want %q", code, out, want)
			}
		})
	}
	for _, tt := range []struct {
		stdin string
		args  []string
	}{{"", nil}, {" \n", nil}, {"", []string{"a", "b"}}} {
		if out, code := runStdin(t, tt.stdin, append([]string{"key", "fingerprint"}, tt.args...)...); code != 2 || out != "" {
			t.Errorf("%q %q: exit %d, printed %q; want a usage error", tt.stdin, tt.args, code, out)
		}
	}
}

// gatewayConfig is a gateway of experiments matched by each key, research's by a
// prefix of the fingerprint of sk-research; tasks reads its task from metadata.task.
func gatewayConfig(t *testing.T, withDefault bool) string {
	t.Helper()
	fp, _ := runStdin(t, "sk-research\n", "key", "fingerprint")
	text := `
task: {rules: [{first_user_message: true}]}
experiments:
  - name: support
    match: {agents: [support-bot]}
  - name: research
    match: {key_fingerprints: ["` + strings.ToUpper(fp[:12]) + `"]}
  - name: coding
    match: {models: ["claude-*"], protocols: [anthropic]}
  - name: vertex
    match: {paths: ["/v1beta1/projects/*/locations/*/publishers/google/models/*"]}
  - name: tasks
    match: {task: "(?i)refund"}
    task: {rules: [{json_path: metadata.task}]}
`
	if withDefault {
		text += "  - name: default\n"
	}
	return writeConfig(t, text)
}

// TestTaskExplainExperiment: task explain names the experiment the proxy's matcher
// picks for the call's agent, key, path, protocol, model and task (read by that
// experiment's own rules), or none.
func TestTaskExplainExperiment(t *testing.T) {
	chat := writeBody(t, []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}]}`))
	claude := writeBody(t, []byte(`{"model":"claude-sonnet-4","max_tokens":9,"messages":[{"role":"user","content":"hello"}]}`))
	refund := writeBody(t, []byte(`{"model":"gpt-4o","metadata":{"task":"Refund order 7"},"messages":[{"role":"user","content":"hello"}]}`))
	gemini := writeBody(t, []byte(`{"contents":[{"role":"user","parts":[{"text":"hello"}]}]}`))
	withDefault, noDefault := gatewayConfig(t, true), gatewayConfig(t, false)
	for _, tt := range []struct {
		name       string
		conf       string
		body       string
		flags      []string
		experiment string
		task       string
		protocol   string
	}{
		{"agent", withDefault, chat, []string{"--agent", "support-bot"}, "support", "hello", "openai"},
		{"key", withDefault, chat, []string{"--key", "sk-research"}, "research", "hello", "openai"},
		{"another key", withDefault, chat, []string{"--key", "sk-other"}, "default", "hello", "openai"},
		{"model and protocol", withDefault, claude, []string{"--protocol", "anthropic"}, "coding", "hello", "anthropic"},
		{"model, another protocol", withDefault, claude, nil, "default", "hello", "openai"},
		{"path, its protocol from it", withDefault, gemini, []string{"--path", "/v1beta1/projects/p/locations/l/publishers/google/models/gemini-2.5-pro:generateContent"}, "vertex", "hello", "gemini"},
		{"task by its own rules", withDefault, refund, nil, "tasks", "Refund order 7", "openai"},
		{"first match", withDefault, refund, []string{"--agent", "support-bot"}, "support", "hello", "openai"},
		{"none, no default", noDefault, chat, nil, "", "hello", "openai"},
		{"the one-experiment form", "", chat, nil, "default", "hello", "openai"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			flags := tt.flags
			if tt.conf != "" {
				flags = append(flags, "--config", tt.conf)
			}
			got := explain(t, tt.body, flags...)
			if got.Experiment != tt.experiment || got.Task != tt.task || got.Protocol != tt.protocol {
				t.Errorf("experiment %q task %q protocol %s, want %q %q %s", got.Experiment, got.Task, got.Protocol, tt.experiment, tt.task, tt.protocol)
			}
		})
	}
	out, code := runStdin(t, "", "task", "explain", chat, "--config", noDefault)
	if code != 0 || !strings.Contains(out, "experiment: none takes it and there is no default") {
		t.Errorf("text, no experiment: exit %d\n%s", code, out)
	}
}
