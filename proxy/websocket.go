package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/protocol/registry"
	"github.com/camproxy/camproxy/protocol/sse"
)

// The Responses API's WebSocket mode, server side. A client opens GET /v1/responses
// with a WebSocket upgrade; the socket is its session and the session one episode.
// Each response.create is one call through the pipeline POST /v1/responses takes
// (serveAugmented): a synthetic request made from the event and the upgrade's
// headers, its answer's SSE events sent back one WebSocket text message each, a
// refusal or upstream error sent as an error event — never a silent close. Without
// an upstream socket (wsSession.upstream, proxy/wsupstream.go), each turn goes as
// POST /v1/responses with "stream": true, and the session keeps its items so that a
// continuation reaches the upstream whole.

// Close reasons, as the client's close frame carries them.
const (
	reasonShutdown = "camproxy is shutting down"
	reasonIdle     = "no turn for server.idle_timeout"
)

// closeGrace is how long a socket camproxy closes waits for the client's close frame.
const closeGrace = time.Second

// wsSession is one client socket: one session, one episode, one turn at a time.
type wsSession struct {
	s    *Server
	rt   *route
	ws   *websocket.Conn
	conn sessConn
	hdr  fasthttp.RequestHeader // the upgrade's headers (auth, X-CAM-*): every turn's

	// upstream is the upstream's socket for this session (proxy/wsupstream.go); nil =
	// HTTP per turn. Opened by the first turn (dialed: it was tried), read by the reader.
	upstream wsTurner
	dialed   bool

	// Owned by the turn in flight (one at a time).
	episode string  // the session's episode, once a turn named it
	items   wsItems // what continuations are expanded from

	writeMu sync.Mutex // one writer at a time on the socket

	mu       sync.Mutex // guards inFlight, next, closing and the read deadline
	inFlight bool
	closing  bool
	// next is a response.create that came once the turn in flight had sent its last
	// event but before it ended (recorded, closed): a client sends its next turn the
	// moment it reads response.completed. It runs when the turn ends.
	next []byte
	// answered: the turn in flight sent its last event (set before it is sent).
	answered atomic.Bool

	gone      atomic.Bool // the client left (or the socket broke): a turn in flight is cancelled
	cancelled atomic.Bool // response.cancel: the turn in flight is cut
	turns     sync.WaitGroup
}

// upgrade serves a WebSocket upgrade: GET /v1/responses becomes a session; an upgrade
// anywhere else is refused with 426, so that the client falls back to HTTP at once.
// It reports false for a request that asks no WebSocket upgrade (an h2c upgrade is
// ignored, as RFC 9110 §7.8 lets a server do: the request is served over HTTP/1.1).
func (s *Server) upgrade(fc *fasthttp.RequestCtx) bool {
	if !websocket.FastHTTPIsWebSocketUpgrade(fc) {
		return false
	}
	rt, augmented := s.lookup(fc)
	if augmented && fc.IsGet() && string(fc.Path()) == "/v1/responses" && rt.Protocol == registry.Responses {
		s.openSocket(fc, rt)
		return true
	}
	writeError(fc, rt.Errors, &Error{Status: http.StatusUpgradeRequired, Type: "invalid_request_error",
		Msg: "camproxy serves no WebSocket on " + string(fc.Method()) + " " + string(fc.Path()) +
			" (only GET /v1/responses, the Responses API's WebSocket mode); send this call over HTTP"})
	s.m.Requests.WithLabelValues(rt.Name, "", "", statusLabel(http.StatusUpgradeRequired)).Inc()
	return true
}

// openSocket completes the handshake; the session runs on the hijacked connection.
func (s *Server) openSocket(fc *fasthttp.RequestCtx, rt *route) {
	sess := &wsSession{s: s, rt: rt, items: wsItems{max: s.maxBody}}
	sess.conn = sessConn{sess: sess, local: fc.LocalAddr(), remote: fc.RemoteAddr()}
	fc.Request.Header.CopyTo(&sess.hdr)
	for _, h := range []string{"Upgrade", "Connection", "Sec-WebSocket-Key", "Sec-WebSocket-Version",
		"Sec-WebSocket-Extensions", "Sec-WebSocket-Protocol"} {
		sess.hdr.Del(h)
	}
	up := websocket.FastHTTPUpgrader{ReadBufferSize: 4 << 10, WriteBufferSize: 16 << 10}
	if err := up.Upgrade(fc, sess.serve); err != nil {
		s.log.Debug("websocket handshake refused", "err", err) // the upgrader answered it
	}
}

// serve reads the client's events until the socket ends. Reading never stops while a
// turn runs: pings are answered, response.cancel is seen, and a client that leaves
// is known at once (its turn is cancelled upstream).
func (sess *wsSession) serve(ws *websocket.Conn) {
	s := sess.s
	sess.ws = ws
	defer func() { _ = ws.Close() }()
	if !s.sockets.add(sess) {
		sess.closeWith(websocket.CloseGoingAway, reasonShutdown)
		return
	}
	defer s.sockets.remove(sess)
	defer sess.ended() // first of the defers: a shutdown's drain must not write to the socket once it is handed back
	s.m.Sockets.Inc()
	defer s.m.Sockets.Dec()
	ws.SetReadLimit(int64(s.maxBody)) // past it the library closes with 1009
	for {
		sess.armIdle()
		mt, msg, err := ws.ReadMessage()
		if err != nil {
			sess.readFailed(err)
			break
		}
		sess.event(mt, msg)
	}
	sess.turns.Wait()
	if up := sess.socket(); up != nil {
		up.close()
	}
}

// readFailed ends the read loop: a socket idle past server.idle_timeout is closed
// with 1000; any other end (the client's close, a broken connection, a message over
// the limit) leaves nobody to answer, and a turn in flight is cancelled.
func (sess *wsSession) readFailed(err error) {
	sess.mu.Lock()
	closing, inFlight := sess.closing, sess.inFlight
	sess.mu.Unlock()
	var ne net.Error
	if !closing && !inFlight && errors.As(err, &ne) && ne.Timeout() {
		sess.closeWith(websocket.CloseNormalClosure, reasonIdle)
	}
	sess.gone.Store(true)
}

// armIdle bounds the wait for the next event by server.idle_timeout while no turn is
// in flight; during a turn the socket may be silent for as long as the turn runs.
func (sess *wsSession) armIdle() {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.closing {
		return
	}
	var t time.Time
	if idle := sess.s.idle; !sess.inFlight && idle > 0 {
		t = time.Now().Add(idle)
	}
	_ = sess.ws.SetReadDeadline(t)
}

// event acts on one client message.
func (sess *wsSession) event(mt int, msg []byte) {
	if mt != websocket.TextMessage {
		sess.sendError(wsBadRequest("invalid_event", "", "binary messages are not supported: send each event as a JSON text message"))
		return
	}
	kind, e := parseClientEvent(msg)
	if e != nil {
		sess.sendError(e)
		return
	}
	switch {
	case kind == evCreate:
		sess.mu.Lock()
		switch {
		case sess.closing:
			sess.mu.Unlock()
		case sess.inFlight && (sess.next != nil || !sess.answered.Load()):
			sess.mu.Unlock()
			sess.sendError(wsBadRequest("response_already_in_flight", "",
				"a response is already in progress on this socket: send response.create after it ends (one at a time per socket)"))
		case sess.inFlight:
			sess.next = msg
			sess.mu.Unlock()
		default:
			sess.startLocked(msg)
			sess.mu.Unlock()
		}
	case sess.socket() != nil:
		if err := sess.socket().send(sess.s.base, msg); err != nil {
			sess.sendError(&Error{Status: http.StatusBadGateway, Type: "upstream_error", Msg: "event not sent upstream", Err: err})
		}
	case kind == evCancel:
		sess.mu.Lock()
		if sess.inFlight {
			sess.cancelled.Store(true) // the turn's watcher cuts the upstream call
		}
		sess.mu.Unlock()
	default:
		sess.sendError(wsBadRequest("unsupported_event", "type", "event type "+strconv.Quote(kind)+
			" is not supported: the upstream serves no WebSocket mode, and camproxy sends it each turn over HTTP"))
	}
}

// startLocked starts a turn (sess.mu held).
func (sess *wsSession) startLocked(msg []byte) {
	sess.inFlight = true
	sess.answered.Store(false)
	sess.cancelled.Store(false)
	_ = sess.ws.SetReadDeadline(time.Time{})
	sess.turns.Add(1)
	go sess.turn(msg)
}

// socket is the session's upstream socket, nil when turns go over HTTP.
func (sess *wsSession) socket() wsTurner {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.upstream
}

// setSocket gives the session its upstream socket (nil: back to HTTP per turn).
func (sess *wsSession) setSocket(u wsTurner) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.upstream = u
}

// upstreamSocket makes the session a socketHolder: the pipeline's forward step finds
// the turn's upstream socket through the request's wsSessionKey user value.
func (sess *wsSession) upstreamSocket() wsTurner { return sess.socket() }

// openUpstream tries, once per session (its first turn), the upstream's own
// WebSocket mode (Upstream.openSocket: upstreams.X.websocket, detection cached per
// upstream). Refused or off, the session's turns go over HTTP.
func (sess *wsSession) openUpstream() {
	if sess.dialed {
		return
	}
	sess.dialed = true
	up, err := sess.rt.up.openSocket(sess.s.base, &sess.hdr)
	if err != nil {
		if !errors.Is(err, errNoWebSocket) {
			sess.s.log.Warn("upstream WebSocket not opened; this session's turns go over HTTP", "upstream", sess.rt.up.Name, "err", err)
		} else {
			sess.s.log.Debug("upstream serves no WebSocket mode; this session's turns go over HTTP", "upstream", sess.rt.up.Name, "reason", err)
		}
		return
	}
	sess.setSocket(up)
}

// turn runs one response.create through the pipeline and relays its answer.
func (sess *wsSession) turn(msg []byte) {
	defer sess.turns.Done()
	defer sess.turnEnded()
	s := sess.s
	if !isWarmup(msg) {
		sess.openUpstream()
	}
	ct, e := createBody(msg, &sess.items, sess.socket() == nil, s.maxBody)
	if e != nil {
		s.m.Requests.WithLabelValues(sess.rt.Name, "", "", statusLabel(e.Status)).Inc()
		sess.endTurn(wsErrorEvent(e))
		return
	}
	if ct.warmup {
		sess.warmup(ct)
		return
	}
	if !sess.admitTurn() {
		return
	}
	defer sess.s.limit.leave()
	fc := &fasthttp.RequestCtx{}
	fc.Init2(&sess.conn, fasthttpLogger{s.log}, true)
	sess.hdr.CopyTo(&fc.Request.Header)
	fc.Request.Header.SetMethod(fasthttp.MethodPost)
	fc.Request.Header.SetContentType("application/json")
	if sess.episode != "" {
		fc.Request.Header.Set(hdrEpisode, sess.episode)
	}
	fc.Request.SetBodyRaw(ct.body)
	fc.SetUserValue(wsSessionKey, sess)
	s.serveAugmented(fc, sess.rt)
	if id := fc.Response.Header.Peek(hdrEpisode); len(id) > 0 {
		sess.episode = string(id)
	}
	sess.relay(fc, ct)
}

// turnEnded lets the next turn in; a draining server closes the socket now.
func (sess *wsSession) turnEnded() {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.inFlight = false
	next := sess.next
	sess.next = nil
	switch {
	case sess.closing:
	case sess.s.sockets.draining.Load():
		sess.closeLocked(websocket.CloseGoingAway, reasonShutdown)
	case next != nil:
		sess.startLocked(next)
	case sess.s.idle > 0:
		_ = sess.ws.SetReadDeadline(time.Now().Add(sess.s.idle))
	}
}

// terminal events end a response; a turn that relayed none tells the client why.
func terminalEvent(typ string) bool {
	switch typ {
	case "response.completed", "response.incomplete", "response.failed", "error":
		return true
	}
	return false
}

// relay sends the turn's answer to the client: each SSE event's data as one text
// message, or the refusal or upstream error as an error event. The stream is read
// to its end and closed as fasthttp's server closes one (CloseWithError), which ends
// the call and records it.
func (sess *wsSession) relay(fc *fasthttp.RequestCtx, ct createTurn) {
	resp := &fc.Response
	st := resp.BodyStream()
	if st == nil {
		sess.relayBody(resp.StatusCode(), resp.Body(), ct)
		return
	}
	s := sess.s
	rl, _ := st.(*relay)
	var werr error
	terminal := false
	rd := sse.Reader{Max: maxResponseBytes}
	rd.Event = func(name, data []byte) {
		if werr != nil {
			return
		}
		typ := gjson.GetBytes(data, "type").Str
		if typ == "" && string(name) == "error" {
			// camproxy's own event for a stream that broke (relay.errorEvent).
			status := http.StatusBadGateway
			if rl != nil && isTimeout(rl.err) {
				status = http.StatusGatewayTimeout
			}
			data, typ = answerErrorEvent(status, data), "error"
		}
		if typ == "response.completed" || typ == "response.incomplete" {
			sess.keep(ct, gjson.GetBytes(data, "response"))
		}
		if terminalEvent(typ) {
			terminal = true
			sess.answered.Store(true)
		}
		werr = sess.send(data)
	}
	rd.Oversized = func([]byte, sse.Cut) {
		werr = errors.New("an event larger than the relay's bound")
		sess.endTurn(wsErrorEvent(&Error{Status: http.StatusBadGateway, Type: "upstream_error", Msg: "upstream event too large to relay"}))
	}
	bp := s.bufs.Get().(*[]byte)
	var rerr error
	for werr == nil {
		n, err := st.Read(*bp)
		_, _ = rd.Write((*bp)[:n])
		if err != nil {
			rerr = err
			break
		}
	}
	s.bufs.Put(bp)
	if c, ok := st.(fasthttp.ReadCloserWithError); ok {
		_ = c.CloseWithError(werr)
	}
	resp.SetBodyStream(nil, 0)
	if terminal || werr != nil || sess.gone.Load() {
		return
	}
	e := &Error{Status: http.StatusBadGateway, Type: "upstream_error",
		Msg: "upstream " + sess.rt.up.Base.Host + " ended the stream before its final event"}
	switch {
	case sess.cancelled.Load():
		e = &Error{Status: 499, Type: "invalid_request_error", Msg: "the response was cancelled (response.cancel)"}
	case rerr != nil && rerr != io.EOF:
		e.Msg, e.Err = "upstream "+sess.rt.up.Base.Host+" broke the stream", rerr
		if isTimeout(rerr) {
			e.Status = http.StatusGatewayTimeout
		}
	}
	sess.endTurn(wsErrorEvent(e))
}

// relayBody sends an answer that was not streamed: a refusal or an upstream error as
// the error event, a whole response object (an upstream that ignored "stream") as
// response.completed.
func (sess *wsSession) relayBody(status int, body []byte, ct createTurn) {
	if sess.gone.Load() {
		return
	}
	if status == 499 || status/100 != 2 {
		if sess.cancelled.Load() {
			sess.endTurn(wsErrorEvent(&Error{Status: 499, Type: "invalid_request_error", Msg: "the response was cancelled (response.cancel)"}))
			return
		}
		sess.endTurn(answerErrorEvent(status, body))
		return
	}
	if r := gjson.ParseBytes(body); r.Get("object").Str == "response" {
		sess.keep(ct, r)
		ev, _ := sjson.SetRawBytes([]byte(`{"type":"response.completed"}`), "response", body)
		sess.endTurn(ev)
		return
	}
	sess.endTurn(answerErrorEvent(http.StatusBadGateway, []byte("the upstream answered a streamed call with a body that is no response")))
}

// warmup answers a response.create with "generate": false (Codex sends one first on
// every socket, empty but for its settings) itself. Over HTTP the field means
// nothing, and the upstream would answer it with a whole generated turn the client
// never asked for; over the upstream's socket it would give a response id that the
// task's first turn continues, and a continued turn is never augmented (its context
// would be the upstream's). As OpenAI's WebSocket mode does, it gets a response id
// (localResponsePrefix) with no output that later turns can continue from: the
// session keeps its items, and the next turn is expanded from them and sent without
// previous_response_id, over HTTP or the upstream's socket alike. No model runs, so
// no pipeline: no episode, no CAM call, nothing recorded.
func (sess *wsSession) warmup(ct createTurn) {
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	id := localResponsePrefix + hex.EncodeToString(rnd[:])
	resp := []byte(`{"id":"","object":"response","created_at":0,"status":"in_progress","model":"","output":[]}`)
	resp, _ = sjson.SetBytes(resp, "id", id)
	resp, _ = sjson.SetBytes(resp, "created_at", time.Now().Unix())
	resp, _ = sjson.SetBytes(resp, "model", ct.model)
	created, _ := sjson.SetRawBytes([]byte(`{"type":"response.created","sequence_number":0}`), "response", resp)
	if sess.send(created) != nil {
		return
	}
	resp, _ = sjson.SetBytes(resp, "status", "completed")
	resp, _ = sjson.SetRawBytes(resp, "usage", []byte(`{"input_tokens":0,"output_tokens":0,"total_tokens":0}`))
	sess.items.add(id, ct.prev, ct.input, nil)
	done, _ := sjson.SetRawBytes([]byte(`{"type":"response.completed","sequence_number":1}`), "response", resp)
	sess.endTurn(done)
}

// keep stores a finished response's items for the continuations that follow it.
func (sess *wsSession) keep(ct createTurn, resp gjson.Result) {
	var out [][]byte
	resp.Get("output").ForEach(func(_, it gjson.Result) bool {
		out = append(out, []byte(it.Raw))
		return true
	})
	sess.items.add(resp.Get("id").Str, ct.prev, ct.input, out)
}

// send writes one event; a client that does not take it within the upstream's idle
// timeout is cut, as an HTTP stream's is.
func (sess *wsSession) send(ev []byte) error {
	sess.writeMu.Lock()
	defer sess.writeMu.Unlock()
	if idle := sess.rt.up.IdleTimeout; idle > 0 {
		_ = sess.ws.SetWriteDeadline(time.Now().Add(idle))
	}
	err := sess.ws.WriteMessage(websocket.TextMessage, ev)
	if err != nil {
		sess.gone.Store(true)
	}
	return err
}

func (sess *wsSession) sendError(e *Error) { _ = sess.send(wsErrorEvent(e)) }

// endTurn sends the event that ends the turn in flight.
func (sess *wsSession) endTurn(ev []byte) {
	sess.answered.Store(true)
	_ = sess.send(ev)
}

// closeWith sends a close frame and gives the client closeGrace to answer it; the
// read loop then ends.
func (sess *wsSession) closeWith(code int, reason string) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.closeLocked(code, reason)
}

func (sess *wsSession) closeLocked(code int, reason string) {
	if sess.closing {
		return
	}
	sess.closing = true
	sess.writeMu.Lock()
	_ = sess.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(closeGrace))
	sess.writeMu.Unlock()
	_ = sess.ws.SetReadDeadline(time.Now().Add(closeGrace))
}

// ended marks the session over before its socket is closed and handed back to
// fasthttp: a shutdown that listed it just before would otherwise write its close
// frame to a connection fasthttp reuses.
func (sess *wsSession) ended() {
	sess.mu.Lock()
	sess.closing = true
	sess.mu.Unlock()
}

// drain closes a socket for shutdown: now if no turn is in flight, else when it ends.
func (sess *wsSession) drain() {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if !sess.inFlight {
		sess.closeLocked(websocket.CloseGoingAway, reasonShutdown)
	}
}

// wsSockets are the open sessions, for shutdown: fasthttp does not track a hijacked
// connection.
type wsSockets struct {
	mu       sync.Mutex
	open     map[*wsSession]struct{}
	wg       sync.WaitGroup
	draining atomic.Bool
}

// add registers a session; false once shutdown began.
func (w *wsSockets) add(sess *wsSession) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.draining.Load() {
		return false
	}
	if w.open == nil {
		w.open = map[*wsSession]struct{}{}
	}
	w.open[sess] = struct{}{}
	w.wg.Add(1)
	return true
}

func (w *wsSockets) remove(sess *wsSession) {
	w.mu.Lock()
	delete(w.open, sess)
	w.mu.Unlock()
	w.wg.Done()
}

// drain closes every socket once its turn in flight ended (1001); the channel is
// closed when all have ended.
func (w *wsSockets) drain() <-chan struct{} {
	w.mu.Lock()
	w.draining.Store(true)
	open := make([]*wsSession, 0, len(w.open))
	for sess := range w.open {
		open = append(open, sess)
	}
	w.mu.Unlock()
	for _, sess := range open {
		sess.drain()
	}
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	return done
}

// sessConn is the connection a turn's synthetic request runs on: its addresses are
// the client's, it tells the pipeline's watcher that the client left (peerClosed
// asks it first), and it is never read, written or closed by a turn — the session
// owns the socket, and a turn that fails ends the turn, not the socket.
type sessConn struct {
	sess          *wsSession
	local, remote net.Addr
}

var errSessConn = errors.New("a WebSocket turn's connection is not read or written directly")

func (c *sessConn) Read([]byte) (int, error)         { return 0, errSessConn }
func (c *sessConn) Write([]byte) (int, error)        { return 0, errSessConn }
func (c *sessConn) Close() error                     { return nil }
func (c *sessConn) LocalAddr() net.Addr              { return c.local }
func (c *sessConn) RemoteAddr() net.Addr             { return c.remote }
func (c *sessConn) SetDeadline(time.Time) error      { return nil }
func (c *sessConn) SetReadDeadline(time.Time) error  { return nil }
func (c *sessConn) SetWriteDeadline(time.Time) error { return nil }

// clientGone reports that the turn's client left, or cancelled the turn.
func (c *sessConn) clientGone() bool { return c.sess.gone.Load() || c.sess.cancelled.Load() }
