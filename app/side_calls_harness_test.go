package app

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
)

// Side calls (issue 28, item 6) are made by the coding agents only in their
// interactive UIs: `claude -p` and `codex exec` send none (checked: with Claude
// Code's non-essential model calls on, `-p` sends the one agent call). These helpers
// run each agent's interactive terminal UI under tmux, as a user would type into it.

// tui is one agent's terminal UI running in a detached tmux session.
type tui struct {
	t    *testing.T
	name string // tmux session name
}

// startTUI runs argv in dir under tmux with env, skipping (or failing under
// CAMPROXY_REQUIRE_NODE=1) when tmux is missing.
func startTUI(t *testing.T, dir string, env []string, argv ...string) *tui {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("CAMPROXY_REQUIRE_NODE") == "1" {
			t.Fatal("tmux missing: scripts/test-deps.sh installs it")
		}
		t.Skip("tmux missing; scripts/test-deps.sh installs it")
	}
	s := &tui{t: t, name: fmt.Sprintf("camproxy-%d-%d", os.Getpid(), time.Now().UnixNano())}
	// The environment goes through env(1): tmux's own server keeps its environment.
	args := append([]string{"new-session", "-d", "-s", s.name, "-x", "160", "-y", "50", "-c", dir, "env"}, env...)
	args = append(args, argv...)
	if out, err := exec.Command("tmux", args...).CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	pid, _ := exec.Command("tmux", "display-message", "-p", "-t", s.name, "#{pane_pid}").Output()
	// The parent of the test's temp folders (t.TempDir makes each beneath it).
	root := regexp.QuoteMeta(filepath.Dir(t.TempDir()) + string(filepath.Separator))
	t.Cleanup(func() {
		_ = exec.Command("tmux", "kill-session", "-t", s.name).Run()
		// The agent writes its session files as it goes, from children of the pane's
		// process too (Claude Code's wrapper runs its native binary): every process of
		// the pane's session is killed and gone before the temp dirs are removed, and so
		// is every process run from the test's temp folders, which may leave the session
		// (Codex's app-server daemon outlived the test).
		sid := strings.TrimSpace(string(pid))
		for i := 0; i < 200 && sid != ""; i++ {
			out, _ := exec.Command("pgrep", "-s", sid).Output()
			left := append(strings.Fields(string(out)), outliving(root)...)
			if len(left) == 0 {
				break
			}
			for _, p := range left {
				if n, err := strconv.Atoi(p); err == nil {
					_ = syscall.Kill(n, syscall.SIGKILL)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	return s
}

// outliving lists the processes whose command line names a path under root, the
// tmux server excepted: the first new-session forks it with that session's command
// line, and it serves every other test's session.
func outliving(root string) []string {
	out, _ := exec.Command("pgrep", "-f", root).Output()
	var pids []string
	for _, p := range strings.Fields(string(out)) {
		if comm, _ := os.ReadFile("/proc/" + p + "/comm"); !strings.HasPrefix(string(comm), "tmux") {
			pids = append(pids, p)
		}
	}
	return pids
}

// screen is what the terminal shows now.
func (s *tui) screen() string {
	out, _ := exec.Command("tmux", "capture-pane", "-p", "-t", s.name).Output()
	return string(out)
}

// waitFor polls until cond holds (the UI's state is only seen by polling), failing
// with the screen after 60 s.
func (s *tui) waitFor(what string, cond func() bool) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			s.t.Fatalf("waiting for %s; the screen:\n%s", what, s.screen())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// typeLine types text, then Enter as its own key (typed in one go, a TUI may take the
// newline as part of a paste), and waits until sent holds. A TUI under load may still
// count the Enter as part of the typing burst (Codex then inserts a newline), so Enter
// is pressed again every 3 s until sent holds; on an empty composer it does nothing.
func (s *tui) typeLine(text string, sent func() bool) {
	s.t.Helper()
	s.keys("-l", text)
	s.waitFor("the typed text on screen", func() bool { return strings.Contains(s.screen(), text) })
	time.Sleep(300 * time.Millisecond)
	s.keys("Enter")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for tick := 0; !sent(); tick++ {
		select {
		case <-ctx.Done():
			s.t.Fatalf("waiting for %q to be sent; the screen:\n%s", text, s.screen())
		case <-time.After(100 * time.Millisecond):
		}
		if tick%30 == 29 {
			s.keys("Enter")
		}
	}
}

// keys sends tmux send-keys arguments to the session.
func (s *tui) keys(args ...string) {
	s.t.Helper()
	if err := exec.Command("tmux", append([]string{"send-keys", "-t", s.name}, args...)...).Run(); err != nil {
		s.t.Fatal(err)
	}
}

// claudeTUI starts Claude Code's interactive UI in c's work folder against its base
// URL, with its non-essential model calls on (title generation, compaction): no
// DISABLE_NON_ESSENTIAL_MODEL_CALLS, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC or
// CLAUDE_CODE_DISABLE_TERMINAL_TITLE. Its
// config marks onboarding done, the folder trusted and the API key approved, the
// three questions a user answers once.
func claudeTUI(t *testing.T, c *claudeCode, extraEnv ...string) *tui {
	t.Helper()
	const key = "sk-ant-claude-code-client"
	cfg := fmt.Sprintf(`{"hasCompletedOnboarding": true, "theme": "dark",
 "customApiKeyResponses": {"approved": [%q], "rejected": []},
 "projects": {%q: {"hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true}}}`, key[len(key)-20:], c.work)
	dir := filepath.Join(c.home, ".claude")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".claude.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, e := range c.env {
		// Off: the non-essential calls, and the terminal title (Claude Code generates a
		// session title only for a terminal whose title it may set).
		if strings.HasPrefix(e, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=") || strings.HasPrefix(e, "DISABLE_NON_ESSENTIAL_MODEL_CALLS=") ||
			strings.HasPrefix(e, "CLAUDE_CODE_DISABLE_TERMINAL_TITLE=") {
			continue
		}
		env = append(env, e)
	}
	env = append(append(env, "TERM=xterm-256color"), extraEnv...)
	return startTUI(t, c.work, env, "node", c.wrapper)
}

// codexTUI starts Codex's interactive UI in c's work folder, the folder trusted.
func codexTUI(t *testing.T, c *codexCLI, extraEnv ...string) *tui {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(c.home, "config.toml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fmt.Fprintf(f, "\n[projects.%q]\ntrust_level = \"trusted\"\n", c.work)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	env := append(append(append([]string{}, c.env...), "TERM=xterm-256color"), extraEnv...)
	// --no-daemon: the UI runs its app server in process. By default it first installs
	// a background server (a 400 MB copy of itself into CODEX_HOME) and lets a prompt
	// wait "for startup" until that serves: on a loaded CI box past the harness's
	// minute. The model calls are the same, made by the same app-server code.
	return startTUI(t, c.work, env, "node", c.bin, "--no-daemon")
}

// claudeSideScript answers Claude Code's calls: a title call (structured output)
// with its JSON, a compaction with a summary, the agent's turns with text.
func claudeSideScript(body gjson.Result) testkit.Reply {
	if body.Get("output_config.format.schema.properties.title").Exists() {
		return testkit.Reply{Content: `{"title": "List repository files"}`}
	}
	if strings.Contains(body.Get("messages.@reverse.0").Raw, "create a detailed summary of the conversation") {
		return testkit.Reply{Content: "<analysis>Listed the files.</analysis>\n<summary>The user asked for the files; they are CLAUDE.md and README.md.</summary>"}
	}
	return testkit.Reply{Content: "The repository has CLAUDE.md and README.md."}
}

// codexSideScript answers Codex's TUI: its title call with the JSON its schema asks
// for, the rest as codexScript.
func codexSideScript(body gjson.Result, conv []gjson.Result) testkit.Reply {
	if body.Get("text.format.schema.properties.title").Exists() {
		return testkit.Reply{Content: `{"title":"List repository files"}`}
	}
	return codexScript(body, conv)
}

// claudeSideSession drives Claude Code's UI: two prompts, then /compact; it returns
// once the compaction's answer is in (count: the fake's model calls at that point).
func claudeSideSession(t *testing.T, s *tui, calls func() int) {
	t.Helper()
	s.waitFor("the prompt", func() bool { return strings.Contains(s.screen(), "for shortcuts") })
	s.typeLine("List the files in this repository.", func() bool { return calls() >= 1 })
	// The title call races the agent's: both are in once two calls arrived.
	s.waitFor("the first answer and the title", func() bool { return calls() >= 2 && strings.Contains(s.screen(), "CLAUDE.md and README.md") })
	s.typeLine("Now explain what CLAUDE.md asks of contributors.", func() bool { return calls() >= 3 })
	s.waitFor("the second answer", func() bool { return calls() >= 3 })
	s.waitFor("the answer on screen", func() bool { return strings.Count(s.screen(), "CLAUDE.md and README.md") >= 2 })
	s.typeLine("/compact", func() bool { return calls() >= 4 })
	s.waitFor("the compaction", func() bool { return calls() >= 4 && strings.Contains(s.screen(), "Compacted") })
}

// codexSideSession drives Codex's UI: a prompt (Codex titles the thread from it),
// then /compact.
func codexSideSession(t *testing.T, s *tui, calls func() int) {
	t.Helper()
	s.waitFor("the prompt", func() bool { return strings.Contains(s.screen(), "for shortcuts") })
	s.typeLine("List the files in this repository.", func() bool { return calls() >= 1 })
	s.waitFor("the answer and the title", func() bool { return calls() >= 2 && strings.Contains(s.screen(), "AGENTS.md and README.md") })
	s.typeLine("/compact", func() bool { return calls() >= 3 })
	s.waitFor("the compaction", func() bool { return calls() >= 3 && strings.Contains(s.screen(), "compacted") })
}

// sideKind names a captured call of the sessions above: title, compact, or turn.
func sideKind(body []byte) string {
	b := string(body)
	switch {
	case strings.Contains(b, "Generate a concise, sentence-case title"), strings.Contains(b, "Generate a concise, single-line task title"):
		return "title"
	case strings.Contains(b, "create a detailed summary of the conversation so far"), strings.Contains(b, "CONTEXT CHECKPOINT COMPACTION"):
		return "compact"
	}
	return "turn"
}

// captureSideCalls: the side calls of Claude Code's and Codex's interactive UIs,
// as protocol/testdata/harness/*/side-*.json: the session title and the /compact
// summary of each.
func captureSideCalls(t *testing.T) {
	// Both at once, as TestCaptureHarness runs its harnesses.
	var wg sync.WaitGroup
	wg.Go(func() {
		t.Run("claude-code", func(t *testing.T) {
			an := testkit.NewAnthropic()
			defer an.Close()
			an.Configure(func(a *testkit.Anthropic) { a.ReplyFn = claudeSideScript })
			c := newClaudeCode(t, an.URL)
			s := claudeTUI(t, c, "TZ=Pacific/Kiritimati")
			calls := func() int { return len(modelCalls(an.Requests(), "/v1/messages")) }
			claudeSideSession(t, s, calls)
			writeCaptures(t, "claude-code", sideCaptures(t, modelCalls(an.Requests(), "/v1/messages")))
			logHarness(t, "claude-code-tui", an.Requests())
		})
	})
	wg.Go(func() {
		t.Run("codex", func(t *testing.T) {
			up := testkit.NewUpstream()
			defer up.Close()
			up.Configure(func(u *testkit.Upstream) { u.RespondTo = codexSideScript })
			c := newCodexCLI(t, up.URL+"/v1")
			s := codexTUI(t, c, "TZ=Pacific/Kiritimati")
			calls := func() int { return len(modelCalls(up.Requests(), "/v1/responses")) }
			codexSideSession(t, s, calls)
			writeCaptures(t, "codex", sideCaptures(t, modelCalls(up.Requests(), "/v1/responses")))
			logHarness(t, "codex-tui", up.Requests())
		})
	})
	wg.Wait()
}

// sideCaptures names a session's title and compaction calls side-title.json and
// side-compact.json (one of each is expected).
func sideCaptures(t *testing.T, calls [][]byte) []captured {
	t.Helper()
	var caps []captured
	for _, b := range calls {
		if k := sideKind(b); k != "turn" {
			caps = append(caps, captured{"side-" + k + ".json", b})
		}
	}
	if len(caps) != 2 || caps[0].file == caps[1].file {
		t.Fatalf("want one title and one compaction call, got %d side calls of %d", len(caps), len(calls))
	}
	return caps
}
