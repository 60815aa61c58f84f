package app

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestOpenAIAgents: an @openai/agents agent (clients/node/openai-agents.mjs) with one
// tool, unmodified but for its OpenAI client's base URL, through camproxy's Responses
// route. Run 1 is model → tool → model with the whole history re-sent; run 2 continues
// with previousResponseId (only new items sent) and streams, model → tool → model.
// Four upstream calls, one episode, one CAM call: the context is spliced after the task
// in the two calls that carry the history (the same bytes both times) and in none of
// the calls that continue on the provider's side, so the conversation the provider
// keeps holds it exactly once. The replay buffer has the episode with that one
// context and the whole trajectory.
func TestOpenAIAgents(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	e := newEnv(t, nil)
	out := gjson.ParseBytes(nodeScript(t, "openai-agents.mjs", "CAMPROXY_BASE_URL="+e.base+"/v1",
		"CAMPROXY_TASK="+frameworkTask, "CAMPROXY_FOLLOWUP="+frameworkFollowup, "OPENAI_API_KEY=sk-agents-client"))
	captureSent(t, "openai-agents", out)
	wantCtx := "Guidance for: " + frameworkTask + "\n- check the policy first."

	reqs := e.up.Requests()
	sent := out.Get("sent").Array()
	if len(reqs) != 4 || len(sent) != 4 {
		t.Fatalf("%d upstream calls, %d client calls, want 4: %s", len(reqs), len(sent), out.Raw)
	}
	prev := ""
	for i, r := range reqs {
		if p := out.Get("paths").Array()[i].String(); p != "/v1/responses" || r.Path != "/v1/responses" {
			t.Fatalf("call %d went to %s (upstream %s)", i, p, r.Path)
		}
		if s := out.Get("status").Array()[i].Int(); s != 200 {
			t.Fatalf("call %d: status %d", i, s)
		}
		if r.Header.Get("Authorization") != "Bearer sk-agents-client" || !strings.Contains(r.Header.Get("User-Agent"), "Agents/JavaScript") &&
			!strings.Contains(out.Get("userAgent").String(), "Agents/JavaScript") {
			t.Fatalf("call %d: auth %q user agent %q / %q", i, r.Header.Get("Authorization"), r.Header.Get("User-Agent"), out.Get("userAgent").String())
		}
		body := gjson.ParseBytes(r.Body)
		continued := body.Get("previous_response_id").String()
		n := bytes.Count(r.Body, []byte(jsonText(wantCtx)))
		switch i {
		case 0, 1:
			if continued != "" || body.Get("stream").Bool() {
				t.Fatalf("call %d: previous_response_id %q stream %v", i, continued, body.Get("stream").Bool())
			}
			assertSpliced(t, []byte(sent[i].String()), r.Body, frameworkTask, wantCtx)
		case 2, 3:
			// Run 2 continues run 1's last response, then its own.
			if continued == "" || (i == 3 && continued == prev) || !body.Get("stream").Bool() {
				t.Fatalf("call %d: previous_response_id %q stream %v", i, continued, body.Get("stream").Bool())
			}
			if !bytes.Equal(r.Body, []byte(sent[i].String())) {
				t.Fatalf("call %d: the upstream body differs from the client's:\n got %s\nwant %s", i, r.Body, sent[i].String())
			}
		}
		if want := map[bool]int{true: 1, false: 0}[i < 2]; n != want {
			t.Fatalf("call %d: the context appears %d times", i, n)
		}
		prev = continued
	}
	if got := out.Get("headers").Raw; got != `["miss","episode","episode","episode"]` {
		t.Fatalf("X-CAM-Context per call: %s", got)
	}
	eps := out.Get("episodes").Array()
	for i := range eps {
		if eps[i].String() == "" || eps[i].String() != eps[0].String() {
			t.Fatalf("episodes: %s", out.Get("episodes").Raw)
		}
	}
	if n := e.cam.Calls(); n != 1 {
		t.Fatalf("CAM calls %d", n)
	}
	// The fake answers with the length of the conversation it holds: run 1's three
	// items; then the stored seven (run 1's four, the follow-up, the call, its output).
	if a := out.Get("answers").Array(); len(a) != 2 || a[0].String() != "Done after 3 items." || a[1].String() != "Done after 7 items." {
		t.Fatalf("answers %s", out.Get("answers").Raw)
	}
	if out.Get("streamedText").String() != "Done after 7 items." || out.Get("toolCalls").Int() != 2 {
		t.Fatalf("streamed %q, tool calls %d: %s", out.Get("streamedText").String(), out.Get("toolCalls").Int(), out.Get("events").Raw)
	}

	buf, steps := recordedBuffer(t, e)
	if len(buf.Episodes) != 1 || len(steps) != 4 {
		t.Fatalf("%d episodes, %d steps recorded", len(buf.Episodes), len(steps))
	}
	ep := buf.Episodes[0]
	if ep.ID != eps[0].String() || ep.Context != wantCtx || ep.Task != frameworkTask || ep.Protocol != "openai" || ep.Arm != "cam" || ep.Steps != 4 {
		t.Fatalf("episode %s task %q context %q protocol %q arm %q steps %d", ep.ID, ep.Task, ep.Context, ep.Protocol, ep.Arm, ep.Steps)
	}
	var roles []string
	for _, m := range ep.Messages {
		r := m.Role
		if len(m.ToolCalls) > 0 {
			r += "+call"
		}
		roles = append(roles, r)
	}
	const wantRoles = "system,user,assistant+call,tool,assistant,user,assistant+call,tool,assistant"
	if got := strings.Join(roles, ","); got != wantRoles {
		t.Fatalf("recorded trajectory %s, want %s", got, wantRoles)
	}
	for _, s := range steps {
		if s.Status != 200 || s.Error != "" || s.EpisodeID != ep.ID || s.Response == nil {
			t.Fatalf("step %d: status %d error %q episode %s", s.Turn, s.Status, s.Error, s.EpisodeID)
		}
	}
}
