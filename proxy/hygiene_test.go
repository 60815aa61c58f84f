package proxy

import (
	"bufio"
	"context"
	"fmt"
	"github.com/camproxy/camproxy/protocol/registry"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// Connection hygiene (issue 27): after an answer camproxy cannot frame as HTTP/1.1
// defines it, or one to a call it abandoned, the upstream connection is closed, never
// pooled: the next call must not be written onto a connection whose next bytes
// answer something else. Each case plays one abnormal answer on the upstream's first
// connection, then sends 20 normal calls through the same pool. The upstream is a
// script on loopback TCP (the pool's staleness check peeks at real sockets), and
// each normal answer echoes its call's number, so an answer read off a poisoned
// connection is caught as the wrong one, not only as a slow one.

// hygieneUpstream answers every call normally except the first call of its first
// connection, which bad plays. It keeps, per connection, the calls read and whether
// the proxy closed it.
type hygieneUpstream struct {
	ln  net.Listener
	bad func(conn net.Conn, hu *hygieneUpstream)
	// playing is closed when the bad call was read; next by the test once the bad
	// call's outcome was seen (for bytes the upstream sends after that); played by
	// bad once those bytes are written.
	playing, next, played chan struct{}

	mu    sync.Mutex
	conns []*hygieneConn
}

type hygieneConn struct {
	calls  int
	closed chan struct{} // closed when the proxy closed the connection
}

func newHygieneUpstream(t *testing.T, bad func(net.Conn, *hygieneUpstream)) *hygieneUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hu := &hygieneUpstream{ln: ln, bad: bad, playing: make(chan struct{}), next: make(chan struct{}), played: make(chan struct{})}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			hu.mu.Lock()
			hc := &hygieneConn{closed: make(chan struct{})}
			first := len(hu.conns) == 0
			hu.conns = append(hu.conns, hc)
			hu.mu.Unlock()
			go hu.serve(conn, hc, first)
		}
	}()
	return hu
}

func (hu *hygieneUpstream) serve(conn net.Conn, hc *hygieneConn, first bool) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	for {
		var req fasthttp.Request
		if err := req.Read(br); err != nil {
			close(hc.closed) // EOF or reset: the proxy closed it
			return
		}
		hu.mu.Lock()
		hc.calls++
		n := hc.calls
		hu.mu.Unlock()
		if first && n == 1 {
			close(hu.playing)
			hu.bad(conn, hu)
			// What comes next on this connection: nothing but its close, or another
			// call written onto it (the bug), counted and answered normally.
			continue
		}
		if _, err := conn.Write(normalAnswer(&req)); err != nil {
			return
		}
	}
}

// normalAnswer is a complete chat answer echoing the call's X-Call number: streamed
// (chunked SSE) when the call asked for a stream.
func normalAnswer(req *fasthttp.Request) []byte {
	id := string(req.Header.Peek("X-Call"))
	if gjson.GetBytes(req.Body(), "stream").Bool() {
		ev := `data: {"id":"call-` + id + `","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}` + "\n\n" +
			`data: {"id":"call-` + id + `","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"
		return []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
			strconv.FormatInt(int64(len(ev)), 16) + "\r\n" + ev + "\r\n0\r\n\r\n")
	}
	body := `{"id":"call-` + id + `","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`
	return []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// conn returns the i-th connection the upstream accepted.
func (hu *hygieneUpstream) conn(i int) *hygieneConn {
	hu.mu.Lock()
	defer hu.mu.Unlock()
	if i >= len(hu.conns) {
		return nil
	}
	return hu.conns[i]
}

// hygieneProxy serves forward on loopback TCP (a real socket, so that a departed
// agent is seen) to the upstream at addr.
func hygieneProxy(t *testing.T, addr string, firstByte, idle time.Duration) string {
	t.Helper()
	base, _ := url.Parse("http://" + addr)
	return serveForward(t, &Upstream{Name: "openai", Base: base, FirstByteTimeout: firstByte, IdleTimeout: idle})
}

// serveForward serves forward to up (a chat route) on loopback TCP and returns its
// base URL.
func serveForward(t *testing.T, up *Upstream) string {
	t.Helper()
	up.init()
	s := newForwardServer()
	srv := &fasthttp.Server{Handler: func(fc *fasthttp.RequestCtx) {
		s.forward(fc, up, fc.PostBody(), false, registry.Chat, nil)
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		s.cancelBase()
		// Bounded: a connection relayed wrong (a 101 passed on) would hold Shutdown.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.ShutdownWithContext(ctx)
	})
	return "http://" + ln.Addr().String()
}

// hygieneCall is one agent call: its status, body, and how long it took.
type hygieneCall struct {
	status int
	body   string
	took   time.Duration
	err    error
}

func callProxy(ctx context.Context, hc *http.Client, base string, n int, stream bool) hygieneCall {
	body := fmt.Sprintf(`{"model":"gpt-4o","messages":[{"role":"user","content":"call %d"}],"stream":%t}`, n, stream)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Call", strconv.Itoa(n))
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return hygieneCall{err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return hygieneCall{status: resp.StatusCode, body: string(b), err: err, took: time.Since(start)}
}

// TestHardeningBadAnswerNeverPooled: each abnormal answer gets its call a clear error
// (or, for an answer that was whole, the answer) in the OpenAI error shape, the
// upstream sees that connection closed, and the 20 calls that follow at once all
// answer 200 with their own answers, none of them sent on the bad connection.
func TestHardeningBadAnswerNeverPooled(t *testing.T) {
	const firstByte, idle = 3 * time.Second, time.Second
	write := func(raw string) func(net.Conn, *hygieneUpstream) {
		return func(conn net.Conn, hu *hygieneUpstream) { _, _ = io.WriteString(conn, raw) }
	}
	chunked := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	event := `data: {"id":"bad","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"half"},"finish_reason":null}]}` + "\n\n"
	stale := normalAnswer(func() *fasthttp.Request {
		var r fasthttp.Request
		r.Header.Set("X-Call", "stale")
		return &r
	}())
	cases := []struct {
		name   string
		stream bool
		bad    func(net.Conn, *hygieneUpstream)
		leave  bool   // the agent leaves before any answer
		late   bool   // bad writes more once the test saw the outcome (it closes played)
		status int    // the bad call's status (0: the agent left)
		want   string // in its body
	}{
		{name: "unasked 101 Switching Protocols", bad: write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x05hello"),
			status: 502, want: "answered 101 Switching Protocols to a call that asked for no protocol switch"},
		{name: "endless interim 1xx answers", bad: write(strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", 12)),
			status: 502, want: "broke HTTP/1.1: more than 10 interim (1xx) answers"},
		{name: "body shorter than its Content-Length, then silence",
			bad:    write("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{\"id\":\"cut"),
			status: 504, want: "idle_timeout"},
		{name: "body shorter than its Content-Length, then closed", bad: func(conn net.Conn, hu *hygieneUpstream) {
			_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{\"id\":\"cut")
			_ = conn.(*net.TCPConn).CloseWrite()
		}, status: 502, want: "unexpected EOF"},
		{name: "chunked stream cut short, then silence", stream: true, bad: write(chunked + strconv.FormatInt(int64(len(event)), 16) + "\r\n" + event + "\r\n"),
			status: 200, want: "event: error\ndata: {\"error\":{\"message\":\"upstream"},
		{name: "answer after first_byte_timeout", bad: func(conn net.Conn, hu *hygieneUpstream) {
			<-hu.next // the agent got its 504: the late answer comes now
			_, _ = conn.Write(stale)
			close(hu.played)
		}, late: true, status: 504, want: "first_byte_timeout"},
		{name: "answer after the agent left", leave: true, late: true, bad: func(conn net.Conn, hu *hygieneUpstream) {
			// The answer comes once camproxy gave up on the call: after it closed the
			// connection, where the answer finds nobody (an answer that comes before
			// is a whole one, rightly read and pooled).
			_, _ = io.Copy(io.Discard, conn)
			_, _ = conn.Write(stale)
			close(hu.played)
		}},
		{name: "bytes after a complete answer, in its write", bad: write(string(normalAnswer(func() *fasthttp.Request {
			var r fasthttp.Request
			r.Header.Set("X-Call", "0")
			return &r
		}())) + string(stale)), status: 200, want: `"id":"call-0"`},
		{name: "bytes after a complete answer, later", bad: func(conn net.Conn, hu *hygieneUpstream) {
			var r fasthttp.Request
			r.Header.Set("X-Call", "0")
			_, _ = conn.Write(normalAnswer(&r))
			<-hu.next // the agent has its answer; the connection rests in the pool
			_, _ = conn.Write(stale)
			close(hu.played)
		}, late: true, status: 200, want: `"id":"call-0"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			hu := newHygieneUpstream(t, c.bad)
			base := hygieneProxy(t, hu.ln.Addr().String(), firstByte, idle)
			// A hang guard, not a measure: a call relayed wrong (a 101 passed on)
			// would otherwise wait for go test's -timeout.
			agent := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

			ctx, leave := context.WithCancel(t.Context())
			badDone := make(chan hygieneCall, 1)
			go func() { badDone <- callProxy(ctx, agent, base, 0, c.stream) }()
			if c.leave {
				<-hu.playing
				leave() // the agent goes while the upstream is silent
			}
			got := <-badDone
			leave()
			switch {
			case c.leave:
				if got.err == nil {
					t.Fatalf("the agent left, yet got %d", got.status)
				}
			case got.err != nil && c.status != 200:
				t.Fatalf("the bad call: %v (after %v)", got.err, got.took)
			case got.status != c.status || !strings.Contains(got.body, c.want):
				t.Fatalf("the bad call got %d %q, want %d with %q", got.status, trimTo(got.body, 300), c.status, c.want)
			}
			if c.status >= 500 {
				if !strings.HasPrefix(got.body, `{"error":{"message":"`) {
					t.Fatalf("the error is not in the OpenAI shape: %s", got.body)
				}
				checkCausesOnce(t, gjson.Get(got.body, "error.message").Str)
			}
			close(hu.next)
			if c.late {
				<-hu.played
			}
			bad := hu.conn(0)

			var worst time.Duration
			for n := 1; n <= 20; n++ {
				r := callProxy(t.Context(), agent, base, n, c.stream)
				worst = max(worst, r.took)
				if r.err != nil || r.status != 200 || !strings.Contains(r.body, fmt.Sprintf(`"id":"call-%d"`, n)) {
					t.Fatalf("normal call %d after the bad one: %d %q %v", n, r.status, trimTo(r.body, 200), r.err)
				}
			}
			select {
			case <-bad.closed:
			case <-time.After(30 * time.Second): // a hang guard
				t.Fatal("the proxy never closed the bad connection")
			}
			hu.mu.Lock()
			calls := bad.calls
			hu.mu.Unlock()
			if calls != 1 {
				t.Fatalf("the bad connection carried %d calls; it must carry only the one answered badly", calls)
			}
			outcome := "agent left (499)"
			switch {
			case c.stream:
				outcome = fmt.Sprintf("%d, then an error event, in %v", got.status, got.took.Round(time.Millisecond))
			case !c.leave:
				outcome = fmt.Sprintf("%d in %v", got.status, got.took.Round(time.Millisecond))
			}
			faultRow(t, "upstream", c.name,
				fmt.Sprintf("%s; connection closed; next 20 calls 200, slowest %v", outcome, worst.Round(time.Millisecond)), "-")
		})
	}
}

// checkCausesOnce fails when a part of an error message is said twice: each cause is
// named once ("upstream X did not answer in time: no first byte … : upstream X did
// not answer in time: …" was the bug).
func checkCausesOnce(t *testing.T, msg string) {
	t.Helper()
	parts := strings.Split(msg, ": ")
	seen := map[string]bool{}
	for _, p := range parts {
		if seen[p] {
			t.Fatalf("the error names a cause twice (%q): %s", p, msg)
		}
		seen[p] = true
	}
}
