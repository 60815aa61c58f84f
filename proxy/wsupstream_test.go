package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/protocol/registry"
	"github.com/camproxy/camproxy/protocol/responses"
)

// socketUpstream is an OpenAI upstream on the scripted fake, its clock injected.
func socketUpstream(t *testing.T, fake *testkit.Upstream, mode WSMode) (*Upstream, *atomic.Int64) {
	t.Helper()
	base, err := url.Parse(fake.URL + "/v1")
	if err != nil {
		t.Fatal(err)
	}
	var now atomic.Int64
	now.Store(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	up := &Upstream{Name: "openai", Base: base, FirstByteTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second, WebSocket: mode,
		now: func() time.Time { return time.Unix(0, now.Load()) }}
	return up, &now
}

// upgradeHeader is an agent's upgrade request as camproxy received it.
func upgradeHeader() *fasthttp.RequestHeader {
	var h fasthttp.RequestHeader
	h.SetMethod(fasthttp.MethodGet)
	h.SetRequestURI("/v1/responses")
	h.Set("Authorization", "Bearer sk-agent")
	h.Set("Connection", "Upgrade")
	h.Set("Upgrade", "websocket")
	h.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	h.Set("Sec-WebSocket-Version", "13")
	h.Set("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits")
	h.Set("OpenAI-Beta", "responses_websockets=2026-02-06")
	h.Set("X-CAM-Episode-Id", "ep-1")
	return &h
}

// readSocketTurn reads a turn's exchange as the relay does (the idle deadline before each
// read) into the Responses stream decoder; it returns the bytes and how they ended.
func readSocketTurn(x exchange, call *upCall, idle time.Duration) ([]byte, *responses.StreamDecoder, error) {
	var out bytes.Buffer
	dec := &responses.StreamDecoder{}
	buf := make([]byte, 512) // smaller than a response.completed event: events span reads
	for {
		call.beforeRead(idle)
		n, err := x.Read(buf)
		out.Write(buf[:n])
		_, _ = dec.Write(buf[:n])
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return out.Bytes(), dec, err
		}
	}
}

// openSession opens a session's socket (under auto, dialled now), closed when the
// test ends.
func openSession(t *testing.T, up *Upstream) wsTurner {
	t.Helper()
	ws, err := up.openSocket(context.Background(), upgradeHeader())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ws.close)
	return ws
}

// wholeTurn runs a turn that must succeed, read to its end as the relay reads it.
func wholeTurn(t *testing.T, ws wsTurner, up *Upstream, body string) ([]byte, *responses.StreamDecoder) {
	t.Helper()
	call := &upCall{}
	x, err := ws.turn(context.Background(), call, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if h := x.head(); h.StatusCode() != 200 || !registry.Responses.Streamed(registry.PathCall("/v1/responses"), h.ContentType()) {
		t.Fatalf("head %d %q", h.StatusCode(), h.ContentType())
	}
	got, dec, err := readSocketTurn(x, call, up.IdleTimeout)
	x.release(err == nil)
	if err != nil {
		t.Fatal(err)
	}
	return got, dec
}

const firstTurn = `{"model":"gpt-5-codex","stream":true,"store":false,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"list the files"}]}],"tools":[{"type":"function","name":"shell","parameters":{"type":"object"}}]}`

// A session's turns go on one upstream socket: each response.create is the body
// with "stream" dropped and "type" first, the answer relayed as the very SSE the
// fake streams over HTTP (the decoder reads the tool call), and a continuation
// carrying only the new item and previous_response_id is answered from the state the
// upstream keeps on the socket (store: false: no other socket could).
func TestSocketTurns(t *testing.T) {
	fake := testkit.NewUpstream()
	defer fake.Close()
	up, _ := socketUpstream(t, fake, WSAuto)
	ws := openSession(t, up)
	if h := ws.(upgradeHeaders).upgradeHeader(); h.Get("X-Request-Id") != "req_ws_1" {
		t.Fatalf("the upstream's 101 headers: %v", h)
	}
	got, dec := wholeTurn(t, ws, up, firstTurn)
	socks := fake.Sockets()
	if len(socks) != 1 || len(socks[0].Messages) != 1 {
		t.Fatalf("sockets: %+v", socks)
	}
	sent := socks[0].Messages[0]
	if want := `{"type":"response.create","model":"gpt-5-codex","store":false,` + firstTurn[len(`{"model":"gpt-5-codex","stream":true,"store":false,`):]; string(sent) != want {
		t.Fatalf("upstream received\n%s\nwant\n%s", sent, want)
	}
	req := gjson.ParseBytes(sent)
	rep := testkit.DefaultResponsesReply(req, req.Get("input").Array())
	if want := testkit.ResponseStream(req, 1, rep); !bytes.Equal(got, want) {
		t.Fatalf("relayed\n%s\nwant the fake's own SSE\n%s", got, want)
	}
	msg := dec.Message()
	if !dec.Finished() || dec.ResponseID() != "resp_0001" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Name != "shell" {
		t.Fatalf("decoded: finished %v id %q %+v", dec.Finished(), dec.ResponseID(), msg)
	}
	hdr := socks[0].Header
	if hdr.Get("Authorization") != "Bearer sk-agent" || hdr.Get("Openai-Beta") != "responses_websockets=2026-02-06" ||
		hdr.Get("X-Cam-Episode-Id") != "" || hdr.Get("Sec-Websocket-Key") == "dGhlIHNhbXBsZSBub25jZQ==" {
		t.Fatalf("upgrade headers upstream: %v", hdr)
	}

	next := `{"model":"gpt-5-codex","stream":true,"store":false,"previous_response_id":"resp_0001","input":[{"type":"function_call_output","call_id":"call_1","output":"a.go\nb.go"}]}`
	_, dec = wholeTurn(t, ws, up, next)
	// DefaultResponsesReply counts the conversation the upstream holds: the user's
	// message, its function call and the output sent now.
	if got := dec.Message().Content; got != "Done after 3 items." {
		t.Fatalf("continuation answered %q", got)
	}
	if n := fake.UpgradeAttempts(); n != 1 || len(fake.Sockets()) != 1 {
		t.Fatalf("%d upgrades, %d sockets: the session's turns must share one", n, len(fake.Sockets()))
	}
}

// An error event ends the turn's exchange with it (the decoder still reads the
// stream), and the socket serves the next turn: nothing is left on it.
func TestSocketErrorEvent(t *testing.T) {
	fake := testkit.NewUpstream()
	defer fake.Close()
	fake.RespondTo = func(gjson.Result, []gjson.Result) testkit.Reply {
		return testkit.Reply{Status: 429, ErrorMsg: "Rate limit reached"}
	}
	up, _ := socketUpstream(t, fake, WSAuto)
	ws := openSession(t, up)
	for range 2 {
		got, _ := wholeTurn(t, ws, up, firstTurn)
		if !strings.HasPrefix(string(got), "event: error\ndata: {") || strings.Count(string(got), "\n\n") != 1 ||
			!strings.Contains(string(got), `"status":429`) || !strings.Contains(string(got), "Rate limit reached") {
			t.Fatalf("turn relayed %q", got)
		}
	}
	if n := fake.UpgradeAttempts(); n != 1 {
		t.Fatalf("%d upgrades: an error event leaves the socket usable", n)
	}
}

// A turn that fails — no first event within first_byte_timeout, a stall past
// idle_timeout, the agent gone mid-turn — leaves a response half read on its socket:
// the socket is closed (the upstream sees its client leave) and the next turn dials
// a new one and is answered.
func TestSocketFailedTurnRedials(t *testing.T) {
	cases := []struct {
		name   string
		script func(*testkit.Upstream)
		act    func(call *upCall) // during the turn
		want   func(t *testing.T, turnErr, readErr error, call *upCall)
	}{
		{name: "first byte timeout", script: func(u *testkit.Upstream) { u.Delay = time.Minute },
			want: func(t *testing.T, turnErr, _ error, _ *upCall) {
				var e *Error
				if !errors.As(turnErr, &e) || e.Status != http.StatusGatewayTimeout || !strings.Contains(e.Error(), "first_byte_timeout") {
					t.Fatalf("turn error %v, want a 504 naming first_byte_timeout", turnErr)
				}
			}},
		{name: "stall mid-turn", script: func(u *testkit.Upstream) { u.HangAfter = 3 },
			want: func(t *testing.T, turnErr, readErr error, call *upCall) {
				if turnErr != nil || !isTimeout(call.failure(readErr, idleMsg(&Upstream{IdleTimeout: time.Millisecond}))) {
					t.Fatalf("turn %v, read %v: want the idle timeout", turnErr, readErr)
				}
			}},
		{name: "agent gone", script: func(u *testkit.Upstream) { u.HangAfter = 3 },
			act: func(call *upCall) { call.cancel(errClientGone) },
			want: func(t *testing.T, turnErr, readErr error, call *upCall) {
				if turnErr != nil || !errors.Is(call.failure(readErr, ""), errClientGone) {
					t.Fatalf("turn %v, read %v: want the call cancelled for the departed agent", turnErr, readErr)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake := testkit.NewUpstream()
			defer fake.Close()
			up, _ := socketUpstream(t, fake, WSAuto)
			up.FirstByteTimeout, up.IdleTimeout = 200*time.Millisecond, 200*time.Millisecond
			if tc.act != nil {
				up.IdleTimeout = time.Minute // only the cancel may end it
			}
			ws := openSession(t, up)
			fake.Configure(tc.script)
			call := &upCall{}
			x, turnErr := ws.turn(context.Background(), call, []byte(firstTurn))
			var readErr error
			if turnErr == nil {
				if tc.act != nil {
					go tc.act(call)
				}
				_, _, readErr = readSocketTurn(x, call, up.IdleTimeout)
				x.release(false)
			}
			tc.want(t, turnErr, readErr, call)
			select {
			case <-fake.Cancelled: // the upstream saw its client leave mid-turn
			case <-time.After(10 * time.Second):
				t.Fatal("the failed turn's socket stayed open upstream")
			}

			fake.Configure(func(u *testkit.Upstream) { u.Delay, u.HangAfter = 0, 0 })
			up.FirstByteTimeout, up.IdleTimeout = 5*time.Second, 5*time.Second
			if _, dec := wholeTurn(t, ws, up, firstTurn); !dec.Finished() {
				t.Fatal("the next turn's answer did not finish")
			}
			if n := fake.UpgradeAttempts(); n != 2 {
				t.Fatalf("%d upgrades, want 2: the next turn redials", n)
			}
		})
	}
}

// An upstream without WebSocket mode refuses the upgrade: under auto the session
// is told to use HTTP (errNoWebSocket) and the refusal is remembered, so the next
// sessions do not ask again until it expires; under true the turn fails saying why;
// under false nothing is asked.
func TestSocketRefusedUpgrade(t *testing.T) {
	for _, status := range []int{404, 405, 426, 400} {
		fake := testkit.NewUpstream()
		fake.RefuseUpgrade = status
		up, now := socketUpstream(t, fake, WSAuto)
		ctx := context.Background()
		for range 3 {
			if _, err := up.openSocket(ctx, upgradeHeader()); !errors.Is(err, errNoWebSocket) {
				t.Fatalf("%d: open: %v, want errNoWebSocket", status, err)
			}
		}
		if n := fake.UpgradeAttempts(); n != 1 {
			t.Fatalf("%d: %d upgrade attempts for 3 sessions, want 1 (the refusal is cached)", status, n)
		}
		now.Add(int64(wsRefusalTTL + time.Second))
		if _, err := up.openSocket(ctx, upgradeHeader()); !errors.Is(err, errNoWebSocket) || fake.UpgradeAttempts() != 2 {
			t.Fatalf("%d: after the cache expired: %v, %d attempts", status, err, fake.UpgradeAttempts())
		}
		fake.Close()
	}

	fake := testkit.NewUpstream()
	defer fake.Close()
	fake.RefuseUpgrade = 405
	up, _ := socketUpstream(t, fake, WSOn)
	ws, err := up.openSocket(context.Background(), upgradeHeader())
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err = ws.turn(context.Background(), &upCall{}, []byte(firstTurn))
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusBadGateway || !strings.Contains(e.Msg, "405") || !strings.Contains(e.Msg, "websocket") {
			t.Fatalf("websocket: true, refused: %v", err)
		}
	}
	if fake.UpgradeAttempts() != 2 {
		t.Fatalf("websocket: true asks every turn; %d attempts", fake.UpgradeAttempts())
	}

	up.WebSocket = WSOff
	if _, err := up.openSocket(context.Background(), upgradeHeader()); !errors.Is(err, errNoWebSocket) || fake.UpgradeAttempts() != 2 {
		t.Fatalf("websocket: false: %v, %d attempts", err, fake.UpgradeAttempts())
	}
	// A refusal of this client (its key) says nothing of the mode: not cached.
	fake.RefuseUpgrade = 401
	up.WebSocket = WSAuto
	for range 2 {
		if _, err := up.openSocket(context.Background(), upgradeHeader()); !errors.Is(err, errNoWebSocket) {
			t.Fatal(err)
		}
	}
	if fake.UpgradeAttempts() != 4 {
		t.Fatalf("a 401 was cached: %d attempts", fake.UpgradeAttempts())
	}
}

// A socket the upstream closed while it rested between turns (an idle close), or
// will take no more turns on (OpenAI's hour: an error event with
// websocket_connection_limit_reached before anything else), costs the agent nothing:
// the turn goes on a new socket.
func TestSocketClosedWhileResting(t *testing.T) {
	for _, tc := range []struct {
		name string
		rest func(*testkit.Upstream, *atomic.Int64)
	}{
		{"closed", func(f *testkit.Upstream, _ *atomic.Int64) { f.DropSockets() }},
		{"connection limit", func(_ *testkit.Upstream, limit *atomic.Int64) { limit.Store(1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := testkit.NewUpstream()
			defer fake.Close()
			var limit atomic.Int64
			fake.RespondTo = func(body gjson.Result, conv []gjson.Result) testkit.Reply {
				if limit.CompareAndSwap(1, 0) {
					return testkit.Reply{Status: 400, ErrorCode: "websocket_connection_limit_reached",
						ErrorMsg: "Responses websocket connection limit reached (60 minutes). Create a new websocket connection to continue."}
				}
				return testkit.DefaultResponsesReply(body, conv)
			}
			up, _ := socketUpstream(t, fake, WSAuto)
			ws := openSession(t, up)
			for i := range 2 {
				if i == 1 {
					tc.rest(fake, &limit)
				}
				if got, dec := wholeTurn(t, ws, up, firstTurn); !dec.Finished() || bytes.Contains(got, []byte("event: error")) {
					t.Fatalf("turn %d:\n%s", i, got)
				}
			}
			if n := fake.UpgradeAttempts(); n != 2 {
				t.Fatalf("%d upgrades, want 2", n)
			}
		})
	}
}

// The message of a turn: "stream" dropped, "type" first, every other byte kept.
func TestCreateMessage(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"model":"m","stream":true,"input":"x"}`, `{"type":"response.create","model":"m","input":"x"}`},
		{`{}`, `{"type":"response.create"}`},
		{` {"stream":false}`, `{"type":"response.create"}`},
		{`{"type":"x","model":"m"}`, `{"type":"response.create","model":"m"}`},
		{"{\n  \"model\": \"m\"\n}", "{\"type\":\"response.create\",\"model\": \"m\"\n}"},
	} {
		got, err := createMessage([]byte(tc.in))
		if err != nil || string(got) != tc.want || !gjson.ValidBytes(got) {
			t.Errorf("createMessage(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	if _, err := createMessage([]byte(`["x"]`)); err == nil {
		t.Error("an array body made a message")
	}
}

// A turn whose request carries the session's socket (wsSessionKey) runs the whole
// pipeline over it: the spliced body goes upstream as the socket's response.create,
// no HTTP call is made, and the turn is recorded with the answer decoded from the
// relayed events.
func TestSocketThroughPipeline(t *testing.T) {
	fake := testkit.NewUpstream()
	defer fake.Close()
	var up *Upstream
	p := newInmemProxy(t, nil, false, func(o *Options, _ *fasthttp.Server) { up = o.Upstreams["openai"] })
	base, err := url.Parse(fake.URL + "/v1")
	if err != nil {
		t.Fatal(err)
	}
	up.Base = base
	up.own.Store(nil) // the in-memory dialer was for the old base: dial the fake
	ws := openSession(t, up)

	var req fasthttp.Request
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("/v1/responses")
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", "Bearer sk-agent")
	req.SetBodyString(firstTurn)
	// The session's turn runs on a request context of its own, on a connection whose
	// deadlines work (the agent's socket, for the session).
	agent, peer := net.Pipe()
	defer agent.Close()
	defer peer.Close()
	var fc fasthttp.RequestCtx
	fc.Init2(agent, nil, true)
	req.CopyTo(&fc.Request)
	fc.SetUserValue(wsSessionKey, ws)
	p.srv.handle(&fc)
	if fc.Response.StatusCode() != 200 || !fc.Response.IsBodyStream() {
		t.Fatalf("status %d, stream %v: %s", fc.Response.StatusCode(), fc.Response.IsBodyStream(), fc.Response.Body())
	}
	bs := fc.Response.BodyStream()
	got, err := io.ReadAll(bs)
	_ = bs.(interface{ CloseWithError(error) error }).CloseWithError(err)
	if err != nil {
		t.Fatal(err)
	}
	turn := <-p.rec.turns
	if turn.Status != 200 || len(turn.Response.ToolCalls) != 1 || turn.Response.ToolCalls[0].Name != "shell" {
		t.Fatalf("recorded status %d, answer %+v", turn.Status, turn.Response)
	}
	if !bytes.HasPrefix(got, []byte("event: response.created\n")) {
		t.Fatalf("relayed %q", got)
	}
	socks := fake.Sockets()
	if len(socks) != 1 || len(socks[0].Messages) != 1 || !bytes.Contains(socks[0].Messages[0], []byte(camContext)) ||
		!bytes.HasPrefix(socks[0].Messages[0], []byte(`{"type":"response.create",`)) || gjson.GetBytes(socks[0].Messages[0], "stream").Exists() {
		t.Fatalf("the socket carried %q", socks)
	}
	if n := len(fake.Requests()); n != 0 {
		t.Fatalf("%d HTTP calls reached the upstream", n)
	}
}
