package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/app"
	"github.com/camproxy/camproxy/internal/testkit"
)

// The WebSocket row: the Responses API's WebSocket mode through camproxy against the
// same turns over HTTP (POST /v1/responses, "stream": true) through camproxy, in the
// same run against the same fake upstream. The tau-bench conversations become
// Responses sessions: the system prompt the instructions, the user messages and tool
// results input items, and the upstream answers each turn with the assistant message
// the agent really got (function calls or text). A client sends as Codex does, with
// "store": false: over HTTP the whole conversation every turn (the upstream's output
// items included, as received); over the socket the first turn whole, then only the
// new items and previous_response_id. Sessions run one at a time, the paths taking
// turns session by session so that machine noise hits them alike; a turn's time runs
// from the send to its response.completed.
//
// Two upstreams, both internal/testkit's Responses fake: one serving WebSocket mode
// itself (OpenAI, xAI: camproxy opens a socket of its own per session) and one that
// refuses the upgrade 405 (vLLM: camproxy sends each socket turn as an HTTP stream and
// expands continuations from the session's items). Its events come back to back after
// the fixed latency: pacing would add the same wall time to every path.

// wsConv is a tau-bench conversation as a Responses session.
type wsConv struct {
	id    int
	instr string // the system prompt
	turns []wsTurn
}

// wsTurn is one call: the input items new since the last answer, and the answer.
// whole is how many items the upstream must see in the conversation (every earlier
// turn's input and output, then these items): a continuation that did not reach it
// whole is refused, so that each path is timed doing the same work.
type wsTurn struct {
	items []json.RawMessage
	reply testkit.Reply
	whole int
}

// toWSConv turns a conversation's chat messages into Responses turns. It stops before
// a turn with no new input (two answers in a row), which a session cannot send.
func toWSConv(c *conv) *wsConv {
	wc := &wsConv{id: c.id, instr: gjson.GetBytes(c.msgs[0], "content").String()}
	from, whole := 1, 0
	for _, at := range c.turns {
		var items []json.RawMessage
		for _, raw := range c.msgs[from:at] {
			m := gjson.ParseBytes(raw)
			switch m.Get("role").String() {
			case "user":
				items = append(items, mustJSON(map[string]any{"type": "message", "role": "user",
					"content": []any{map[string]any{"type": "input_text", "text": m.Get("content").String()}}}))
			case "tool":
				items = append(items, mustJSON(map[string]any{"type": "function_call_output",
					"call_id": m.Get("tool_call_id").String(), "output": m.Get("content").String()}))
			}
		}
		if len(items) == 0 {
			break
		}
		a := gjson.ParseBytes(c.msgs[at])
		rep := testkit.Reply{Content: a.Get("content").String()}
		for _, tc := range a.Get("tool_calls").Array() {
			rep.ToolCalls = append(rep.ToolCalls, testkit.ToolCall{ID: tc.Get("id").String(),
				Name: tc.Get("function.name").String(), Arguments: tc.Get("function.arguments").String()})
		}
		whole += len(items)
		wc.turns = append(wc.turns, wsTurn{items: items, reply: rep, whole: whole})
		whole += len(rep.ToolCalls)
		if rep.Content != "" {
			whole++ // the message item, before the calls
		}
		from = at + 1
	}
	return wc
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// createBody renders turn t of one instance of the session: the instance's tag in the
// instructions makes it an episode of its own while its task stays the one the CAM
// cache was warmed on; metadata.bench_reply tells the upstream which answer to give.
// ws: a response.create event (no "stream"); prev, when set, the previous response's
// id. Otherwise a POST /v1/responses body whose input is history then the new items.
func (wc *wsConv) createBody(t int, instance uint64, ws bool, prev string, history []json.RawMessage) []byte {
	b := []byte(`{`)
	if ws {
		b = append(b, `"type":"response.create",`...)
	}
	b = append(b, `"model":"gpt-4o","store":false,"instructions":`...)
	b = strconv.AppendQuote(b, wc.instr+"\n\nSession "+strconv.FormatUint(instance, 10))
	b = append(b, `,"metadata":{"bench_reply":"`...)
	b = strconv.AppendInt(b, int64(wc.id), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(t), 10)
	b = append(b, `"}`...)
	if !ws {
		b = append(b, `,"stream":true`...)
	}
	if prev != "" {
		b = append(b, `,"previous_response_id":`...)
		b = strconv.AppendQuote(b, prev)
	}
	b = append(b, `,"input":[`...)
	for i, it := range slices.Concat(history, wc.turns[t].items) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	return append(b, "]}"...)
}

// wsTiming is one turn as the client saw it.
type wsTiming struct{ ttfb, total time.Duration }

// wsClient runs whole sessions one way: over HTTP (hc set) or over a socket (url).
type wsClient struct {
	name      string
	transport string // "http" or "websocket"
	addr      string
	hc        *fasthttp.HostClient
}

func newWSClient(name, transport, addr string) *wsClient {
	c := &wsClient{name: name, transport: transport, addr: addr}
	if transport == "http" {
		c.hc = newTarget(name, addr).hc
	}
	return c
}

// session runs every turn of one instance of wc; on an error the session ends there.
// dial is the socket's handshake (zero over HTTP).
func (c *wsClient) session(wc *wsConv, instance uint64) (dial time.Duration, turns []wsTiming, err error) {
	if c.transport == "http" {
		var history []json.RawMessage
		for t := range wc.turns {
			tm, out, err := c.httpTurn(wc.createBody(t, instance, false, "", history))
			if err != nil {
				return 0, turns, fmt.Errorf("%s turn %d: %w", c.name, t+1, err)
			}
			turns = append(turns, tm)
			history = append(append(history, wc.turns[t].items...), out...)
		}
		return 0, turns, nil
	}
	t0 := time.Now()
	ws, resp, err := websocket.DefaultDialer.Dial("ws://"+c.addr+"/v1/responses", http.Header{"Authorization": {"Bearer sk-bench"}})
	if err != nil {
		if resp != nil {
			err = fmt.Errorf("%w (status %d)", err, resp.StatusCode)
		}
		return 0, nil, fmt.Errorf("%s dial: %w", c.name, err)
	}
	dial = time.Since(t0)
	defer func() { _ = ws.Close() }()
	prev := ""
	for t := range wc.turns {
		tm, id, err := socketTurn(ws, wc.createBody(t, instance, true, prev, nil))
		if err != nil {
			return dial, turns, fmt.Errorf("%s turn %d: %w", c.name, t+1, err)
		}
		turns = append(turns, tm)
		prev = id
	}
	_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	return dial, turns, nil
}

// httpTurn posts one streamed turn and reads its SSE events up to response.completed;
// it returns the response's output items, which the next turn sends back.
func (c *wsClient) httpTurn(body []byte) (wsTiming, []json.RawMessage, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	setPost(req, c.addr, "/v1/responses")
	req.Header.Set("Accept", "text/event-stream")
	req.SetBodyRaw(body)
	var tm wsTiming
	t0 := time.Now()
	if err := c.hc.Do(req, resp); err != nil {
		return tm, nil, err
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return tm, nil, fmt.Errorf("status %d: %.200s", resp.StatusCode(), resp.Body())
	}
	var r io.Reader = resp.BodyStream()
	if r == nil {
		r = bytes.NewReader(resp.Body())
	}
	br := bufio.NewReaderSize(r, 16<<10)
	for {
		line, err := br.ReadSlice('\n')
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			if tm.ttfb == 0 {
				tm.ttfb = time.Since(t0)
			}
			switch typ := gjson.GetBytes(data, "type").String(); typ {
			case "response.completed":
				tm.total = time.Since(t0)
				var out []json.RawMessage
				for _, it := range gjson.GetBytes(data, "response.output").Array() {
					out = append(out, json.RawMessage(it.Raw))
				}
				_, _ = io.Copy(io.Discard, br) // the stream ends here: the connection is reused
				return tm, out, nil
			case "error", "response.failed", "response.incomplete":
				return tm, nil, fmt.Errorf("%s: %.200s", typ, data)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			return tm, nil, fmt.Errorf("an SSE line over %d bytes", br.Size())
		}
		if err != nil {
			return tm, nil, fmt.Errorf("stream ended before response.completed: %w", err)
		}
	}
}

// socketTurn sends one response.create and reads its events, one message each, up to
// response.completed; it returns the response's id, which the next turn continues.
func socketTurn(ws *websocket.Conn, msg []byte) (wsTiming, string, error) {
	var tm wsTiming
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	t0 := time.Now()
	if err := ws.WriteMessage(websocket.TextMessage, msg); err != nil {
		return tm, "", err
	}
	for {
		_, ev, err := ws.ReadMessage()
		if err != nil {
			return tm, "", err
		}
		if tm.ttfb == 0 {
			tm.ttfb = time.Since(t0)
		}
		switch typ := gjson.GetBytes(ev, "type").String(); typ {
		case "response.completed":
			tm.total = time.Since(t0)
			return tm, gjson.GetBytes(ev, "response.id").String(), nil
		case "error", "response.failed", "response.incomplete":
			return tm, "", fmt.Errorf("%s: %.200s", typ, ev)
		}
	}
}

// WSResult is the WebSocket row: per upstream, every path's time per turn.
type WSResult struct {
	Sessions int       `json:"sessions_per_path"`
	Turns    int       `json:"turns_per_path"`
	Modes    []*WSMode `json:"upstreams"`
	Seconds  float64   `json:"seconds"` // the row's run time, warm-up included
}

// WSMode is one upstream. Added = a camproxy path's per-turn median minus the direct
// path's of the same transport (direct-http where the upstream serves no socket);
// WSMinusHTTP compares camproxy's two transports' turns outright.
type WSMode struct {
	Upstream        string    `json:"upstream"` // "websocket" or "http-only"
	Paths           []*WSPath `json:"paths"`
	WSMinusHTTPP50  float64   `json:"camproxy_ws_minus_http_p50_us"`
	WSMinusHTTPP99  float64   `json:"camproxy_ws_minus_http_p99_us"`
	AddedRatioP50   float64   `json:"camproxy_added_ws_over_http_p50"`
	UpstreamSockets int       `json:"upstream_sockets"` // sockets the upstream accepted over the measured sessions
	UpstreamCalls   int       `json:"upstream_http_calls"`
}

// WSPath is one path on one upstream, every turn of every session (µs).
type WSPath struct {
	Path       string  `json:"path"`
	Transport  string  `json:"transport"`
	Sessions   int     `json:"sessions"`
	Turns      int     `json:"turns"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	P50        float64 `json:"turn_p50_us"`
	P99        float64 `json:"turn_p99_us"`
	TTFBP50    float64 `json:"first_event_p50_us"`
	AddedP50   float64 `json:"added_p50_us"`
	AddedP99   float64 `json:"added_p99_us"`
	DialP50    float64 `json:"dial_p50_us,omitempty"`
}

// wsBench measures the WebSocket row: sessions sessions per path of the conversations
// in turn, on an upstream serving WebSocket mode and on an HTTP-only one, each behind
// a camproxy of its own (the harness's config: CAM arm, file replay sink in dir).
func wsBench(convs []*conv, sessions int, latency time.Duration, camURL, dir string) (*WSResult, error) {
	var wcs []*wsConv
	for _, c := range convs {
		if wc := toWSConv(c); len(wc.turns) > 0 {
			wcs = append(wcs, wc)
		}
	}
	if len(wcs) == 0 {
		return nil, errors.New("no conversation makes a Responses session")
	}
	wcs = wcs[:min(len(wcs), sessions)] // the ones the sessions replay: warmed, and no more
	byID := map[string]*wsConv{}
	for _, wc := range wcs {
		byID[strconv.Itoa(wc.id)] = wc
	}
	reply := func(body gjson.Result, conversation []gjson.Result) testkit.Reply {
		ci, ti, _ := strings.Cut(body.Get("metadata.bench_reply").String(), ".")
		t, err := strconv.Atoi(ti)
		wc := byID[ci]
		if wc == nil || err != nil || t < 0 || t >= len(wc.turns) {
			return testkit.Reply{Status: http.StatusBadRequest, ErrorMsg: "bench: unknown metadata.bench_reply"}
		}
		if n := wc.turns[t].whole; len(conversation) != n {
			return testkit.Reply{Status: http.StatusBadRequest, ErrorMsg: fmt.Sprintf("bench: turn %d arrived with %d items, want %d", t+1, len(conversation), n)}
		}
		return wc.turns[t].reply
	}
	res := &WSResult{Sessions: sessions}
	for _, mode := range []string{"websocket", "http-only"} {
		up := testkit.NewUpstream()
		up.Configure(func(u *testkit.Upstream) {
			u.RespondTo, u.Delay = reply, latency
			if mode == "http-only" {
				u.RefuseUpgrade = http.StatusMethodNotAllowed // as vLLM answers it
			}
		})
		m, err := wsMode(mode, up, wcs, sessions, camURL, dir+"/ws-"+mode)
		up.Close()
		if err != nil {
			return nil, fmt.Errorf("upstream %s: %w", mode, err)
		}
		res.Modes = append(res.Modes, m)
		res.Turns = m.Paths[0].Turns
	}
	return res, nil
}

func wsMode(mode string, up *testkit.Upstream, wcs []*wsConv, sessions int, camURL, dir string) (*WSMode, error) {
	upAddr := strings.TrimPrefix(up.URL, "http://")
	cp, err := startCamproxy(upAddr, camURL, dir, nil)
	if err != nil {
		return nil, err
	}
	defer shutdown(cp)
	clients := []*wsClient{newWSClient("direct-http", "http", upAddr)}
	if mode == "websocket" {
		clients = append(clients, newWSClient("direct-ws", "websocket", upAddr))
	}
	clients = append(clients, newWSClient("camproxy-http", "http", cp.Addr()), newWSClient("camproxy-ws", "websocket", cp.Addr()))
	if err := wsWarm(cp, clients, wcs); err != nil {
		return nil, err
	}
	sockets0, calls0 := up.UpgradeAttempts(), len(up.Requests())
	type acc struct {
		turns, ttfb, dial []time.Duration
		sessions, errs    int
		firstErr          string
	}
	accs := make([]acc, len(clients))
	for s := range sessions {
		wc := wcs[s%len(wcs)]
		for j := range clients {
			i := (j + s) % len(clients) // rotate who goes first
			dial, ts, err := clients[i].session(wc, instances.Add(1))
			a := &accs[i]
			a.sessions++
			for _, t := range ts {
				a.turns, a.ttfb = append(a.turns, t.total), append(a.ttfb, t.ttfb)
			}
			if dial > 0 {
				a.dial = append(a.dial, dial)
			}
			if err != nil {
				a.errs++
				if a.firstErr == "" {
					a.firstErr = err.Error()
				}
			}
		}
	}
	m := &WSMode{Upstream: mode, UpstreamSockets: up.UpgradeAttempts() - sockets0, UpstreamCalls: len(up.Requests()) - calls0}
	byName := map[string]*WSPath{}
	for i, c := range clients {
		a := accs[i]
		for _, s := range [][]time.Duration{a.turns, a.ttfb, a.dial} {
			slices.Sort(s)
		}
		p := &WSPath{Path: c.name, Transport: c.transport, Sessions: a.sessions, Turns: len(a.turns), Errors: a.errs, FirstError: a.firstErr,
			P50: us(pct(a.turns, .5)), P99: us(pct(a.turns, .99)), TTFBP50: us(pct(a.ttfb, .5)), DialP50: us(pct(a.dial, .5))}
		m.Paths = append(m.Paths, p)
		byName[c.name] = p
	}
	for _, p := range m.Paths {
		base := byName["direct-http"]
		if d := byName["direct-ws"]; d != nil && p.Transport == "websocket" {
			base = d
		}
		p.AddedP50, p.AddedP99 = p.P50-base.P50, p.P99-base.P99
	}
	h, w := byName["camproxy-http"], byName["camproxy-ws"]
	m.WSMinusHTTPP50, m.WSMinusHTTPP99 = w.P50-h.P50, w.P99-h.P99
	m.AddedRatioP50 = ratio(w.AddedP50, h.AddedP50)
	return m, nil
}

// wsWarm sends every conversation's first turn through camproxy over HTTP (the CAM is
// called once per task; the cache is warm after) and one socket session's first turn
// (camproxy detects whether the upstream serves WebSocket mode, and caches it), then
// a session of the first conversation through each path.
func wsWarm(cp *app.App, clients []*wsClient, wcs []*wsConv) error {
	for _, c := range clients {
		if c.addr != cp.Addr() || c.transport != "http" {
			continue
		}
		for _, wc := range wcs {
			if _, _, err := c.httpTurn(wc.createBody(0, instances.Add(1), false, "", nil)); err != nil {
				return fmt.Errorf("warm-up, %s: %w", c.name, err)
			}
		}
	}
	for _, c := range clients {
		if _, _, err := c.session(wcs[0], instances.Add(1)); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	return nil
}

func (e *env) printWS() {
	r := e.res.WebSocket
	e.printf("== WebSocket mode: a Responses session's turns over a socket vs the same turns over HTTP (stream: true), %d sessions per path, %d turns (%.1fs) ==\n",
		r.Sessions, r.Turns, r.Seconds)
	e.printf("(time per turn: send → response.completed, µs; added = path − direct of the same transport, direct-http where the upstream serves no socket)\n")
	for _, m := range r.Modes {
		what := "upstream serves WebSocket mode (OpenAI, xAI): camproxy relays to a socket of its own"
		if m.Upstream == "http-only" {
			what = "upstream HTTP-only, upgrade refused 405 (vLLM): camproxy sends each socket turn as an HTTP stream"
		}
		e.printf("%s — upstream saw %d upgrades, %d HTTP calls\n", what, m.UpstreamSockets, m.UpstreamCalls)
		e.printf("%-14s %5s %4s %8s %8s %8s %8s %10s %8s\n", "path", "turns", "err", "p50", "p99", "+p50", "+p99", "1st event", "dial")
		for _, p := range m.Paths {
			e.printf("%-14s %5d %4d %8.0f %8.0f %8.0f %8.0f %10.0f %8.0f\n", p.Path, p.Turns, p.Errors, p.P50, p.P99, p.AddedP50, p.AddedP99, p.TTFBP50, p.DialP50)
			if p.FirstError != "" {
				e.printf("               first error: %.200s\n", p.FirstError)
			}
		}
		e.printf("camproxy-ws − camproxy-http per turn: p50 %+.0f µs, p99 %+.0f µs; camproxy's added time ws/http %.2fx\n",
			m.WSMinusHTTPP50, m.WSMinusHTTPP99, m.AddedRatioP50)
	}
	e.printf("\n")
}
