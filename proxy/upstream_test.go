package proxy

import (
	"bufio"
	"context"
	"github.com/camproxy/camproxy/protocol/registry"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestTarget(t *testing.T) {
	cases := []struct{ base, uri, want string }{
		{"https://api.openai.com", "/v1/chat/completions", "https://api.openai.com/v1/chat/completions"},
		{"https://api.openai.com/", "/v1/models?limit=2", "https://api.openai.com/v1/models?limit=2"},
		{"http://vllm:8000/v1", "/v1/chat/completions", "http://vllm:8000/v1/chat/completions"},
		{"http://vllm:8000/v1/", "/v1/models", "http://vllm:8000/v1/models"},
		{"http://gw:8000/openai", "/v1/chat/completions", "http://gw:8000/openai/v1/chat/completions"},
		{"http://up:1", "//evil.example/v1/x", "http://up:1//evil.example/v1/x"},
		{"http://up:1", "x.evil.com", "http://up:1/x.evil.com"},
	}
	for _, c := range cases {
		u, _ := url.Parse(c.base)
		path, query, _ := strings.Cut(c.uri, "?")
		if got := (&Upstream{Base: u}).target([]byte(path), []byte(query)); got != c.want {
			t.Errorf("target(%s, %s) = %s, want %s", c.base, c.uri, got, c.want)
		}
	}
}

// TestRequestStaysOnUpstream: the upstream call has the request line and Host of
// the configured upstream, and its key, whatever request-target the client wrote.
func TestRequestStaysOnUpstream(t *testing.T) {
	base, _ := url.Parse("https://api.openai.com/v1")
	u := &Upstream{Base: base, Auth: KeyAuth(registry.OpenAI.Auth, "sk-secret")}
	u.init()
	for _, raw := range []string{
		"POST x.evil.com://h/v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST http://evil.example/v1/models HTTP/1.1\r\nHost: evil.example\r\n\r\n",
		"POST //evil.example/v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/chat/completions?a=1 HTTP/1.1\r\nHost: evil.example\r\nConnection: X-Drop\r\nX-Drop: 1\r\nX-CAM-Arm: a\r\nAuthorization: Bearer sk-client\r\n\r\n",
	} {
		var fc fasthttp.RequestCtx
		if err := fc.Request.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			t.Fatal(err)
		}
		var req fasthttp.Request
		hc, err := u.request(context.Background(), &fc, &req, []byte(`{}`), true)
		if err != nil {
			t.Fatal(err)
		}
		if hc.Addr != "api.openai.com:443" || !hc.IsTLS || string(req.Header.Host()) != "api.openai.com" {
			t.Fatalf("%q went to %s (host %q)", strings.Fields(raw)[1], hc.Addr, req.Header.Host())
		}
		if uri := string(req.Header.RequestURI()); !strings.HasPrefix(uri, "/v1/") && !strings.HasPrefix(uri, "/") {
			t.Fatalf("request target %q", uri)
		}
		if got := string(req.Header.Peek("Authorization")); got != "Bearer sk-secret" {
			t.Fatalf("Authorization %q", got)
		}
		for _, h := range []string{"X-Drop", "X-Cam-Arm", "Connection"} {
			if v := req.Header.Peek(h); len(v) > 0 && h != "Connection" {
				t.Fatalf("%s forwarded: %q", h, v)
			}
		}
	}
}

// writeCounter counts the writes made on a connection.
type writeCounter struct {
	net.Conn
	writes *atomic.Int64
}

func (c writeCounter) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestUpstreamRequestOneWrite: a request that fits the write buffer (a 40 KB
// conversation) goes upstream in one write on the connection, head and body together
// — not one write per 16 KB of buffer, each a syscall and a TCP push.
func TestUpstreamRequestOneWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	}()
	base, _ := url.Parse("http://" + ln.Addr().String())
	up := &Upstream{Name: "openai", Base: base, FirstByteTimeout: time.Minute, IdleTimeout: time.Minute}
	up.init()
	var writes atomic.Int64
	up.hostClient(base.Scheme, base.Host).Dial = func(addr string) (net.Conn, error) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{Conn: c, writes: &writes}, nil
	}
	var fc fasthttp.RequestCtx
	fc.Request.Header.SetMethod("POST")
	fc.Request.SetRequestURI("/v1/chat/completions")
	fc.Request.Header.SetContentType("application/json")
	body := []byte(`{"messages":[{"role":"user","content":"` + strings.Repeat("x", 40<<10) + `"}]}`)
	ex, err := up.roundTrip(context.Background(), &upCall{}, &fc, body, true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(ex)
	ex.release(true)
	if err != nil || string(b) != "ok" {
		t.Fatalf("answer %q, %v", b, err)
	}
	if n := writes.Load(); n != 1 {
		t.Fatalf("the request took %d writes, want 1", n)
	}
}
