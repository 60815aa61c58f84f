package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/replay"
)

// TestSideCallsThroughProxy: Claude Code's captured side calls (its session title
// and /compact summary) and a small-model title call matched by a configured rule
// reach the upstream byte for byte, make no CAM call, open no episode and name the
// session they belong to; an agent turn to the same small model, without tools, is
// still augmented.
func TestSideCallsThroughProxy(t *testing.T) {
	e, an := newAnthropicEnv(t, func(c *config.Config) {
		c.SideCalls.Rules = []config.SideCallRule{{Reason: "title", Model: "*haiku*", Tools: "none",
			Match: `(?i)generate a title`, Quote: `conversation: "(.*)"`}}
	})
	read := func(f string) []byte {
		b, err := os.ReadFile(filepath.Join(harnessDir, f))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// The session: Claude Code's first turn of "List the files in this repository."
	resp, _ := postAnthropic(t, e.base, read("claude-code/first.json"))
	session := resp.Header.Get("X-CAM-Episode-Id")
	if resp.StatusCode != 200 || session == "" || resp.Header.Get("X-CAM-Context") != "miss" || e.cam.Calls() != 1 {
		t.Fatalf("first turn: %d %v, CAM calls %d", resp.StatusCode, resp.Header, e.cam.Calls())
	}
	sides := []struct {
		name, reason string
		body         []byte
	}{
		{"claude-code title", "title", read("claude-code/side-title.json")},
		{"claude-code compact", "compact", read("claude-code/side-compact.json")},
		{"haiku title", "title", []byte(`{"model":"claude-haiku-4-5","max_tokens":50,"messages":[{"role":"user","content":"Generate a title for this conversation: \"List the files in this repository.\""}]}`)},
	}
	for _, s := range sides {
		before := len(an.Requests())
		resp, _ := postAnthropic(t, e.base, s.body)
		h := resp.Header
		if resp.StatusCode != 200 || h.Get("X-CAM-Context") != "side-call" || h.Get("X-CAM-Side-Call") != s.reason || h.Get("X-CAM-Episode-Id") != session {
			t.Errorf("%s: %d, context %q side call %q episode %q (the session is %s)", s.name, resp.StatusCode,
				h.Get("X-CAM-Context"), h.Get("X-CAM-Side-Call"), h.Get("X-CAM-Episode-Id"), session)
		}
		reqs := an.Requests()[before:]
		if len(reqs) != 1 || !bytes.Equal(reqs[0].Body, s.body) {
			t.Errorf("%s: the upstream did not get the body as sent (%d calls)", s.name, len(reqs))
		}
	}
	if n := e.cam.Calls(); n != 1 {
		t.Errorf("CAM calls %d after the side calls, want 1", n)
	}
	// An agent turn to the small model, no tools: augmented.
	turn := []byte(`{"model":"claude-haiku-4-5","max_tokens":1024,"messages":[{"role":"user","content":"Summarise the release notes of v2."}]}`)
	resp, _ = postAnthropic(t, e.base, turn)
	if resp.Header.Get("X-CAM-Context") != "miss" || e.cam.Calls() != 2 {
		t.Errorf("a haiku agent turn: context %q, CAM calls %d", resp.Header.Get("X-CAM-Context"), e.cam.Calls())
	}
	last := an.Requests()[len(an.Requests())-1]
	if !strings.Contains(string(last.Body), jsonText(guidance("Summarise the release notes of v2."))) {
		t.Errorf("the haiku agent turn was not augmented: %s", last.Body)
	}
	if got := testutil.ToFloat64(e.app.Metrics.SideCalls.WithLabelValues("title")); got != 2 {
		t.Errorf("side_calls_total{title} = %v, want 2", got)
	}
	buf, _ := recordedBuffer(t, e)
	if len(buf.Episodes) != 2 || buf.Episodes[0].ID != session || buf.Episodes[0].Steps != 1 {
		logEpisodes(t, buf)
		t.Errorf("%d episodes; want the session with its one turn and the haiku turn's", len(buf.Episodes))
	}
}

// TestClaudeCodeSideCalls: the real Claude Code, interactive, its non-essential
// model calls on, through camproxy: two prompts and a /compact make one episode
// of two turns and one CAM call; its title and compaction calls reach the upstream
// without context.
func TestClaudeCodeSideCalls(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	e, an := newAnthropicEnv(t, nil)
	an.Configure(func(a *testkit.Anthropic) { a.ReplyFn = claudeSideScript })
	c := newClaudeCode(t, e.base)
	s := claudeTUI(t, c, "TZ=Pacific/Kiritimati")
	claudeSideSession(t, s, func() int { return len(modelCalls(an.Requests(), "/v1/messages")) })
	const task = "List the files in this repository."
	kinds := map[string]int{}
	for i, b := range modelCalls(an.Requests(), "/v1/messages") {
		k := sideKind(b)
		kinds[k]++
		n := strings.Count(string(b), jsonText(guidance(task)))
		if want := map[bool]int{true: 1, false: 0}[k == "turn"]; n != want {
			t.Errorf("call %d (%s): the context appears %d times, want %d", i, k, n, want)
		}
	}
	if kinds["title"] != 1 || kinds["compact"] != 1 || kinds["turn"] != 2 {
		t.Errorf("upstream calls by kind %v", kinds)
	}
	if n := e.cam.Calls(); n != 1 {
		t.Errorf("CAM calls %d, want 1 (one task)", n)
	}
	buf, _ := recordedBuffer(t, e)
	if len(buf.Episodes) != 1 || buf.Episodes[0].Task != task || buf.Episodes[0].Steps != 2 {
		logEpisodes(t, buf)
		t.Fatalf("%d episodes, want one of two turns", len(buf.Episodes))
	}
}

// logEpisodes lists the recorded episodes, to tell a failed count.
func logEpisodes(t *testing.T, buf *replay.Buffer) {
	t.Helper()
	for _, ep := range buf.Episodes {
		t.Logf("episode %s task %q steps %d", ep.ID, ep.Task, ep.Steps)
	}
}
