package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/metrics"
)

// WebSocket mode, server side: a real WebSocket client (fasthttp/websocket's Dialer,
// RFC 6455 frames on loopback TCP) against camproxy on loopback, in front of the
// scripted OpenAI upstream (internal/testkit), which serves POST /v1/responses only —
// the HTTP fallback — with store: false, so that a continuation it received as
// previous_response_id and a few items would be refused (previous_response_not_found).

// wsProxy is camproxy on a loopback listener with a testkit upstream.
type wsProxy struct {
	srv  *Server
	url  string // ws://…/v1/responses
	base string // http://…
	up   *testkit.Upstream
	rec  *turnSink
	aug  *fixedAugmenter
	m    *metrics.Metrics
}

func newWSProxy(t *testing.T, setup ...func(*Options, *Upstream)) *wsProxy {
	t.Helper()
	p := &wsProxy{up: testkit.NewUpstream(), rec: &turnSink{turns: make(chan *episode.Turn, 64)}, aug: &fixedAugmenter{}}
	t.Cleanup(p.up.Close)
	// HTTP-only, as vLLM: it answers the upgrade 405 (detected under websocket: auto),
	// and every turn goes as POST /v1/responses. withUpstreamSocket undoes it.
	p.up.Configure(func(u *testkit.Upstream) { u.RefuseUpgrade = http.StatusMethodNotAllowed })
	o := testOptions(t, p.up.URL+"/v1", p.aug, p.rec)
	o.MaxBodyBytes, o.IdleTimeout, p.m = 1<<20, time.Minute, o.Metrics
	up := o.Upstreams["openai"]
	for _, f := range setup {
		f(&o, up)
	}
	p.srv = New(o)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.srv.Serve(ln) }()
	p.base = "http://" + ln.Addr().String()
	p.url = "ws://" + ln.Addr().String() + "/v1/responses"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.srv.Shutdown(ctx)
	})
	return p
}

// holdStream makes the upstream stop before its second event: streaming is closed
// when it got there, and it goes on once release is closed.
func (p *wsProxy) holdStream() (streaming, release chan struct{}) {
	streaming, release = make(chan struct{}), make(chan struct{})
	p.up.Configure(func(u *testkit.Upstream) {
		u.BeforeChunk = func(i int) {
			if i == 1 {
				close(streaming)
				<-release
			}
		}
	})
	return streaming, release
}

// dial opens a socket as an agent would: Authorization on the upgrade.
func (p *wsProxy) dial(t *testing.T, hdr ...string) *websocket.Conn {
	t.Helper()
	h := http.Header{"Authorization": {"Bearer sk-test"}}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	ws, resp, err := websocket.DefaultDialer.Dial(p.url, h)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial: %v (status %d)", err, status)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return ws
}

// readTurn reads events until one that ends a response, and returns them all.
func readTurn(t *testing.T, ws *websocket.Conn) []gjson.Result {
	t.Helper()
	var evs []gjson.Result
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		mt, msg, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("read after %d events: %v", len(evs), err)
		}
		if mt != websocket.TextMessage {
			t.Fatalf("message type %d, want text", mt)
		}
		ev := gjson.ParseBytes(msg)
		evs = append(evs, ev)
		if terminalEvent(ev.Get("type").Str) {
			return evs
		}
	}
}

func send(t *testing.T, ws *websocket.Conn, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.WriteMessage(websocket.TextMessage, b); err != nil {
		t.Fatal(err)
	}
}

var wsTools = []any{map[string]any{"type": "function", "name": "lookup", "description": "Look a flight up.",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}}}}

const wsTask = "Change my flight to tomorrow: reservation ABC123."

// firstCreate is a session's first response.create: instructions, the task, a tool.
func firstCreate() map[string]any {
	return map[string]any{"type": "response.create", "model": "gpt-5", "store": false, "instructions": "You are an airline agent.",
		"input": []any{map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": wsTask}}}},
		"tools": wsTools}
}

func last(evs []gjson.Result) gjson.Result { return evs[len(evs)-1] }

func nextWSTurn(t *testing.T, p *wsProxy) *episode.Turn {
	t.Helper()
	select {
	case tr := <-p.rec.turns:
		return tr
	case <-time.After(10 * time.Second):
		t.Fatal("no turn recorded")
		return nil
	}
}

// A session of three turns — the task, a tool result continuing the first response,
// a follow-up continuing the second — each continuation sending only its new items
// and previous_response_id, as WebSocket mode defines. The upstream keeps nothing
// (store: false): each call reaches it whole, the continuation expanded from the
// session's items, with the context spliced once and identically, one CAM call, one
// episode, three turns recorded as websocket.
func TestWebSocketSession(t *testing.T) {
	p := newWSProxy(t)
	ws := p.dial(t)

	send(t, ws, firstCreate())
	evs := readTurn(t, ws)
	done := last(evs)
	if done.Get("type").Str != "response.completed" {
		t.Fatalf("turn 1 ended with %s", done.Raw)
	}
	if evs[0].Get("type").Str != "response.created" {
		t.Fatalf("turn 1's first event is %s, want response.created", evs[0].Raw)
	}
	id1 := done.Get("response.id").Str
	call := done.Get(`response.output.#(type=="function_call")`)
	if call.Get("call_id").Str == "" {
		t.Fatalf("turn 1 made no function call: %s", done.Raw)
	}

	send(t, ws, map[string]any{"type": "response.create", "model": "gpt-5", "store": false, "instructions": "You are an airline agent.",
		"previous_response_id": id1, "tools": wsTools,
		"input": []any{map[string]any{"type": "function_call_output", "call_id": call.Get("call_id").Str, "output": `{"status":"on time"}`}}})
	done2 := last(readTurn(t, ws))
	if done2.Get("type").Str != "response.completed" {
		t.Fatalf("turn 2 ended with %s", done2.Raw)
	}
	send(t, ws, map[string]any{"type": "response.create", "model": "gpt-5", "store": false, "instructions": "You are an airline agent.",
		"previous_response_id": done2.Get("response.id").Str, "tools": wsTools, "input": "Thanks. And the seat?"})
	if done3 := last(readTurn(t, ws)); done3.Get("type").Str != "response.completed" {
		t.Fatalf("turn 3 ended with %s", done3.Raw)
	}

	reqs := p.up.Requests()
	if len(reqs) != 3 {
		t.Fatalf("upstream saw %d calls, want 3", len(reqs))
	}
	var firstUser string
	for i, r := range reqs {
		b := gjson.ParseBytes(r.Body)
		if r.Method != http.MethodPost || r.Path != "/v1/responses" {
			t.Errorf("call %d: %s %s, want POST /v1/responses", i, r.Method, r.Path)
		}
		if !b.Get("stream").Bool() || b.Get("type").Exists() || b.Get("previous_response_id").Exists() {
			t.Errorf("call %d: body %s: want stream true, no type, no previous_response_id", i, r.Body)
		}
		if got := r.Header.Get("Authorization"); got != "Bearer sk-test" {
			t.Errorf("call %d: Authorization %q, want the upgrade's", i, got)
		}
		if r.Header.Get("Sec-Websocket-Key") != "" || r.Header.Get("Upgrade") != "" {
			t.Errorf("call %d: the upgrade's own headers went upstream: %v", i, r.Header)
		}
		user := b.Get("input.0.content.0.text").Str
		if i == 0 {
			firstUser = user
		}
		if !strings.Contains(user, camContext) || user != firstUser {
			t.Errorf("call %d: first user message %q, want the task with the context, identical every turn", i, user)
		}
	}
	in2 := gjson.GetBytes(reqs[1].Body, "input").Array()
	if len(in2) != 3 || in2[1].Get("type").Str != "function_call" || in2[2].Get("type").Str != "function_call_output" {
		t.Errorf("call 2's input is not the whole conversation (task, call, output): %s", gjson.GetBytes(reqs[1].Body, "input").Raw)
	}
	in3 := gjson.GetBytes(reqs[2].Body, "input").Array()
	if n := len(in3); n < 5 || in3[n-1].Get("content").Str != "Thanks. And the seat?" {
		t.Errorf("call 3's input does not end the whole conversation with the follow-up: %s", gjson.GetBytes(reqs[2].Body, "input").Raw)
	}
	checkSessionRecorded(t, p)
	if got := testutil.ToFloat64(p.m.Turns.WithLabelValues("websocket")); got != 3 {
		t.Errorf("turns_total{transport=websocket} = %v, want 3", got)
	}
	if got := testutil.ToFloat64(p.m.Sockets); got != 1 {
		t.Errorf("websocket_sessions = %v, want 1", got)
	}
}

// A continuation of a response the session does not know gets OpenAI's
// previous_response_not_found error event, and the socket stays usable.
func TestWebSocketUnknownPrevious(t *testing.T) {
	p := newWSProxy(t)
	ws := p.dial(t)
	send(t, ws, map[string]any{"type": "response.create", "model": "gpt-5", "previous_response_id": "resp_elsewhere", "input": "hi"})
	ev := last(readTurn(t, ws))
	if ev.Get("type").Str != "error" || ev.Get("status").Int() != 400 || ev.Get("error.code").Str != "previous_response_not_found" ||
		ev.Get("error.param").Str != "previous_response_id" {
		t.Fatalf("got %s, want a 400 previous_response_not_found error event", ev.Raw)
	}
	if n := len(p.up.Requests()); n != 0 {
		t.Fatalf("upstream saw %d calls", n)
	}
	send(t, ws, firstCreate())
	if ev := last(readTurn(t, ws)); ev.Get("type").Str != "response.completed" {
		t.Fatalf("the next turn ended with %s", ev.Raw)
	}
}

// An upgrade to a route camproxy serves no WebSocket on is a 426 in the route's error
// shape (the client falls back to HTTP at once); a plain GET /v1/responses is still
// the 405 it was.
func TestWebSocketUpgradeRequired(t *testing.T) {
	p := newWSProxy(t)
	for _, path := range []string{"/v1/chat/completions", "/v1/realtime", "/v1/models"} {
		_, resp, err := websocket.DefaultDialer.Dial(strings.Replace(p.url, "/v1/responses", path, 1), nil)
		if err == nil || resp == nil {
			t.Fatalf("%s: upgraded (err %v)", path, err)
		}
		var body struct {
			Error struct{ Message, Type string }
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUpgradeRequired || body.Error.Message == "" {
			t.Errorf("%s: %d %+v, want 426 with an OpenAI error", path, resp.StatusCode, body)
		}
	}
	resp, err := http.Get(p.base + "/v1/responses")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/responses without upgrade: %d, want 405", resp.StatusCode)
	}
}

// closeCode is the code of the close frame err reports, -1 for none.
func closeCode(err error) int {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return -1
}

// Faults as WebSocket mode defines them: each failed turn is an error event in
// OpenAI's shape (never a silent close), and the socket takes the next turn.
func TestWebSocketFaults(t *testing.T) {
	cases := []struct {
		name   string
		setup  func(*Options, *Upstream)
		script func(*testkit.Upstream)
		hdr    []string
		status int
		typ    string // error.type
		events int    // events relayed before the error event, at least
	}{
		{name: "upstream 500", status: 500, typ: "invalid_request_error",
			script: func(u *testkit.Upstream) {
				u.RespondTo = func(gjson.Result, []gjson.Result) testkit.Reply {
					return testkit.Reply{Status: 500, ErrorMsg: "The server had an error while processing your request."}
				}
			}},
		{name: "upstream 429", status: 429, typ: "invalid_request_error",
			script: func(u *testkit.Upstream) {
				u.RespondTo = func(gjson.Result, []gjson.Result) testkit.Reply {
					return testkit.Reply{Status: 429, ErrorMsg: "Rate limit reached."}
				}
			}},
		{name: "silent past first_byte_timeout", status: 504, typ: "upstream_timeout",
			setup:  func(_ *Options, up *Upstream) { up.FirstByteTimeout = 200 * time.Millisecond },
			script: func(u *testkit.Upstream) { u.Delay = 30 * time.Second }},
		{name: "stall mid-turn past idle_timeout", status: 504, typ: "upstream_error", events: 2,
			setup:  func(_ *Options, up *Upstream) { up.IdleTimeout = 200 * time.Millisecond },
			script: func(u *testkit.Upstream) { u.HangAfter = 2 }},
		{name: "stream cut mid-turn", status: 502, typ: "upstream_error", events: 2,
			script: func(u *testkit.Upstream) { u.ResetAfter = 2 }},
		{name: "camproxy refuses an unknown arm", status: 400, typ: "invalid_request_error", hdr: []string{hdrArm, "nope"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var setup []func(*Options, *Upstream)
			if tc.setup != nil {
				setup = append(setup, tc.setup)
			}
			p := newWSProxy(t, setup...)
			if tc.script != nil {
				p.up.Configure(tc.script)
			}
			ws := p.dial(t, tc.hdr...)
			send(t, ws, firstCreate())
			evs := readTurn(t, ws)
			ev := last(evs)
			if ev.Get("type").Str != "error" || int(ev.Get("status").Int()) != tc.status || ev.Get("error.type").Str != tc.typ ||
				ev.Get("error.message").Str == "" {
				t.Fatalf("got %s, want an error event of status %d, type %s", ev.Raw, tc.status, tc.typ)
			}
			if len(evs)-1 < tc.events {
				t.Errorf("%d events before the error, want %d", len(evs)-1, tc.events)
			}
			// The socket goes on: the next turn is served.
			p.up.Configure(func(u *testkit.Upstream) { u.RespondTo, u.Delay, u.HangAfter, u.ResetAfter = nil, 0, 0, 0 })
			if tc.hdr == nil {
				send(t, ws, firstCreate())
				if ev := last(readTurn(t, ws)); ev.Get("type").Str != "response.completed" {
					t.Fatalf("the turn after the fault ended with %s", ev.Raw)
				}
			}
		})
	}
}

// A client that closes its socket mid-turn cancels the upstream call: the upstream
// sees its request end, and the turn is recorded as 499, not as an upstream error.
func TestWebSocketClientGoneMidTurn(t *testing.T) {
	p := newWSProxy(t)
	p.up.Configure(func(u *testkit.Upstream) { u.Delay = 30 * time.Second })
	ws := p.dial(t)
	send(t, ws, firstCreate())
	for len(p.up.Requests()) == 0 {
		time.Sleep(5 * time.Millisecond) // the call reached the upstream
	}
	_ = ws.Close()
	select {
	case <-p.up.Cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream call was not cancelled")
	}
	tr := nextWSTurn(t, p)
	if tr.Status != 499 || tr.Transport != episode.TransportWebSocket {
		t.Errorf("turn recorded with status %d transport %q, want 499 websocket", tr.Status, tr.Transport)
	}
}

// A message over server.max_body_bytes closes the socket with 1009 (Message Too Big).
func TestWebSocketOversizedMessage(t *testing.T) {
	p := newWSProxy(t, func(o *Options, _ *Upstream) { o.MaxBodyBytes = 4 << 10 })
	ws := p.dial(t)
	big := firstCreate()
	big["input"] = strings.Repeat("x", 8<<10)
	send(t, ws, big)
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, msg, err := ws.ReadMessage()
	if code := closeCode(err); code != websocket.CloseMessageTooBig {
		t.Fatalf("read %q, %v: want close 1009", msg, err)
	}
	if n := len(p.up.Requests()); n != 0 {
		t.Errorf("upstream saw %d calls", n)
	}
}

// A socket with no turn for server.idle_timeout is closed with 1000 and a reason.
func TestWebSocketIdleClosed(t *testing.T) {
	p := newWSProxy(t, func(o *Options, _ *Upstream) { o.IdleTimeout = 200 * time.Millisecond })
	ws := p.dial(t)
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err := ws.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseNormalClosure || ce.Text != reasonIdle {
		t.Fatalf("read: %v, want close 1000 %q", err, reasonIdle)
	}
}

// Shutdown mid-turn lets the turn finish — the client reads its response.completed —
// and then closes the socket with 1001.
func TestWebSocketShutdownMidTurn(t *testing.T) {
	p := newWSProxy(t)
	streaming, release := p.holdStream()
	ws := p.dial(t)
	send(t, ws, firstCreate())
	<-streaming
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shut <- p.srv.Shutdown(ctx)
	}()
	for !p.srv.sockets.draining.Load() {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	if ev := last(readTurn(t, ws)); ev.Get("type").Str != "response.completed" {
		t.Fatalf("the turn in flight ended with %s", ev.Raw)
	}
	_, _, err := ws.ReadMessage()
	if code := closeCode(err); code != websocket.CloseGoingAway {
		t.Fatalf("after the turn: %v, want close 1001", err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if tr := nextWSTurn(t, p); tr.Status != 200 || tr.Error != "" {
		t.Errorf("the drained turn was recorded with status %d error %q", tr.Status, tr.Error)
	}
}

// One turn at a time: a response.create while one is streaming gets
// response_already_in_flight, and the turn in flight goes on.
func TestWebSocketOneTurnAtATime(t *testing.T) {
	p := newWSProxy(t)
	streaming, release := p.holdStream()
	ws := p.dial(t)
	send(t, ws, firstCreate())
	<-streaming
	send(t, ws, firstCreate())
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, msg, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if ev := gjson.ParseBytes(msg); ev.Get("type").Str == "error" {
			if ev.Get("error.code").Str != "response_already_in_flight" {
				t.Fatalf("got %s", msg)
			}
			break
		}
	}
	close(release)
	if ev := last(readTurn(t, ws)); ev.Get("type").Str != "response.completed" {
		t.Fatalf("the turn in flight ended with %s", ev.Raw)
	}
	if n := len(p.up.Requests()); n != 1 {
		t.Errorf("upstream saw %d calls, want 1", n)
	}
}

// A warm-up (response.create with "generate": false, as Codex opens every socket) is
// answered by camproxy when the upstream serves no WebSocket mode: a response id and
// no output, the upstream not called, nothing recorded; the turn continuing it goes
// upstream whole, without previous_response_id.
func TestWebSocketWarmup(t *testing.T) {
	p := newWSProxy(t)
	ws := p.dial(t)
	send(t, ws, map[string]any{"type": "response.create", "model": "gpt-5", "store": false, "generate": false, "input": []any{}, "tools": wsTools})
	evs := readTurn(t, ws)
	done := last(evs)
	if len(evs) != 2 || evs[0].Get("type").Str != "response.created" || done.Get("type").Str != "response.completed" ||
		done.Get("response.id").Str == "" || len(done.Get("response.output").Array()) != 0 {
		t.Fatalf("warm-up answered %v", evs)
	}
	if n := len(p.up.Requests()); n != 0 {
		t.Fatalf("the warm-up reached the upstream (%d calls)", n)
	}
	turn := firstCreate()
	turn["previous_response_id"] = done.Get("response.id").Str
	send(t, ws, turn)
	if ev := last(readTurn(t, ws)); ev.Get("type").Str != "response.completed" {
		t.Fatalf("the turn after the warm-up ended with %s", ev.Raw)
	}
	reqs := p.up.Requests()
	if len(reqs) != 1 || gjson.GetBytes(reqs[0].Body, "previous_response_id").Exists() || len(gjson.GetBytes(reqs[0].Body, "input").Array()) != 1 {
		t.Fatalf("upstream calls %d, first %s", len(reqs), reqs[0].Body)
	}
	if tr := nextWSTurn(t, p); tr.Index != 0 || !tr.NewEpisode || p.aug.calls.Load() != 1 {
		t.Fatalf("the first recorded turn is index %d new %v (CAM calls %d): the warm-up must not be a turn", tr.Index, tr.NewEpisode, p.aug.calls.Load())
	}
}

// A session against an upstream that serves WebSocket mode: Codex's warm-up
// (generate: false) is answered by camproxy and never reaches the upstream; the
// task's first turn, which continues the warm-up, goes out whole (its context
// spliced, no previous_response_id the upstream never issued); the continuations go
// over one upstream socket as the client sent them — only the new items and
// previous_response_id, the state kept upstream — and no HTTP call is made. One CAM
// call, one episode, three websocket turns, the tool result recorded alone.
func TestWebSocketSessionUpstreamSocket(t *testing.T) {
	p := newWSProxy(t)
	p.up.Configure(func(u *testkit.Upstream) { u.RefuseUpgrade = 0 })
	ws := p.dial(t)
	send(t, ws, map[string]any{"type": "response.create", "model": "gpt-5", "store": false, "generate": false, "input": []any{}, "tools": wsTools})
	warm := last(readTurn(t, ws))
	if warm.Get("type").Str != "response.completed" {
		t.Fatalf("warm-up ended with %s", warm.Raw)
	}
	first := firstCreate()
	first["previous_response_id"] = warm.Get("response.id").Str
	send(t, ws, first)
	done := last(readTurn(t, ws))
	call := done.Get(`response.output.#(type=="function_call")`)
	if done.Get("type").Str != "response.completed" || call.Get("call_id").Str == "" {
		t.Fatalf("turn 1 ended with %s", done.Raw)
	}
	send(t, ws, map[string]any{"type": "response.create", "model": "gpt-5", "store": false, "previous_response_id": done.Get("response.id").Str,
		"tools": wsTools, "input": []any{map[string]any{"type": "function_call_output", "call_id": call.Get("call_id").Str, "output": `{"status":"on time"}`}}})
	done2 := last(readTurn(t, ws))
	if done2.Get("type").Str != "response.completed" {
		t.Fatalf("turn 2 ended with %s", done2.Raw)
	}
	send(t, ws, map[string]any{"type": "response.create", "model": "gpt-5", "store": false, "previous_response_id": done2.Get("response.id").Str,
		"tools": wsTools, "input": "Thanks. And the seat?"})
	if done3 := last(readTurn(t, ws)); done3.Get("type").Str != "response.completed" {
		t.Fatalf("turn 3 ended with %s", done3.Raw)
	}

	if n := len(p.up.Requests()); n != 0 {
		t.Errorf("upstream saw %d HTTP calls, want none: every turn goes over its socket", n)
	}
	socks := p.up.Sockets()
	if len(socks) != 1 || p.up.UpgradeAttempts() != 1 {
		t.Fatalf("upstream saw %d sockets (%d upgrades), want one", len(socks), p.up.UpgradeAttempts())
	}
	if got := socks[0].Header.Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("upstream upgrade Authorization %q, want the client's", got)
	}
	msgs := socks[0].Messages
	if len(msgs) != 3 {
		t.Fatalf("upstream socket got %d messages, want 3 (the warm-up is camproxy's): %q", len(msgs), msgs)
	}
	m0 := gjson.ParseBytes(msgs[0])
	if m0.Get("type").Str != "response.create" || m0.Get("stream").Exists() || m0.Get("previous_response_id").Exists() ||
		!strings.Contains(m0.Get("input.0.content.0.text").Str, camContext) {
		t.Errorf("turn 1 upstream: %s; want a response.create with the task and its context, no stream, no previous_response_id", msgs[0])
	}
	for i, prev := range []string{done.Get("response.id").Str, done2.Get("response.id").Str} {
		m := gjson.ParseBytes(msgs[i+1])
		if m.Get("previous_response_id").Str != prev || len(m.Get("input").Array()) > 1 || strings.Contains(string(msgs[i+1]), camContext) {
			t.Errorf("turn %d upstream: %s; want only the new items after %s, no context again", i+2, msgs[i+1], prev)
		}
	}
	checkSessionRecorded(t, p)
}

// checkSessionRecorded checks what the three-turn session (task, tool result,
// follow-up) left: one CAM call, and three websocket turns of one episode, the second
// holding the tool result alone.
func checkSessionRecorded(t *testing.T, p *wsProxy) {
	t.Helper()
	if n := p.aug.calls.Load(); n != 1 {
		t.Errorf("CAM called %d times, want 1", n)
	}
	var epID string
	for i := range 3 {
		tr := nextWSTurn(t, p)
		if i == 0 {
			epID = tr.Episode.ID
		}
		if tr.Episode.ID != epID || tr.Index != i || tr.Transport != episode.TransportWebSocket || tr.Status != 200 || tr.Error != "" {
			t.Errorf("turn %d recorded as episode %s index %d transport %q status %d error %q; want episode %s index %d websocket 200",
				i, tr.Episode.ID, tr.Index, tr.Transport, tr.Status, tr.Error, epID, i)
		}
		if i == 1 && (len(tr.Messages) != 1 || tr.Messages[0].Role != "tool") {
			t.Errorf("turn 2 recorded %d new messages (%v), want the tool result alone", len(tr.Messages), tr.Messages)
		}
	}
}
