package proxy

import (
	"bufio"
	"context"
	"io"
	"net/url"
	"strings"
	"testing"

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

// TestNewRequestStaysOnUpstream: whatever request-target the client writes, the
// upstream request goes to the configured host with the configured key.
func TestNewRequestStaysOnUpstream(t *testing.T) {
	base, _ := url.Parse("https://api.openai.com")
	u := &Upstream{Base: base, Auth: BearerKey("sk-secret")}
	for _, raw := range []string{
		"POST x.evil.com://h/v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST http://evil.example/v1/models HTTP/1.1\r\nHost: evil.example\r\n\r\n",
		"POST //evil.example/v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/chat/completions?a=1 HTTP/1.1\r\nHost: evil.example\r\n\r\n",
	} {
		var fc fasthttp.RequestCtx
		if err := fc.Request.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			t.Fatal(err)
		}
		req, err := u.newRequest(context.Background(), &fc, nil, false)
		if err != nil {
			continue // refused: fine
		}
		if req.URL.Host != "api.openai.com" || req.URL.Scheme != "https" {
			t.Fatalf("%q went to %s", strings.Fields(raw)[1], req.URL)
		}
	}
}

// TestFastRequestStaysOnUpstream: the fasthttp path sends the request line and Host
// of the configured upstream, whatever request-target the client wrote.
func TestFastRequestStaysOnUpstream(t *testing.T) {
	base, _ := url.Parse("https://api.openai.com/v1")
	u := &Upstream{Base: base, Auth: BearerKey("sk-secret")}
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
		hc, err := u.fastRequest(context.Background(), &fc, &req, []byte(`{}`), true)
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

// TestBodyReader: a streamed body is read one connection read at a time, and a body
// cut short is never a clean end.
func TestBodyReader(t *testing.T) {
	read := func(raw string, length int) (chunks []string, err error) {
		br := bufio.NewReaderSize(strings.NewReader(raw), 16)
		r := newBodyReader(br, length)
		buf := make([]byte, 64)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				chunks = append(chunks, string(buf[:n]))
			}
			if err != nil {
				return chunks, err
			}
		}
	}
	chunks, err := read("5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n", -1)
	if err != io.EOF || strings.Join(chunks, "") != "hello world" {
		t.Fatalf("chunked: %q %v", chunks, err)
	}
	for _, cut := range []string{"5\r\nhello\r\n", "5\r\nhel", "5\r\nhello\r\n0\r\n", "5\r\nhello"} {
		if _, err := read(cut, -1); err != io.ErrUnexpectedEOF {
			t.Fatalf("truncated %q: %v, want unexpected EOF", cut, err)
		}
	}
	if _, err := read("zz\r\n", -1); err == nil || err == io.EOF {
		t.Fatalf("bad chunk size: %v", err)
	}
	if chunks, err := read("hello", 5); err != io.EOF || strings.Join(chunks, "") != "hello" {
		t.Fatalf("fixed length: %q %v", chunks, err)
	}
	if _, err := read("hel", 5); err != io.ErrUnexpectedEOF {
		t.Fatalf("short fixed length: %v", err)
	}
	if chunks, err := read("until close", -2); err != io.EOF || strings.Join(chunks, "") != "until close" {
		t.Fatalf("close-delimited: %q %v", chunks, err)
	}
}
