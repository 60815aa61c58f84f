package testkit

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
)

// dialFake opens a socket to the fake's Responses WebSocket mode as a client does.
func dialFake(t *testing.T, u *Upstream) *websocket.Conn {
	t.Helper()
	c, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(u.URL, "http")+"/v1/responses",
		http.Header{"Authorization": {"Bearer sk-test"}})
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readTurn reads one turn's events up to its last (response.completed or error).
func readTurn(t *testing.T, c *websocket.Conn) []gjson.Result {
	t.Helper()
	var events []gjson.Result
	for {
		typ, msg, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("after %d events: %v", len(events), err)
		}
		if typ != websocket.TextMessage {
			t.Fatalf("message type %d, want text", typ)
		}
		ev := gjson.ParseBytes(msg)
		events = append(events, ev)
		if k := ev.Get("type").String(); k == "response.completed" || k == "error" {
			return events
		}
	}
}

// The socket answers each response.create with the events the SSE stream carries,
// one message each, in the same order; a continuation sending only new items and
// previous_response_id works on the socket with "store": false, and not on another.
func TestFakeWebSocketMode(t *testing.T) {
	u := NewUpstream()
	defer u.Close()
	c := dialFake(t, u)
	first := `{"type":"response.create","model":"gpt-5","store":false,"input":[{"role":"user","content":"hi"}],"tools":[{"type":"function","name":"shell"}]}`
	if err := c.WriteMessage(websocket.TextMessage, []byte(first)); err != nil {
		t.Fatal(err)
	}
	events := readTurn(t, c)
	// The same call over HTTP streams the same events (its own response number).
	req, _ := http.NewRequest(http.MethodPost, u.URL+"/v1/responses", strings.NewReader(strings.Replace(first, `"type":"response.create",`, `"stream":true,`, 1)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sseTypes []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			sseTypes = append(sseTypes, v)
		}
	}
	resp.Body.Close()
	if len(events) != len(sseTypes) {
		t.Fatalf("socket sent %d events, SSE %d", len(events), len(sseTypes))
	}
	for i, ev := range events {
		if ev.Get("type").String() != sseTypes[i] {
			t.Fatalf("event %d: socket %s, SSE %s", i, ev.Get("type"), sseTypes[i])
		}
	}
	last := events[len(events)-1]
	if last.Get("type").String() != "response.completed" || last.Get("response.output.0.type").String() != "function_call" {
		t.Fatalf("last event: %s", last.Raw)
	}
	id := last.Get("response.id").String()

	next := `{"type":"response.create","model":"gpt-5","store":false,"previous_response_id":"` + id +
		`","input":[{"type":"function_call_output","call_id":"call_1","output":"ok"}]}`
	if err := c.WriteMessage(websocket.TextMessage, []byte(next)); err != nil {
		t.Fatal(err)
	}
	events = readTurn(t, c)
	// DefaultResponsesReply counts the whole conversation: user, call, output.
	if got := events[len(events)-1].Get("response.output.0.content.0.text").String(); got != "Done after 3 items." {
		t.Fatalf("continuation on the socket answered %q", got)
	}

	other := dialFake(t, u)
	if err := other.WriteMessage(websocket.TextMessage, []byte(next)); err != nil {
		t.Fatal(err)
	}
	events = readTurn(t, other)
	if len(events) != 1 || events[0].Get("status").Int() != 400 || events[0].Get("error.code").String() != "previous_response_not_found" {
		t.Fatalf("another socket's state answered: %v", events)
	}
	socks := u.Sockets()
	if len(socks) != 2 || len(socks[0].Messages) != 2 || socks[0].Header.Get("Authorization") != "Bearer sk-test" {
		t.Fatalf("sockets recorded: %+v", socks)
	}
	if len(u.Requests()) != 1 {
		t.Fatalf("HTTP log holds %d calls, want the one POST", len(u.Requests()))
	}
}

// A scripted error is one error event in the shape Codex reads (status, error).
func TestFakeWebSocketError(t *testing.T) {
	u := NewUpstream()
	defer u.Close()
	u.RespondTo = func(gjson.Result, []gjson.Result) Reply { return Reply{Status: 429, ErrorMsg: "slow down"} }
	c := dialFake(t, u)
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"response.create","model":"m","input":"x"}`)); err != nil {
		t.Fatal(err)
	}
	ev := readTurn(t, c)
	if len(ev) != 1 || ev[0].Get("status").Int() != 429 || ev[0].Get("error.message").String() != "slow down" {
		t.Fatalf("error turn: %v", ev)
	}
}

// An upstream without WebSocket mode refuses the upgrade as such servers do.
func TestFakeRefusesUpgrade(t *testing.T) {
	for _, status := range []int{405, 404, 426} {
		u := NewUpstream()
		u.RefuseUpgrade = status
		_, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(u.URL, "http")+"/v1/responses", nil)
		if err != websocket.ErrBadHandshake || resp.StatusCode != status {
			t.Fatalf("refuse %d: err %v, resp %v", status, err, resp)
		}
		if u.UpgradeAttempts() != 1 || len(u.Sockets()) != 0 {
			t.Fatalf("refuse %d: %d attempts, %d sockets", status, u.UpgradeAttempts(), len(u.Sockets()))
		}
		u.Close()
	}
}
