package main

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
)

// wsTestConv is a three-turn conversation in tau-bench's chat shape: a tool call, its
// result answered in text, then a follow-up from the user.
func wsTestConv(t *testing.T) *conv {
	t.Helper()
	msgs := [][]byte{
		[]byte(`{"role":"system","content":"You are an airline agent."}`),
		[]byte(`{"role":"user","content":"Change my flight to tomorrow: reservation ABC123."}`),
		[]byte(`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_reservation_details","arguments":"{\"reservation_id\":\"ABC123\"}"}}]}`),
		[]byte(`{"role":"tool","tool_call_id":"call_1","name":"get_reservation_details","content":"{\"flights\":[\"HAT001\"]}"}`),
		[]byte(`{"role":"assistant","content":"Your reservation holds HAT001. Which flight tomorrow?"}`),
		[]byte(`{"role":"user","content":"The morning one."}`),
		[]byte(`{"role":"assistant","content":"Done: you are on the morning flight."}`),
	}
	c, err := newConv(0, msgs, 4)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A conversation becomes Responses turns: the new items of each turn only (the
// answers come from the upstream), the tool result carrying its call's id; a socket
// continuation carries previous_response_id and no history.
func TestToWSConv(t *testing.T) {
	wc := toWSConv(wsTestConv(t))
	if len(wc.turns) != 3 || wc.instr != "You are an airline agent." {
		t.Fatalf("%d turns, instructions %q", len(wc.turns), wc.instr)
	}
	if got := gjson.GetBytes(wc.turns[1].items[0], "call_id").String(); got != "call_1" || len(wc.turns[1].items) != 1 {
		t.Fatalf("turn 2's items %s", wc.turns[1].items)
	}
	if r := wc.turns[0].reply; len(r.ToolCalls) != 1 || r.ToolCalls[0].ID != "call_1" || r.Content != "" {
		t.Fatalf("turn 1's reply %+v", r)
	}
	ev := gjson.ParseBytes(wc.createBody(2, 7, true, "resp_0002", nil))
	if ev.Get("type").Str != "response.create" || ev.Get("previous_response_id").Str != "resp_0002" || ev.Get("stream").Exists() ||
		ev.Get("input.#").Int() != 1 || ev.Get("input.0.content.0.text").Str != "The morning one." || ev.Get("metadata.bench_reply").Str != "0.2" {
		t.Fatalf("socket continuation %s", ev.Raw)
	}
	hist := wc.turns[0].items
	body := gjson.ParseBytes(wc.createBody(1, 7, false, "", hist))
	if !body.Get("stream").Bool() || body.Get("type").Exists() || body.Get("input.#").Int() != 2 {
		t.Fatalf("HTTP turn %s", body.Raw)
	}
}

// The WebSocket row's code path: one session of three turns on every path, on both
// upstreams, completes and is counted — over a socket through camproxy as much as
// over HTTP — and the upstream saw what each mode means: sockets of its own when it
// serves them (direct-ws and camproxy's), only HTTP calls when it refuses the upgrade
// (camproxy's socket turns among them). Timings are not asserted.
func TestWSBench(t *testing.T) {
	cam := testkit.NewCAM()
	defer cam.Close()
	r, err := wsBench([]*conv{wsTestConv(t)}, 1, 0, cam.URL, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Modes) != 2 || r.Turns != 3 {
		t.Fatalf("%d upstreams, %d turns per path", len(r.Modes), r.Turns)
	}
	want := map[string]struct {
		paths          []string
		sockets, calls int
	}{
		"websocket": {[]string{"direct-http", "direct-ws", "camproxy-http", "camproxy-ws"}, 2, 6},
		"http-only": {[]string{"direct-http", "camproxy-http", "camproxy-ws"}, 0, 9},
	}
	for _, m := range r.Modes {
		w := want[m.Upstream]
		if len(m.Paths) != len(w.paths) {
			t.Fatalf("%s: %d paths, want %v", m.Upstream, len(m.Paths), w.paths)
		}
		for i, p := range m.Paths {
			if p.Path != w.paths[i] || p.Sessions != 1 || p.Turns != 3 || p.Errors != 0 || p.P50 <= 0 {
				t.Errorf("%s: path %+v, want %s: 1 session, 3 turns, no error", m.Upstream, p, w.paths[i])
			}
			if (p.Transport == "websocket") != (p.DialP50 > 0) {
				t.Errorf("%s %s: dial %v µs", m.Upstream, p.Path, p.DialP50)
			}
		}
		if m.UpstreamSockets != w.sockets || m.UpstreamCalls != w.calls {
			t.Errorf("%s: upstream saw %d upgrades and %d HTTP calls, want %d and %d", m.Upstream, m.UpstreamSockets, m.UpstreamCalls, w.sockets, w.calls)
		}
	}
}
