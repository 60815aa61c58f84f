package testkit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
)

// The scripted upstream's Responses WebSocket mode (GET /v1/responses with an
// upgrade), as OpenAI and xAI serve it: each turn is a client text message
// {"type":"response.create", …the fields of POST /v1/responses, no "stream"}; the
// answer is the same events as the SSE stream, each one text message holding the
// event's JSON; a refused call is one {"type":"error","status":…,"error":{…}} event
// (the shape Codex's client reads). One response at a time per socket. Besides the
// stored responses, a socket keeps its latest response in memory, so that a
// continuation with previous_response_id works there even with "store": false; a
// failed turn evicts it, and another socket does not see it.
//
// The stream hooks apply per turn, counted in events: Delay before the first event
// (a slow first byte), BeforeChunk, HangAfter (a stall: nothing more until the
// client goes away) and ResetAfter (the connection dropped mid-turn without a close
// frame). RefuseUpgrade models an upstream without WebSocket mode.

// SocketLog is what one upstream socket received.
type SocketLog struct {
	Header   http.Header // the upgrade request's headers
	Messages [][]byte    // the client's text messages, in order (every type)
}

type socketState struct {
	conn *websocket.Conn
	log  SocketLog
	// latest is the socket's in-memory state: its last response and the
	// conversation it ends (input and output items).
	latestID string
	latest   []json.RawMessage
	gone     chan struct{} // closed when the client's side ended (read failed)
}

// UpgradeAttempts is how many WebSocket upgrades the fake was asked for, refused ones included.
func (u *Upstream) UpgradeAttempts() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.upgrades
}

// Sockets returns what each accepted socket has received so far, in the order they opened.
func (u *Upstream) Sockets() []SocketLog {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]SocketLog, len(u.sockets))
	for i, s := range u.sockets {
		out[i] = SocketLog{Header: s.log.Header, Messages: append([][]byte(nil), s.log.Messages...)}
	}
	return out
}

// DropSockets closes every open socket with a close frame, as an upstream does to
// a socket past its time limit or idle too long.
func (u *Upstream) DropSockets() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range u.sockets {
		_ = s.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "connection limit reached"), time.Now().Add(time.Second))
		_ = s.conn.NetConn().Close()
	}
}

// Close closes the open sockets (an httptest server does not track hijacked
// connections), then the server.
func (u *Upstream) Close() {
	u.DropSockets()
	u.Server.Close()
}

// refuseUpgrade answers an upgrade the way servers without WebSocket mode do:
// 405 and 404 as FastAPI (vLLM) words them, anything else as an OpenAI error.
func refuseUpgrade(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Type", "application/json")
	switch status {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", "POST")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"detail":"Method Not Allowed"}`))
	case http.StatusNotFound:
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"detail":"Not Found"}`))
	default:
		writeOpenAIError(w, status, http.StatusText(status))
	}
}

// serveSocket answers a WebSocket upgrade: refused (RefuseUpgrade, or a path without
// WebSocket mode), or a socket that serves response.create turns until the client
// closes it.
func (u *Upstream) serveSocket(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.upgrades++
	refuse := u.RefuseUpgrade
	u.mu.Unlock()
	switch {
	case refuse != 0:
		refuseUpgrade(w, refuse)
		return
	case r.URL.Path != "/v1/responses":
		refuseUpgrade(w, http.StatusNotFound)
		return
	}
	up := websocket.Upgrader{EnableCompression: true, CheckOrigin: func(*http.Request) bool { return true }}
	u.mu.Lock()
	n := len(u.sockets) + 1
	u.mu.Unlock()
	conn, err := up.Upgrade(w, r, http.Header{"X-Request-Id": {fmt.Sprintf("req_ws_%d", n)}})
	if err != nil {
		return // the upgrader answered the bad handshake
	}
	s := &socketState{conn: conn, log: SocketLog{Header: r.Header.Clone()}, gone: make(chan struct{})}
	u.mu.Lock()
	u.sockets = append(u.sockets, s)
	u.mu.Unlock()
	defer conn.Close()

	turns := make(chan []byte)
	go func() { // the only reader: it records every message and answers pings
		defer close(s.gone)
		for {
			typ, msg, err := conn.ReadMessage()
			if err != nil {
				return
			}
			if typ != websocket.TextMessage {
				continue
			}
			u.mu.Lock()
			s.log.Messages = append(s.log.Messages, msg)
			u.mu.Unlock()
			if gjson.GetBytes(msg, "type").String() != "response.create" {
				continue // response.cancel and the like are recorded only
			}
			select {
			case turns <- msg:
			case <-s.gone:
				return
			}
		}
	}()
	for {
		select {
		case msg := <-turns:
			if !u.socketTurn(s, msg) {
				return
			}
		case <-s.gone:
			return
		}
	}
}

// socketTurn answers one response.create; false when the socket is done (dropped, or
// the client left mid-turn).
func (u *Upstream) socketTurn(s *socketState, msg []byte) bool {
	t := u.prepareResponse(msg, func(id string) ([]json.RawMessage, bool) {
		if id == s.latestID {
			return s.latest, true
		}
		return nil, false
	})
	u.mu.Lock()
	delay, beforeChunk, hangAfter, resetAfter := u.Delay, u.BeforeChunk, u.HangAfter, u.ResetAfter
	u.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-s.gone:
			u.noteCancel()
			return false
		}
	}
	fail := func(status int, e map[string]any) bool {
		s.latestID, s.latest = "", nil // a failed turn evicts the socket's state
		return s.conn.WriteMessage(websocket.TextMessage, mustJSON(map[string]any{"type": "error", "status": status, "error": e})) == nil
	}
	switch {
	case t.notFound != "":
		return fail(http.StatusBadRequest, notFoundError(t.notFound))
	case t.rep.Status >= 300:
		var code any
		if t.rep.ErrorCode != "" {
			code = t.rep.ErrorCode
		}
		return fail(t.rep.Status, map[string]any{"message": t.rep.ErrorMsg, "type": "invalid_request_error", "param": nil, "code": code})
	}
	for i, e := range responseEvents(t.req, t.seq, t.rep) {
		if beforeChunk != nil {
			beforeChunk(i)
		}
		if err := s.conn.WriteMessage(websocket.TextMessage, e.Data); err != nil {
			u.noteCancel()
			return false
		}
		if resetAfter > 0 && i+1 == resetAfter {
			_ = s.conn.NetConn().Close() // dropped: no close frame
			return false
		}
		if hangAfter > 0 && i+1 == hangAfter {
			select {
			case <-s.gone:
				u.noteCancel()
			case <-time.After(30 * time.Second):
			}
			return false
		}
	}
	s.latest = u.store(t, responseOutput(t.seq, t.rep))
	s.latestID = responseID(t.seq)
	return true
}
