package app

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/internal/testkit"
)

// TestOpenAIResponsesWebSocket: the openai npm package's WebSocket client (ResponsesWS,
// clients/node/openai-responses-ws.mjs), set up only by its base URL, runs a tool loop
// over one socket through camproxy: four response.create events, each continuation
// carrying previous_response_id and only its new items, store false. The upstream is
// the HTTP-only fake, which keeps nothing for store: false: each call reaches it whole
// (no previous_response_id; 1, 3, 5, 7 items) — its answers count the items it got —
// with the context spliced after the task, byte for byte the same every call; one CAM
// call, one episode of four steps, each recorded as a websocket turn.
func TestOpenAIResponsesWebSocket(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	e := newEnv(t, nil)
	e.up.Configure(func(u *testkit.Upstream) { u.RefuseUpgrade = http.StatusMethodNotAllowed })
	out := gjson.ParseBytes(nodeScript(t, "openai-responses-ws.mjs", "CAMPROXY_BASE_URL="+e.base+"/v1",
		"CAMPROXY_TASK="+frameworkTask, "CAMPROXY_FOLLOWUP="+frameworkFollowup, "OPENAI_API_KEY=sk-ws-client"))
	if errs := out.Get("errors").Array(); len(errs) > 0 {
		t.Fatalf("client errors: %s", out.Raw)
	}
	rs := out.Get("responses").Array()
	if len(rs) != 4 || rs[1].Get("text").Str != "Done after 3 items." || rs[3].Get("text").Str != "Done after 7 items." {
		t.Fatalf("responses: %s", out.Raw)
	}
	if types := rs[0].Get("types").Array(); types[0].Str != "response.created" || types[len(types)-1].Str != "response.completed" {
		t.Fatalf("turn 1's events: %s", rs[0].Get("types").Raw)
	}
	wantCtx := "Guidance for: " + frameworkTask + "\n- check the policy first."
	reqs := e.up.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d upstream calls, want 4", len(reqs))
	}
	var first string
	for i, r := range reqs {
		b := gjson.ParseBytes(r.Body)
		in := b.Get("input").Array()
		if r.Path != "/v1/responses" || b.Get("previous_response_id").Exists() || !b.Get("stream").Bool() || len(in) != 2*i+1 {
			t.Fatalf("call %d: %s previous_response_id %v stream %v, %d items; want the whole conversation (%d items) streamed",
				i, r.Path, b.Get("previous_response_id").Exists(), b.Get("stream").Bool(), len(in), 2*i+1)
		}
		if r.Header.Get("Authorization") != "Bearer sk-ws-client" {
			t.Fatalf("call %d: Authorization %q", i, r.Header.Get("Authorization"))
		}
		task := in[0].Get("content").Str
		if i == 0 {
			first = task
		}
		if task != first || !strings.HasPrefix(task, frameworkTask) || !strings.Contains(task, wantCtx) ||
			bytes.Count(r.Body, []byte(jsonText(wantCtx))) != 1 {
			t.Fatalf("call %d: task message %q: want the task with the context once, the same every call", i, task)
		}
	}
	if n := e.cam.Calls(); n != 1 {
		t.Fatalf("CAM calls %d", n)
	}
	if m := e.metric("camproxy_turns_total"); !strings.Contains(m, `camproxy_turns_total{transport="websocket"} 4`) {
		t.Fatalf("turns_total:\n%s", m)
	}
	buf, steps := recordedBuffer(t, e)
	if len(buf.Episodes) != 1 || len(steps) != 4 {
		t.Fatalf("%d episodes, %d steps recorded", len(buf.Episodes), len(steps))
	}
	for _, s := range steps {
		if s.Status != 200 || s.Error != "" || s.EpisodeID != buf.Episodes[0].ID || s.Transport != episode.TransportWebSocket {
			t.Fatalf("step %d: status %d error %q episode %s transport %q", s.Turn, s.Status, s.Error, s.EpisodeID, s.Transport)
		}
	}
}
