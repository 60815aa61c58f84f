package app

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
)

// rawCall writes a raw HTTP/1.1 request and returns the status line and body of the
// answer (or the error when camproxy closed the connection without one).
func rawCall(t *testing.T, addr, req string) (int, string, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(testkit.Patience(t)))
	if _, err := io.WriteString(conn, req); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestBadInputRaw: what a well-behaved HTTP client cannot send — bodies announced
// over the limit, header floods, CRLF in X-CAM-* values, odd content types —
// gets a clear 4xx, fast, and camproxy keeps serving.
func TestBadInputRaw(t *testing.T) {
	// Its own camproxy; its long parses (100 000 messages) overlap the agent tests' waits.
	t.Parallel()
	e := newEnv(t, nil) // max_body_bytes: the 32 MiB default
	addr := e.app.Addr()
	chat := func(headers, body string) string {
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + headers + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body)) + body
	}
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`

	t.Run("announced over the limit", func(t *testing.T) {
		// 1 GiB announced, nothing sent: the answer must not wait for the body.
		start := time.Now()
		code, out, err := rawCall(t, addr, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n")
		took := time.Since(start)
		if err != nil {
			t.Fatalf("no answer (%v) after %v: a 413 must come before the body", err, took)
		}
		if code != 413 || !strings.Contains(out, "max_body_bytes") {
			t.Fatalf("%d %s", code, out)
		}
		faultRow(t, "input", "body of 1 GiB announced", fmt.Sprintf("413 in %v, body never read", took.Round(time.Millisecond)), "-")
	})
	t.Run("header flood", func(t *testing.T) {
		var h strings.Builder
		for i := range 20000 {
			fmt.Fprintf(&h, "X-Flood-%d: %d\r\n", i, i)
		}
		code, _, err := rawCall(t, addr, chat(h.String(), body))
		if err == nil && (code < 400 || code >= 500) {
			t.Fatalf("20 000 headers: %d, want a 4xx or a closed connection", code)
		}
		faultRow(t, "input", "20 000 request headers", fmt.Sprintf("status %d, err %v", code, err), "-")
	})
	t.Run("CRLF in X-CAM-Arm", func(t *testing.T) {
		// The CRLF ends the header: the "injected" line is just another request header,
		// which camproxy must not forward as anything but what it is.
		code, out, err := rawCall(t, addr, chat("Content-Type: application/json\r\nX-CAM-Arm: cam\r\nX-Injected: yes\r\n", body))
		if err != nil || code != 200 {
			t.Fatalf("%d %v %s", code, err, out)
		}
		if h := e.up.Last().Header; h.Get("X-CAM-Arm") != "" {
			t.Fatalf("X-CAM-* reached the upstream: %v", h)
		}
	})
	t.Run("bad X-CAM-Task-Id", func(t *testing.T) {
		code, out, _ := rawCall(t, addr, chat("Content-Type: application/json\r\nX-CAM-Task-Id: <script>alert(1)</script>\r\n", body))
		if code != 400 || !strings.Contains(out, "X-CAM-Task-Id") || strings.Contains(out, "<script>") {
			t.Fatalf("%d %s", code, out)
		}
	})
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		t.Run("content-type "+ct, func(t *testing.T) {
			code, out, _ := rawCall(t, addr, chat("Content-Type: "+ct+"\r\n", body))
			if code != 415 || !strings.Contains(gjson.Get(out, "error.message").String(), "application/json") {
				t.Fatalf("%d %s", code, out)
			}
		})
	}
	t.Run("no content-type", func(t *testing.T) { // curl -d without -H, some SDKs: accepted as JSON
		if code, out, _ := rawCall(t, addr, chat("", body)); code != 200 {
			t.Fatalf("%d %s", code, out)
		}
	})
	t.Run("invalid UTF-8", func(t *testing.T) {
		code, out, _ := rawCall(t, addr, chat("Content-Type: application/json\r\n", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}"))
		if code != 400 || !strings.Contains(out, "UTF-8") {
			t.Fatalf("%d %s", code, out)
		}
	})
	t.Run("deep nesting", func(t *testing.T) {
		deep := `{"model":"m","messages":[{"role":"user","content":"x"}],"x":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + "}"
		code, out, _ := rawCall(t, addr, chat("Content-Type: application/json\r\n", deep))
		if code != 400 || !strings.Contains(out, "nest") {
			t.Fatalf("%d %s", code, out)
		}
	})
	t.Run("100 000 messages", func(t *testing.T) {
		var b strings.Builder
		b.WriteString(`{"model":"m","messages":[{"role":"user","content":"Task: the long one"}`)
		for i := range 100000 {
			fmt.Fprintf(&b, `,{"role":"assistant","content":"a%d"},{"role":"user","content":"u%d"}`, i, i)
		}
		b.WriteString("]}")
		start := time.Now()
		code, out, err := rawCall(t, addr, chat("Content-Type: application/json\r\n", b.String()))
		if err != nil || code != 200 {
			t.Fatalf("%d %v %.200s", code, err, out)
		}
		faultRow(t, "input", fmt.Sprintf("200 001 messages (%d MB)", b.Len()>>20), fmt.Sprintf("200 in %v", time.Since(start).Round(time.Millisecond)), "recorded")
	})
	if resp, _ := e.post(newAgent("still serving", false).body(""), nil); resp.StatusCode != 200 {
		t.Fatal("camproxy stopped serving after bad input")
	}
}
