package app

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
)

// The coding agents of the compatibility suite (issue 16): OpenAI's Codex CLI and
// Anthropic's Claude Code, the npm releases pinned in clients/node, run
// non-interactively as a user would run them. These helpers start them against a base
// URL (camproxy, or a fake for the captures in protocol/testdata/harness) with their
// home directories in a temp dir, so that no user config, login or history leaks in.

// nodeModule returns the path of a file under clients/node/node_modules, skipping (or
// failing under CAMPROXY_REQUIRE_NODE=1) when the clients are not installed.
func nodeModule(t *testing.T, rel string) string {
	t.Helper()
	dir, _ := filepath.Abs("../clients/node/node_modules")
	p := filepath.Join(dir, rel)
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CAMPROXY_REQUIRE_NODE") == "1" {
			t.Fatalf("%s missing: run `npm ci` in clients/node (make test does)", p)
		}
		t.Skipf("%s missing; `make test` runs npm ci in clients/node", p)
	}
	return p
}

// codexCLI is one Codex installation: its CODEX_HOME (config.toml naming the model
// provider) and a work folder (the repository the agent works in).
type codexCLI struct {
	bin, home, work string
	env             []string
}

// codexProviderTOML points Codex at baseURL as a custom Responses provider: plain
// HTTPS-style SSE (no Responses WebSocket, which a custom provider may not have), no
// retries so that a failure shows at once.
func codexProviderTOML(baseURL string) string {
	return `model_provider = "camproxy"
check_for_update_on_startup = false

[model_providers.camproxy]
name = "camproxy"
base_url = "` + baseURL + `"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
supports_websockets = false
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false
`
}

// codexDocumentedTOML points Codex at baseURL the way its docs tell a user to:
// openai_base_url and the built-in provider, nothing else about the endpoint (the
// update check and analytics are off so that nothing leaves loopback).
func codexDocumentedTOML(baseURL string) string {
	return `openai_base_url = "` + baseURL + `"
check_for_update_on_startup = false

[analytics]
enabled = false
`
}

func newCodexCLI(t *testing.T, baseURL string) *codexCLI {
	t.Helper()
	return newCodexCLIWith(t, codexProviderTOML(baseURL))
}

// newCodexCLIWith is a Codex installation whose CODEX_HOME/config.toml is config.
func newCodexCLIWith(t *testing.T, config string) *codexCLI {
	t.Helper()
	c := &codexCLI{bin: nodeModule(t, "@openai/codex/bin/codex.js")}
	root := t.TempDir()
	c.home, c.work = filepath.Join(root, "codex-home"), filepath.Join(root, "repo")
	for _, d := range []string{c.home, c.work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(c.home, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	// The repository's AGENTS.md: Codex sends it to the model with every task.
	agents := "# Repository guidelines\n\n- Go 1.26; run `go test ./...` before you finish.\n- Keep README.md's tables sorted.\n"
	if err := os.WriteFile(filepath.Join(c.work, "AGENTS.md"), []byte(agents), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.work, "README.md"), []byte("# demo\n\nA demo repository.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.env = []string{"CODEX_HOME=" + c.home, "OPENAI_API_KEY=sk-codex-client", "HOME=" + root, "NO_COLOR=1", "RUST_LOG=error"}
	return c
}

// exec runs `codex exec` with args in the work folder and returns its stdout (the
// agent's last message) and stderr.
func (c *codexCLI) exec(t *testing.T, extraEnv []string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	full := append([]string{c.bin, "exec", "--skip-git-repo-check", "--color", "never"}, args...)
	cmd := exec.CommandContext(ctx, "node", full...)
	cmd.Dir = c.work
	cmd.Env = append(append(os.Environ(), c.env...), extraEnv...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("codex %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

// claudeCode is one Claude Code installation with its own HOME and config dir.
type claudeCode struct {
	wrapper, home, work string
	env                 []string
}

func newClaudeCode(t *testing.T, baseURL string) *claudeCode {
	t.Helper()
	c := &claudeCode{wrapper: nodeModule(t, "@anthropic-ai/claude-code/cli-wrapper.cjs")}
	root := t.TempDir()
	c.home, c.work = filepath.Join(root, "home"), filepath.Join(root, "repo")
	for _, d := range []string{c.home, c.work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(c.work, "CLAUDE.md"), []byte("# Project notes\n\n- Go 1.26; run `go test ./...` before you finish.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.work, "README.md"), []byte("# demo\n\nA demo repository.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.env = []string{
		"HOME=" + c.home, "CLAUDE_CONFIG_DIR=" + filepath.Join(c.home, ".claude"),
		"ANTHROPIC_BASE_URL=" + baseURL, "ANTHROPIC_API_KEY=sk-ant-claude-code-client",
		// Nothing but the model calls: no telemetry, error reports, update checks.
		"DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1", "DISABLE_AUTOUPDATER=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_NON_ESSENTIAL_MODEL_CALLS=1",
		"CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1", "NO_COLOR=1",
	}
	return c
}

// run runs `claude -p PROMPT args...` and returns stdout and stderr.
func (c *claudeCode) run(t *testing.T, extraEnv []string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{c.wrapper}, args...)...)
	cmd.Dir = c.work
	cmd.Env = append(append(os.Environ(), c.env...), extraEnv...)
	cmd.Stdin = strings.NewReader("")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("claude %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

// codingAgentPatch is the patch the scripted model asks Codex to apply.
const codingAgentPatch = "*** Begin Patch\n*** Add File: NOTES.md\n+# Notes\n+\n+Rate limits: 60 requests a minute.\n*** End Patch\n"

// codingAgentExec is the script the scripted model runs through Codex's code-mode exec.
const codingAgentExec = "text(\"two files: AGENTS.md, README.md\")\n"

// codexScript answers Codex: a custom_tool_call of apply_patch to a prompt that asks
// for an edit (when the request offers the tool), text otherwise, and text once a
// tool's output is in.
func codexScript(body gjson.Result, conv []gjson.Result) testkit.Reply {
	// The last item of the conversation proper: on its default model Codex follows the
	// prompt (and a tool's output) with a configuration_update item, which is no turn.
	var lastItem gjson.Result
	for i := len(conv) - 1; i >= 0; i-- {
		if conv[i].Get("type").String() != "configuration_update" {
			lastItem = conv[i]
			break
		}
	}
	switch lastItem.Get("type").String() {
	case "custom_tool_call_output", "function_call_output":
		return testkit.Reply{Content: "Added NOTES.md with the rate limits."}
	}
	last := lastItem.Get("content.0.text").String()
	hasPatch := false
	for _, tl := range body.Get("tools").Array() {
		if tl.Get("type").String() == "custom" && tl.Get("name").String() == "apply_patch" {
			hasPatch = true
		}
	}
	if hasPatch && strings.Contains(last, "NOTES.md") {
		return testkit.Reply{ToolCalls: []testkit.ToolCall{{ID: "call_patch_1", Name: "apply_patch", Arguments: codingAgentPatch, Custom: true}}}
	}
	// Code mode (Codex's default model): one freeform `exec` tool, JavaScript in, offered
	// in an additional_tools item rather than in tools.
	if strings.Contains(last, "with exec") {
		for _, it := range conv {
			if it.Get("type").String() == "additional_tools" && strings.Contains(it.Raw, `"name":"exec"`) {
				return testkit.Reply{ToolCalls: []testkit.ToolCall{{ID: "call_exec_1", Name: "exec", Arguments: codingAgentExec, Custom: true}}}
			}
		}
	}
	return testkit.Reply{Content: "The repository has AGENTS.md and README.md."}
}
