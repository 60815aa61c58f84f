package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"
)

// The Responses WebSocket mode toward an upstream that serves it (OpenAI, xAI): an
// agent's WebSocket session gets a socket of its own to the upstream, and each turn
// is one response.create message on it, its answer the usual Responses events, one
// text message each. The upstream keeps the session's state on its socket, so a
// continuation carries only new items and previous_response_id.
//
// A turn is an exchange like any HTTP call's: its head is 200 text/event-stream and
// its body the upstream's messages framed as SSE events (`event: X`, `data: {…}`),
// ending after the response's last event (response.completed, .failed, .incomplete)
// or an error event. So the relay, the answer's decoder, the recording and the
// timeouts run unchanged: first_byte_timeout bounds the upgrade, the message's write
// and the first event; idle_timeout each event after it; the call's cancel (client
// gone, shutdown) ends the turn. A turn that did not end leaves a half-read response
// on the socket: the socket is closed, and the next turn dials a new one.
//
// Whether an upstream serves the mode is found by trying: a refused upgrade (404,
// 405, 426 … as servers without it answer) marks the upstream HTTP-only for
// wsRefusalTTL, and the session's turns go over HTTP (upstreams.<name>.websocket:
// auto). `true` always uses the socket and fails a turn whose upgrade is refused;
// `false` never tries.

// WSMode says whether camproxy uses an upstream's Responses WebSocket mode.
type WSMode uint8

const (
	WSAuto WSMode = iota // try the upgrade; a refusal marks the upstream HTTP-only for a while
	WSOn                 // always; a refused upgrade fails the turn
	WSOff                // never: every turn is a POST
)

// ParseWSMode reads the websocket setting of an upstream's config: auto, true or false.
func ParseWSMode(s string) (WSMode, error) {
	switch s {
	case "", "auto":
		return WSAuto, nil
	case "true":
		return WSOn, nil
	case "false":
		return WSOff, nil
	}
	return WSAuto, fmt.Errorf("websocket mode %q: want auto, true or false", s)
}

// wsRefusalTTL is how long an upstream that refused an upgrade is taken for one
// without WebSocket mode: long enough that sessions do not each pay for a refused
// upgrade, short enough that an upstream that gains the mode is used soon.
const wsRefusalTTL = 10 * time.Minute

// errNoWebSocket is openSocket's error when the session's turns must go over HTTP:
// the upstream refused the upgrade (now or lately), or its config says false.
var errNoWebSocket = errors.New("upstream serves no WebSocket mode")

// wsTurner is an agent session's socket toward the upstream, as the session (the
// agent's own socket) uses it.
type wsTurner interface {
	// turn sends one response.create made of body (the pipeline's spliced
	// POST /v1/responses body) and returns its answer as an SSE exchange. One turn at
	// a time.
	turn(ctx context.Context, call *upCall, body []byte) (exchange, error)
	// send passes a client event other than response.create (response.cancel …) to
	// the upstream as it is.
	send(ctx context.Context, msg []byte) error
	// close closes the socket; a turn in flight fails.
	close()
}

// upgradeHeaders is implemented by a wsTurner whose socket is open: the headers of
// the upstream's 101 (request id, x-codex-turn-state, openai-model …), for the
// session to answer the agent's own upgrade with.
type upgradeHeaders interface{ upgradeHeader() http.Header }

// userKey is the type of camproxy's fasthttp user-value keys.
type userKey string

// wsSessionKey is the user value of a turn's request that holds its WebSocket
// session: the wsTurner itself, or a value whose upstreamSocket method gives it.
const wsSessionKey userKey = "camproxy.wsSession"

// socketHolder is a session that may hold an upstream socket (nil: HTTP).
type socketHolder interface{ upstreamSocket() wsTurner }

// upstreamSocket is the upstream socket of the turn fc carries, nil when the turn
// goes over HTTP.
func upstreamSocket(fc *fasthttp.RequestCtx) wsTurner {
	switch v := fc.UserValue(wsSessionKey).(type) {
	case wsTurner:
		return v
	case socketHolder:
		return v.upstreamSocket()
	}
	return nil
}

func (u *Upstream) clock() time.Time {
	if u.now != nil {
		return u.now()
	}
	return time.Now()
}

// httpOnly says whether the upstream refused an upgrade within wsRefusalTTL.
func (u *Upstream) httpOnly() bool {
	until := u.wsRefused.Load()
	return until != 0 && u.clock().UnixNano() < until
}

// openSocket opens a session's socket toward the upstream, with the headers of the
// agent's upgrade (hdr). Under auto it dials now, to learn whether the upstream
// serves the mode: errNoWebSocket (wrapped, with the reason) sends the session's
// turns over HTTP. Under true the first turn dials, and a refusal fails that turn.
func (u *Upstream) openSocket(ctx context.Context, hdr *fasthttp.RequestHeader) (wsTurner, error) {
	switch {
	case u.WebSocket == WSOff:
		return nil, fmt.Errorf("%w: upstreams.%s.websocket is false", errNoWebSocket, u.Name)
	case u.WebSocket == WSAuto && u.httpOnly():
		return nil, fmt.Errorf("%w: upstream %s refused an upgrade in the last %v", errNoWebSocket, u.Base.Host, wsRefusalTTL)
	}
	h, err := u.socketHeader(ctx, hdr)
	if err != nil {
		return nil, err
	}
	w := &wsUpstream{u: u, url: u.socketURL(), hdr: h}
	if u.WebSocket == WSOn {
		return w, nil
	}
	call := &upCall{}
	if u.FirstByteTimeout > 0 {
		call.setDeadline(time.Now().Add(u.FirstByteTimeout))
	}
	stop := context.AfterFunc(ctx, func() { call.cancel(context.Cause(ctx)) })
	defer stop()
	s, err := w.dial(ctx, call)
	if err != nil {
		// A network failure too: the session's turns go over HTTP, whose calls
		// report it the way every call does.
		return nil, fmt.Errorf("%w: %w", errNoWebSocket, err)
	}
	w.sock = s
	return w, nil
}

// socketURL is the upstream's /v1/responses as a ws:// or wss:// URL (a base ending
// in /v1 absorbs the path's /v1, as for HTTP calls).
func (u *Upstream) socketURL() string {
	scheme := "ws"
	if u.Base.Scheme == "https" {
		scheme = "wss"
	}
	return scheme + "://" + u.Base.Host + string(u.requestURI(nil, []byte("/v1/responses"), nil))
}

// socketHeader is what the upgrade toward the upstream carries of the agent's: the
// headers an HTTP call forwards (its auth, or the configured key instead), minus the
// handshake's own, which belong to each hop.
func (u *Upstream) socketHeader(ctx context.Context, hdr *fasthttp.RequestHeader) (http.Header, error) {
	var req fasthttp.Request
	h := &req.Header
	conn := hdr.Peek("Connection")
	for k, v := range hdr.All() {
		if forwardHeader(k, conn, false) && !bytes.HasPrefix(bytes.ToLower(k), []byte("sec-websocket-")) {
			h.AddBytesKV(k, v)
		}
	}
	switch a := u.Auth.(type) {
	case nil:
	case HeaderKey, PlacedKey: // a key in a header: the upgrade carries it
		if err := a.Apply(ctx, &req, nil); err != nil {
			return nil, err
		}
	default: // a signature covers a request: there is none to sign here
		return nil, fmt.Errorf("%w: upstream %s signs its calls", errNoWebSocket, u.Name)
	}
	out := http.Header{}
	for k, v := range h.All() {
		if ks := string(k); ks != "Host" {
			out[ks] = append(out[ks], string(v))
		}
	}
	return out, nil
}

// wsUpstream is one agent session's socket toward the upstream: dialled by
// openSocket or by the first turn that finds none.
type wsUpstream struct {
	u   *Upstream
	url string
	hdr http.Header

	mu     sync.Mutex
	sock   *wsSocket   // nil: the next turn dials
	head   http.Header // the last upgrade's answer (its 101) headers
	busy   bool        // a turn is in flight
	closed bool
}

// dial opens a socket within the call's deadline; its cancel stops it. A refused
// upgrade is an *Error that says so, and under auto marks the upstream HTTP-only.
func (w *wsUpstream) dial(ctx context.Context, call *upCall) (*wsSocket, error) {
	u := w.u
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // the handshake takes no cancel of ours but a context's
		select {
		case <-call.stopped():
			cancel()
		case <-ctx.Done():
		}
	}()
	d := websocket.Dialer{
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := u.dialRaw(ctx, call, network, addr)
			if err != nil {
				return nil, err
			}
			// The call's deadline and cancel bound the TLS handshake and the upgrade.
			if !call.attach(c) {
				_ = c.Close()
				return nil, errUpstreamCancelled
			}
			return c, nil
		},
		// No Proxy: dialRaw takes the route the upstream's HTTP calls take.
		TLSClientConfig:   clientTLS(u.TLS, u.Base.Hostname()),
		EnableCompression: true, // as Codex asks: a first turn's input is the whole context
		ReadBufferSize:    4 << 10,
		WriteBufferSize:   16 << 10,
	}
	conn, resp, err := d.DialContext(ctx, w.url, w.hdr)
	if call.detach() && err == nil {
		_ = conn.Close()
		err = errUpstreamCancelled
	}
	if err == nil {
		w.mu.Lock()
		w.head = resp.Header
		w.mu.Unlock()
		return newWSSocket(conn), nil
	}
	if resp == nil {
		return nil, upstreamError(u.Base.Host, call.failure(err, "no WebSocket upgrade within "+u.FirstByteTimeout.String()+" (first_byte_timeout)"))
	}
	return nil, u.refused(resp)
}

// dialRaw connects to addr as the upstream's HTTP calls do: its pool's dialer when
// one is set (tests), else within the time left of the call, directly or through the
// proxy's tunnel (the route of Base's host, dialer.go).
func (u *Upstream) dialRaw(ctx context.Context, call *upCall, network, addr string) (net.Conn, error) {
	if hc := u.own.Load(); hc != nil && hc.Dial != nil {
		return hc.Dial(addr)
	}
	wait := call.timeLeft(connectTimeout)
	if wait <= 0 {
		return nil, &timeoutError{"no time left to connect"}
	}
	switch {
	case u.base.err != nil:
		return nil, u.base.err
	case u.base.tunnel != nil:
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		return u.base.tunnel.dialContext(ctx, addr)
	}
	return (&net.Dialer{Timeout: wait, KeepAlive: 30 * time.Second}).DialContext(ctx, network, addr)
}

// refusesMode says whether a status refusing an upgrade means the upstream has no
// WebSocket mode there (rather than refusing this client: 401, 403, 429, 5xx).
func refusesMode(status int) bool {
	switch status {
	case http.StatusSwitchingProtocols, // a 101 that is no WebSocket handshake
		http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed,
		http.StatusUpgradeRequired, http.StatusNotImplemented:
		return true
	}
	return false
}

// refused is the error of an upgrade answered resp; under auto a refusal of the mode
// marks the upstream HTTP-only for wsRefusalTTL.
func (u *Upstream) refused(resp *http.Response) *Error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	what := fmt.Sprintf("upstream %s answered the WebSocket upgrade %s", u.Base.Host, resp.Status)
	if msg := gjson.GetBytes(body, "error.message").String(); msg != "" {
		what += ": " + msg
	}
	if !refusesMode(resp.StatusCode) {
		return &Error{Status: resp.StatusCode, Type: "upstream_error", Msg: what}
	}
	if u.WebSocket == WSAuto {
		u.wsRefused.Store(u.clock().Add(wsRefusalTTL).UnixNano())
	}
	return &Error{Status: http.StatusBadGateway, Type: "upstream_error",
		Msg: what + fmt.Sprintf(" (no WebSocket mode there; upstreams.%s.websocket: auto or false sends the turns over HTTP)", u.Name)}
}

// turn sends one response.create and reads the answer's first event within
// first_byte_timeout. A socket that served an earlier turn may have been closed by
// the upstream while it rested (its hour is up, or it went idle): a turn that finds
// it so before any event is sent once more on a new socket, as HTTP clients retry
// on a new connection.
func (w *wsUpstream) turn(ctx context.Context, call *upCall, body []byte) (exchange, error) {
	u := w.u
	if u.FirstByteTimeout > 0 {
		call.setDeadline(time.Now().Add(u.FirstByteTimeout))
	}
	msg, err := createMessage(body)
	if err != nil {
		return nil, requestError(err)
	}
	w.mu.Lock()
	switch {
	case w.closed:
		w.mu.Unlock()
		return nil, &Error{Status: http.StatusBadGateway, Type: "upstream_error", Msg: "the session's upstream socket is closed"}
	case w.busy:
		w.mu.Unlock()
		return nil, &Error{Status: http.StatusConflict, Type: "invalid_request_error", Msg: "a response is already in flight on this socket: one at a time"}
	}
	w.busy = true
	sock := w.sock
	w.mu.Unlock()
	for attempt := 0; ; attempt++ {
		fresh := sock == nil || sock.gone()
		if fresh {
			if sock, err = w.dial(ctx, call); err != nil {
				w.finish(nil, false)
				return nil, err
			}
		}
		first, err := sock.start(call, msg)
		if err == nil && !fresh && attempt == 0 && limitReached(first) {
			err = errConnLimit
		}
		if err == nil {
			w.mu.Lock()
			w.sock = sock
			w.mu.Unlock()
			x := &wsExchange{w: w, s: sock, call: call}
			x.h.SetStatusCode(http.StatusOK)
			x.h.SetContentType("text/event-stream; charset=utf-8")
			x.take(first)
			return x, nil
		}
		sock.close(websocket.CloseNormalClosure, "")
		if fresh || attempt > 0 || call.cancelled() != nil || call.expired() || !restClosed(err) {
			w.finish(nil, false)
			return nil, upstreamError(u.Base.Host, call.failure(err, "no first event within "+u.FirstByteTimeout.String()+" (first_byte_timeout)"))
		}
		sock = nil
	}
}

// errConnLimit is a socket the upstream will take no more turns on (OpenAI's hour).
var errConnLimit = errors.New("the upstream's socket reached its connection limit")

// limitReached says whether a turn's first event is OpenAI's refusal of a socket
// past its time limit (a new socket takes the turn).
func limitReached(ev []byte) bool {
	return gjson.GetBytes(ev, "type").String() == "error" &&
		gjson.GetBytes(ev, "error.code").String() == "websocket_connection_limit_reached"
}

// restClosed says whether err is what a socket the upstream closed while it rested
// gives: a close frame (or, when the reader answered it while the turn wrote, the
// library's "close sent"), an EOF or a reset, or the connection limit.
func restClosed(err error) bool {
	var ce *websocket.CloseError
	return errors.As(err, &ce) || errors.Is(err, websocket.ErrCloseSent) || idleClosed(err) ||
		errors.Is(err, errConnLimit) || errors.Is(err, net.ErrClosed)
}

// finish ends a turn: the socket is kept for the next when keep, else closed (it
// holds a response half read, or none at all).
func (w *wsUpstream) finish(s *wsSocket, keep bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.busy = false
	if keep && !w.closed {
		return
	}
	if s != nil {
		s.close(websocket.CloseNormalClosure, "")
	}
	if w.sock == s {
		w.sock = nil
	}
}

// send writes a client event as it is, on the session's socket.
func (w *wsUpstream) send(ctx context.Context, msg []byte) error {
	w.mu.Lock()
	s := w.sock
	w.mu.Unlock()
	if s == nil || s.gone() {
		return errors.New("no upstream socket is open to pass the event to")
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(connectTimeout)
	}
	if err := s.write(msg, deadline, nil); err != nil {
		return fmt.Errorf("passing a client event upstream: %w", err)
	}
	return nil
}

func (w *wsUpstream) upgradeHeader() http.Header {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.head
}

func (w *wsUpstream) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.sock != nil {
		w.sock.close(websocket.CloseNormalClosure, "")
		w.sock = nil
	}
}

// wsSocket is one open socket. A goroutine of its own reads it the whole time, so
// that pings are answered and a close is seen between turns too; it hands each text
// message to the turn in flight, one at a time (the upstream is held back, as an
// HTTP stream is, while the agent reads slowly).
type wsSocket struct {
	conn *websocket.Conn
	msgs chan []byte
	dead chan struct{} // closed when the reader stops
	err  error         // why it stopped; read after dead is closed
	stop chan struct{} // closed by close
	once sync.Once
	wmu  sync.Mutex // one writer at a time
}

func newWSSocket(conn *websocket.Conn) *wsSocket {
	conn.SetReadLimit(maxResponseBytes)
	s := &wsSocket{conn: conn, msgs: make(chan []byte), dead: make(chan struct{}), stop: make(chan struct{})}
	go s.read()
	return s
}

func (s *wsSocket) read() {
	defer close(s.dead)
	for {
		typ, msg, err := s.conn.ReadMessage()
		if err != nil {
			s.err = err
			return
		}
		if typ != websocket.TextMessage {
			s.err = &badAnswerError{"a binary WebSocket message (the mode's events are text)"}
			return
		}
		select {
		case s.msgs <- msg:
		case <-s.stop:
			s.err = net.ErrClosed
			return
		}
	}
}

func (s *wsSocket) gone() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

// close sends a close frame (briefly: the upstream may be what is stuck) and closes
// the connection; the reader then stops.
func (s *wsSocket) close(code int, reason string) {
	s.once.Do(func() {
		close(s.stop)
		_ = s.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
		_ = s.conn.Close()
	})
}

// write sends one text message by deadline (zero: none); a stop that closes
// abandons it.
func (s *wsSocket) write(msg []byte, deadline time.Time, stop <-chan struct{}) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if stop != nil {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-stop:
				_ = s.conn.NetConn().SetWriteDeadline(past)
			case <-done:
			}
		}()
	}
	_ = s.conn.SetWriteDeadline(deadline)
	return s.conn.WriteMessage(websocket.TextMessage, msg)
}

// start sends a turn's message and waits for its first event. Messages left from
// before (answers to events passed outside a turn) are no part of it: dropped.
func (s *wsSocket) start(call *upCall, msg []byte) ([]byte, error) {
	for drained := false; !drained; {
		select {
		case <-s.msgs:
		default:
			drained = true
		}
	}
	if err := s.write(msg, call.when(), call.stopped()); err != nil {
		return nil, err
	}
	return s.next(call)
}

// next waits for the next message until the call's deadline or its cancel.
func (s *wsSocket) next(call *upCall) ([]byte, error) {
	var timeout <-chan time.Time
	if d := call.when(); !d.IsZero() {
		t := time.NewTimer(time.Until(d))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case m := <-s.msgs:
		return m, nil
	case <-s.dead:
		var ce *websocket.CloseError
		if errors.As(s.err, &ce) {
			return nil, fmt.Errorf("upstream closed the socket (%w)", s.err)
		}
		return nil, s.err
	case <-call.stopped():
		return nil, errUpstreamCancelled
	case <-timeout:
		return nil, &timeoutError{"no event by the deadline"}
	}
}

// when is the call's deadline (zero: none).
func (c *upCall) when() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline
}

// wsExchange is one turn's answer: the upstream's messages as SSE events.
type wsExchange struct {
	w       *wsUpstream
	s       *wsSocket
	call    *upCall
	h       fasthttp.ResponseHeader
	frame   []byte // the current event as SSE
	pending []byte // what of frame is not read yet
	ended   bool   // the turn's last event was taken
	err     error
}

func (x *wsExchange) head() *fasthttp.ResponseHeader { return &x.h }

// take frames an upstream message as the next event.
func (x *wsExchange) take(msg []byte) {
	var last bool
	x.frame, last = appendEvent(x.frame[:0], msg)
	x.pending = x.frame
	x.ended = x.ended || last
}

// Read returns the current event's bytes, then waits for the next message (under
// the deadline the relay set: idle_timeout); io.EOF after the turn's last event.
func (x *wsExchange) Read(p []byte) (int, error) {
	if len(x.pending) == 0 {
		switch {
		case x.ended:
			return 0, io.EOF
		case x.err != nil:
			return 0, x.err
		}
		msg, err := x.s.next(x.call)
		if err != nil {
			x.err = fmt.Errorf("upstream socket broke mid-turn: %w", err)
			return 0, x.err
		}
		x.take(msg)
	}
	n := copy(p, x.pending)
	x.pending = x.pending[n:]
	return n, nil
}

// release ends the turn. The socket is kept when the upstream finished its
// response, even if the agent did not read all of it: nothing of the turn is left
// on the socket.
func (x *wsExchange) release(bool) {
	x.w.finish(x.s, x.ended && x.err == nil)
}

// createMessage is the response.create message of a POST /v1/responses body: the
// same fields without "stream" (a socket always streams), "type" first. A key given
// twice is dropped each time: no later copy may override the message's own.
func createMessage(body []byte) ([]byte, error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, errors.New("a response.create needs a JSON object body")
	}
	out := trimmed
	for _, key := range [...]string{"stream", "type"} {
		for gjson.GetBytes(out, key).Exists() {
			var err error
			if out, err = sjson.DeleteBytes(out, key); err != nil {
				return nil, fmt.Errorf("dropping %s: %w", key, err)
			}
		}
	}
	rest := bytes.TrimLeft(out[1:], " \t\r\n")
	msg := make([]byte, 0, len(out)+len(`{"type":"response.create",`))
	msg = append(msg, `{"type":"response.create"`...)
	if len(rest) > 0 && rest[0] != '}' {
		msg = append(msg, ',')
	}
	return append(msg, rest...), nil
}

// eventType is an upstream message's type, "" when it has none usable as an SSE
// event name (not a string, or one holding a line break).
func eventType(msg []byte) string {
	v := gjson.GetBytes(msg, "type")
	if v.Type != gjson.String || strings.ContainsAny(v.Str, "\r\n") {
		return ""
	}
	return v.Str
}

// lastEvent says whether an event of type typ ends a turn: the response's end, or
// an error (the turn's refusal).
func lastEvent(typ string) bool {
	switch typ {
	case "response.completed", "response.failed", "response.incomplete", "response.done", "error":
		return true
	}
	return false
}

// appendEvent appends msg as one SSE event, `event: <type>` then a data line per
// line of msg (JSON's own line breaks are whitespace: an SSE reader joins the lines
// with \n, which reads as the same JSON), and says whether it ends the turn.
func appendEvent(dst, msg []byte) ([]byte, bool) {
	typ := eventType(msg)
	if typ != "" {
		dst = append(dst, "event: "...)
		dst = append(dst, typ...)
		dst = append(dst, '\n')
	}
	for {
		i := bytes.IndexAny(msg, "\r\n")
		if i < 0 {
			break
		}
		dst = append(append(append(dst, "data: "...), msg[:i]...), '\n')
		if msg[i] == '\r' && i+1 < len(msg) && msg[i+1] == '\n' {
			i++
		}
		msg = msg[i+1:]
	}
	dst = append(append(append(dst, "data: "...), msg...), "\n\n"...)
	return dst, lastEvent(typ)
}
