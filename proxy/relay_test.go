package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"github.com/camproxy/camproxy/protocol/registry"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// The relay's streaming rules, each once: a forward served over an
// in-memory listener, its upstream a script writing raw HTTP/1.1 on another, so that
// it can stall, cut a chunked body or close early. Times are hang guards and short
// idle timeouts; no test asserts how long anything took.

// recTee records what the tee saw.
type recTee struct {
	mu     sync.Mutex
	status int
	body   bytes.Buffer
	end    chan error
}

func (r *recTee) begin(status int, _ string) { r.mu.Lock(); r.status = status; r.mu.Unlock() }
func (r *recTee) chunk(p []byte)             { r.mu.Lock(); r.body.Write(p); r.mu.Unlock() }
func (r *recTee) done(_ int, err error, _ time.Duration) {
	r.end <- err
}

// wait returns the error the call ended with.
func (r *recTee) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.end:
		return err
	case <-time.After(10 * time.Second): // a hang guard
		t.Fatal("the call never ended")
		return nil
	}
}

// relayEnv is a forward between an agent and a scripted upstream.
type relayEnv struct {
	s       *Server
	ln      *fasthttputil.InmemoryListener
	tee     *recTee
	upGone  chan struct{} // closed when the proxy closed the upstream connection
	clients []net.Conn
	path    string // the agent's request path; "" = /v1/chat/completions
}

// script plays the upstream after reading the request: it writes raw bytes to conn.
type script func(conn net.Conn)

func newRelayEnv(t *testing.T, idle time.Duration, st *registry.Protocol, play script) *relayEnv {
	t.Helper()
	e := &relayEnv{s: newForwardServer(), ln: fasthttputil.NewInmemoryListener(), tee: &recTee{end: make(chan error, 1)},
		upGone: make(chan struct{})}
	// net.Pipe, not an in-memory listener: its deadlines wake a blocked read when
	// moved from another goroutine, as a socket's do (a cancel does that).
	upConns := make(chan net.Conn, 1)
	dial := func() (net.Conn, error) {
		a, b := net.Pipe()
		upConns <- b
		return a, nil
	}
	go func() {
		var conn net.Conn
		select {
		case conn = <-upConns:
		case <-time.After(10 * time.Second):
			return
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		var req fasthttp.Request
		if req.Read(br) != nil {
			return
		}
		play(conn)
		// What the proxy does with the connection: a call it gave up on is closed.
		_, _ = io.Copy(io.Discard, br)
		close(e.upGone)
	}()
	base, _ := url.Parse("http://upstream.test")
	up := &Upstream{Name: "openai", Base: base, FirstByteTimeout: 10 * time.Second, IdleTimeout: idle}
	up.init()
	up.hostClient("http", "upstream.test").Dial = func(string) (net.Conn, error) { return dial() }
	srv := &fasthttp.Server{Handler: func(fc *fasthttp.RequestCtx) {
		e.s.forward(fc, up, fc.PostBody(), false, st, e.tee)
	}}
	go func() { _ = srv.Serve(e.ln) }()
	t.Cleanup(func() {
		for _, c := range e.clients {
			_ = c.Close()
		}
		e.s.cancelBase()
		_ = srv.Shutdown()
	})
	return e
}

// waitUpGone fails t unless the proxy gives the upstream call up.
func (e *relayEnv) waitUpGone(t *testing.T) {
	t.Helper()
	select {
	case <-e.upGone:
	case <-time.After(10 * time.Second): // a hang guard
		t.Fatal("the upstream call was not given up")
	}
}

// call sends the agent's request and reads the answer's head.
func (e *relayEnv) call(t *testing.T) (*http.Response, *bufio.Reader) {
	t.Helper()
	conn, err := e.ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	e.clients = append(e.clients, conn)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second)) // a hang guard
	path := e.path
	if path == "" {
		path = "/v1/chat/completions"
	}
	if _, err := io.WriteString(conn, "POST "+path+" HTTP/1.1\r\nHost: camproxy.test\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, bufio.NewReader(resp.Body)
}

// readEvent reads one SSE event (up to its blank line).
func readEvent(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	var ev strings.Builder
	for {
		line, err := br.ReadString('\n')
		ev.WriteString(line)
		if line == "\n" {
			return ev.String()
		}
		if err != nil {
			t.Fatalf("event cut: %q %v", ev.String(), err)
		}
	}
}

const sseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

// chunk frames an event as one chunk.
func chunk(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }

func event(i int) string { return fmt.Sprintf("data: {\"n\":%d}\n\n", i) }

// waitClosed blocks until the proxy closes the upstream connection.
func waitClosed(conn net.Conn) { _, _ = io.Copy(io.Discard, conn) }

// TestRelayEventByEvent: each event reaches the agent before the upstream sends the
// next (a relay that waited for more, or coalesced, would hang), the stream ends
// cleanly, and the tee saw every byte.
func TestRelayEventByEvent(t *testing.T) {
	read := make(chan struct{})
	e := newRelayEnv(t, time.Minute, registry.Chat, func(conn net.Conn) {
		_, _ = io.WriteString(conn, sseHead)
		for i := range 3 {
			_, _ = io.WriteString(conn, chunk(event(i)))
			select {
			case <-read:
			case <-time.After(10 * time.Second):
				return
			}
		}
		_, _ = io.WriteString(conn, "0\r\n\r\n")
	})
	resp, br := e.call(t)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	for i := range 3 {
		if got := readEvent(t, br); got != event(i) {
			t.Fatalf("event %d: %q", i, got)
		}
		read <- struct{}{}
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) > 0 {
		t.Fatalf("end: %q %v; want a clean end", rest, err)
	}
	if err := e.tee.wait(t); err != nil {
		t.Fatalf("recorded error %v", err)
	}
	if got := e.tee.body.String(); got != event(0)+event(1)+event(2) {
		t.Fatalf("tee saw %q", got)
	}
}

// TestRelayGeminiArray: streamGenerateContent without alt=sse answers a JSON array
// as application/json, element by element: each element reaches the agent before
// the upstream writes the next (a relay that buffered the JSON answer whole would
// hang here). generateContent's application/json is one object: buffered, with its
// length.
func TestRelayGeminiArray(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=UTF-8\r\nTransfer-Encoding: chunked\r\n\r\n"
	elems := []string{"[{\"n\":0}", ",\r\n{\"n\":1}", ",\r\n{\"n\":2}", "]"}
	read := make(chan struct{})
	e := newRelayEnv(t, time.Minute, registry.Gemini, func(conn net.Conn) {
		_, _ = io.WriteString(conn, head)
		for _, el := range elems {
			_, _ = io.WriteString(conn, chunk(el))
			select {
			case <-read:
			case <-time.After(10 * time.Second):
				return
			}
		}
		_, _ = io.WriteString(conn, "0\r\n\r\n")
	})
	e.path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
	resp, br := e.call(t)
	if resp.StatusCode != 200 || resp.ContentLength != -1 {
		t.Fatalf("%d length %d; want a stream", resp.StatusCode, resp.ContentLength)
	}
	for _, el := range elems {
		buf := make([]byte, len(el))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != el {
			t.Fatalf("element %q: %q %v", el, buf, err)
		}
		read <- struct{}{}
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) > 0 {
		t.Fatalf("end: %q %v; want a clean end", rest, err)
	}
	if got := e.tee.body.String(); got != strings.Join(elems, "") {
		t.Fatalf("tee saw %q", got)
	}
	t.Run("generateContent", func(t *testing.T) {
		const obj = `{"candidates":[]}`
		e := newRelayEnv(t, time.Minute, registry.Gemini, func(conn net.Conn) {
			_, _ = io.WriteString(conn, head+chunk(obj)+"0\r\n\r\n")
		})
		e.path = "/v1beta/models/gemini-2.5-flash:generateContent"
		resp, br := e.call(t)
		if body, err := io.ReadAll(br); err != nil || string(body) != obj || resp.ContentLength != int64(len(obj)) {
			t.Fatalf("%q %v length %d; want the object buffered, with its length", body, err, resp.ContentLength)
		}
	})
}

// TestRelayBrokenStream: a stream that breaks after it began — stalled past the idle
// timeout, cut short in either framing, cancelled by shutdown — reaches the agent as
// a broken connection, never a clean end; at an event boundary an error event that
// says why comes first, in the route's style; the upstream call is given up.
func TestRelayBrokenStream(t *testing.T) {
	tests := []struct {
		name     string
		st       *registry.Protocol
		play     func(conn net.Conn)
		shutdown bool
		event    string // in the error event's data; "" = no event may be written
		recorded string // in the recorded error
	}{
		{"stall past idle timeout", registry.Chat, func(c net.Conn) {
			_, _ = io.WriteString(c, sseHead+chunk(event(0)))
			waitClosed(c)
		}, false, "idle_timeout", "idle_timeout"},
		{"chunked without last chunk", registry.Chat, func(c net.Conn) {
			_, _ = io.WriteString(c, sseHead+chunk(event(0)))
			_ = c.Close()
		}, false, "unexpected EOF", "unexpected EOF"},
		{"short content length", registry.Messages, func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 1000\r\n\r\n"+event(0))
			_ = c.Close()
		}, false, "unexpected EOF", "unexpected EOF"},
		{"cut inside an event", registry.Chat, func(c net.Conn) {
			_, _ = io.WriteString(c, sseHead+chunk(event(0))+chunk(`data: {"n":`))
			_ = c.Close()
		}, false, "", "unexpected EOF"},
		{"gemini: a bare data event", registry.Gemini, func(c net.Conn) {
			_, _ = io.WriteString(c, sseHead+chunk(event(0)))
			_ = c.Close()
		}, false, "unexpected EOF", "unexpected EOF"},
		{"shutdown", registry.Chat, func(c net.Conn) {
			_, _ = io.WriteString(c, sseHead+chunk(event(0)))
			waitClosed(c)
		}, true, "shutting down", "shutting down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			idle := time.Minute
			if tt.name == "stall past idle timeout" {
				idle = 100 * time.Millisecond
			}
			e := newRelayEnv(t, idle, tt.st, tt.play)
			resp, br := e.call(t)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if got := readEvent(t, br); got != event(0) {
				t.Fatalf("first event %q", got)
			}
			if tt.shutdown {
				e.s.cancelBase()
			}
			rest, err := io.ReadAll(br)
			if err == nil || errors.Is(err, os.ErrDeadlineExceeded) /* the hang guard */ {
				t.Fatalf("the broken stream ended with %v after %q; want a broken connection", err, rest)
			}
			switch ev := string(rest); {
			case tt.event == "" && len(rest) > 0 && !strings.HasPrefix(ev, `data: {"n":`):
				t.Fatalf("after an event cut mid-way: %q; nothing may be added to it", ev)
			case tt.event != "":
				prefix := "event: error\ndata: "
				if tt.st == registry.Gemini {
					prefix = "data: " // what @google/genai reads; it skips event: lines
				}
				data, ok := strings.CutPrefix(ev, prefix)
				msg := gjson.Get(data, "error.message").String()
				if !ok || !strings.HasSuffix(data, "\n\n") || !strings.Contains(msg, tt.event) {
					t.Fatalf("error event %q; want one naming %q", ev, tt.event)
				}
				if tt.st == registry.Messages && gjson.Get(data, "type").String() != "error" {
					t.Fatalf("not Anthropic's error event: %q", ev)
				}
				if tt.st == registry.Gemini && (gjson.Get(data, "error.code").Int() != 502 || gjson.Get(data, "error.status").String() != "INTERNAL") {
					t.Fatalf("not Google's error object: %q", ev)
				}
			}
			if err := e.tee.wait(t); err == nil || !strings.Contains(err.Error(), tt.recorded) {
				t.Fatalf("recorded %v; want an error naming %q", err, tt.recorded)
			}
			if got := e.tee.body.String(); !strings.HasPrefix(got, event(0)) || strings.Contains(got, "event: error") {
				t.Fatalf("tee saw %q; the upstream's bytes only", got)
			}
			e.waitUpGone(t)
		})
	}
}

// TestRelayClientGone: an agent that leaves mid-stream, or stops reading, ends the
// call as errClientGone (recorded as 499, never an upstream error) and the upstream
// call is given up.
func TestRelayClientGone(t *testing.T) {
	for _, stopReading := range []bool{false, true} {
		name := "closes"
		if stopReading {
			name = "stops reading"
		}
		t.Run(name, func(t *testing.T) {
			e := newRelayEnv(t, 200*time.Millisecond, registry.Chat, func(c net.Conn) {
				_, _ = io.WriteString(c, sseHead)
				for i := 0; i < 100000; i++ { // until the proxy gives up
					if _, err := io.WriteString(c, chunk(event(i))); err != nil {
						return
					}
					time.Sleep(time.Millisecond) // keeps the upstream under its idle timeout
				}
			})
			_, br := e.call(t)
			readEvent(t, br)
			if !stopReading {
				_ = e.clients[0].Close()
			}
			if err := e.tee.wait(t); !errors.Is(err, errClientGone) {
				t.Fatalf("recorded %v; want errClientGone", err)
			}
			e.waitUpGone(t)
		})
	}
}

// TestHardeningEmptyStream (issue 18 item 7): an upstream that sends a stream's head and closes before its
// first byte gets the agent a 502 in its route's error style, saying so — not a 200
// and a closed connection.
func TestHardeningEmptyStream(t *testing.T) {
	tests := []struct {
		name string
		st   *registry.Protocol
		raw  string
		msg  string // gjson path of the message in the error body
	}{
		{"closed, OpenAI", registry.Chat, sseHead, "error.message"},
		{"empty chunked body, Anthropic", registry.Messages, sseHead + "0\r\n\r\n", "error.message"},
		{"content length 0, OpenAI", registry.Chat, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 0\r\n\r\n", "error.message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newRelayEnv(t, time.Minute, tt.st, func(c net.Conn) { _, _ = io.WriteString(c, tt.raw); _ = c.Close() })
			resp, br := e.call(t)
			body, _ := io.ReadAll(br)
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(gjson.GetBytes(body, tt.msg).String(), "closed it before sending anything") {
				t.Fatalf("%d %s; want a 502 that says the stream was empty", resp.StatusCode, body)
			}
			if tt.st == registry.Messages && gjson.GetBytes(body, "type").String() != "error" {
				t.Fatalf("not Anthropic's error shape: %s", body)
			}
			if err := e.tee.wait(t); err == nil {
				t.Fatal("recorded as a success")
			}
			faultRow(t, "upstream", "200 SSE head then close: "+tt.name+"",
				fmt.Sprintf("%d %q", resp.StatusCode, trimTo(gjson.GetBytes(body, tt.msg).String(), 60)), "failed step")
		})
	}
}
