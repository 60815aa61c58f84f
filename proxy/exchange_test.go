package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/metrics"
	"github.com/camproxy/camproxy/protocol/registry"
)

// readExchange reads a raw answer through the exchange's framing: the body
// as the reads returned it, the error that ended it, and whether the connection
// could carry another call.
func readExchange(raw string, head bool, bufSize int) (reads []string, err error, reusable bool) {
	x := connExchanges.Get().(*connExchange)
	defer func() { x.put = func(bool) {}; x.reset() }()
	if err := x.readHead(bufio.NewReaderSize(strings.NewReader(raw), bufSize), head); err != nil {
		return nil, err, false
	}
	buf := make([]byte, 64)
	for range 1000 {
		n, err := x.Read(buf)
		if n > 0 {
			reads = append(reads, string(buf[:n]))
		}
		if err != nil {
			return reads, err, x.ended && !x.resp.ConnectionClose()
		}
	}
	return reads, errors.New("no end"), false
}

// TestExchangeFraming: the fasthttp exchange reads every framing of an answer
// with the library's chunked reader; a body cut short is never a clean end, and only
// a body read to its end (trailer included) leaves the connection reusable.
func TestExchangeFraming(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
	tests := []struct {
		name     string
		raw      string
		head     bool
		body     string
		err      error // io.EOF, io.ErrUnexpectedEOF, or nil for any other error
		reusable bool
	}{
		{"chunked with trailer", ok + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n", false, "hello world", io.EOF, true},
		{"chunked", ok + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", false, "hello", io.EOF, true},
		{"chunked, no last chunk", ok + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", false, "hello", io.ErrUnexpectedEOF, false},
		{"chunked, cut in a chunk", ok + "Transfer-Encoding: chunked\r\n\r\n5\r\nhel", false, "hel", io.ErrUnexpectedEOF, false},
		{"chunked, cut before the trailer's end", ok + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n", false, "hello", io.ErrUnexpectedEOF, false},
		{"chunked, no CRLF after data", ok + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello", false, "hello", io.ErrUnexpectedEOF, false},
		{"bad chunk size", ok + "Transfer-Encoding: chunked\r\n\r\nzz\r\n", false, "", nil, false},
		{"content length", ok + "Content-Length: 5\r\n\r\nhello", false, "hello", io.EOF, true},
		{"short content length", ok + "Content-Length: 5\r\n\r\nhel", false, "hel", io.ErrUnexpectedEOF, false},
		{"until close", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\nuntil close", false, "until close", io.EOF, false},
		{"connection close", ok + "Content-Length: 2\r\nConnection: close\r\n\r\nok", false, "ok", io.EOF, false},
		{"HEAD", ok + "Content-Length: 5\r\n\r\n", true, "", io.EOF, true},
		{"204", "HTTP/1.1 204 No Content\r\n\r\n", false, "", io.EOF, true},
		{"interim 100 skipped", "HTTP/1.1 100 Continue\r\n\r\n" + ok + "Content-Length: 2\r\n\r\nok", false, "ok", io.EOF, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reads, err, reusable := readExchange(tt.raw, tt.head, 4096)
			body := strings.Join(reads, "")
			switch {
			case body != tt.body:
				t.Errorf("body %q, want %q", body, tt.body)
			case tt.err != nil && err != tt.err:
				t.Errorf("ended with %v, want %v", err, tt.err)
			case tt.err == nil && (err == nil || errors.Is(err, io.EOF)):
				t.Errorf("ended with %v, want a framing error", err)
			case reusable != tt.reusable:
				t.Errorf("reusable %v, want %v", reusable, tt.reusable)
			}
		})
	}
}

// TestChunkedReadDoesNotWait: a Read returns the chunk that arrived without waiting
// for the next one — the upstream here sends the next chunk only once the previous
// one was read, so a reader that waited would hang (the deadline is a hang guard).
func TestChunkedReadDoesNotWait(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	read := make(chan struct{})
	go func() {
		defer server.Close()
		_, _ = io.WriteString(server, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for _, c := range []string{"7\r\nevent 1\r\n", "7\r\nevent 2\r\n", "0\r\n\r\n"} {
			if _, err := io.WriteString(server, c); err != nil {
				return
			}
			<-read
		}
	}()
	_ = client.SetDeadline(time.Now().Add(10 * time.Second))
	x := connExchanges.Get().(*connExchange)
	defer func() { x.put = func(bool) {}; x.reset() }()
	if err := x.readHead(bufio.NewReaderSize(client, 4096), false); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	for _, want := range []string{"event 1", "event 2"} {
		n, err := x.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("read %q %v, want %q", buf[:n], err, want)
		}
		read <- struct{}{}
	}
	if n, err := x.Read(buf); n != 0 || err != io.EOF || !x.ended {
		t.Fatalf("end: %d %v, ended %v", n, err, x.ended)
	}
}

// FuzzFastExchange: whatever an upstream sends, reading it never panics, never hangs,
// and a body that ends cleanly was framed completely.
func FuzzFastExchange(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\n\r\nrest",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		reads, err, reusable := readExchange(raw, false, 256)
		if reusable && err != io.EOF {
			t.Fatalf("reusable after %v (%q)", err, reads)
		}
	})
}

// newForwardServer is a Server with just what forward needs.
func newForwardServer() *Server {
	s := &Server{log: slog.New(slog.DiscardHandler), m: metrics.New(prometheus.NewRegistry()),
		bufs: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	return s
}

// hangingDial is an upstream whose dial never completes (until it is given up on),
// for tests on synctest's clock.
func hangingDial(t *testing.T, firstByte time.Duration) *Upstream {
	t.Helper()
	base, _ := url.Parse("http://upstream.test")
	up := &Upstream{Name: "openai", Base: base, FirstByteTimeout: firstByte, IdleTimeout: time.Minute}
	up.init()
	up.hostClient("http", "upstream.test").DialTimeout = func(_ string, timeout time.Duration) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		<-ctx.Done()
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("no answer")}
	}
	return up
}

// TestHardeningDialCancelled (issue 27): a dial in progress does not hold a call whose
// client left, nor one whose shutdown grace period ended: the call is freed at the
// watcher's next check, not when the dial gives up (first_byte_timeout, a minute
// here; fasthttp's dial takes no context, so before, the call waited it out).
func TestHardeningDialCancelled(t *testing.T) {
	const firstByte = time.Minute
	const causeAt = 2100 * time.Millisecond // between two of the watcher's checks
	want := (causeAt/peerPoll + 1) * peerPoll
	for _, cause := range []string{"client gone", "shutdown"} {
		t.Run(cause, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				up := hangingDial(t, firstByte)
				s := newForwardServer()
				defer s.cancelBase()
				var left atomic.Bool
				s.peerGone = func(net.Conn) bool { return left.Load() } // a pipe cannot be peeked at
				agent, other := net.Pipe()
				defer agent.Close()
				defer other.Close()
				var fc fasthttp.RequestCtx
				fc.Init2(agent, log.New(io.Discard, "", 0), true)
				fc.Request.Header.SetMethod("POST")
				fc.Request.SetRequestURI("/v1/chat/completions")
				go func() {
					time.Sleep(causeAt)
					if cause == "client gone" {
						left.Store(true)
					} else {
						s.cancelBase()
					}
				}()
				start := time.Now()
				res := s.forward(&fc, up, []byte(`{}`), false, registry.Chat, nil)
				took := time.Since(start) // synctest's clock: exact
				wantStatus := 499
				if cause == "shutdown" {
					wantStatus = http.StatusServiceUnavailable
				}
				if res.status != wantStatus || took != want {
					t.Fatalf("status %d after %v; want %d at the first check after the %s (%v)", res.status, took, wantStatus, cause, want)
				}
				faultRow(t, "upstream", "dial hangs, then "+cause+"",
					fmt.Sprintf("call freed after %v (fake clock; cause at %v, dial bound %v), %d", took, causeAt, firstByte, res.status), "-")
				time.Sleep(time.Hour) // let the clients' background dial and idle cleaner end
			})
		})
	}
}

// TestHardeningFirstByteTimeoutBoundsConnect (issue 18 item 2): first_byte_timeout is one deadline from the start
// of the call: an upstream that never accepts gets the agent a 504 when it passes,
// not after a dial timeout of its own. The dial here blocks until it is given up on,
// so a dial given no bound (as before) would deadlock the bubble; synctest's clock
// makes the elapsed time exact.
func TestHardeningFirstByteTimeoutBoundsConnect(t *testing.T) {
	const firstByte = 3 * time.Second
	synctest.Test(t, func(t *testing.T) {
		up := hangingDial(t, firstByte)
		s := newForwardServer()
		defer s.cancelBase()
		var fc fasthttp.RequestCtx
		fc.Request.Header.SetMethod("POST")
		fc.Request.SetRequestURI("/v1/chat/completions")
		start := time.Now()
		res := s.forward(&fc, up, []byte(`{}`), false, registry.Chat, nil)
		if took := time.Since(start); res.status != http.StatusGatewayTimeout || took != firstByte {
			t.Fatalf("status %d after %v, want 504 after %v: %s", res.status, took, firstByte, fc.Response.Body())
		}
		if !strings.Contains(string(fc.Response.Body()), "first_byte_timeout") {
			t.Fatalf("the error does not name the deadline: %s", fc.Response.Body())
		}
		faultRow(t, "upstream", "accept never completes, first_byte_timeout 3s",
			fmt.Sprintf("%d after %v (fake clock), names first_byte_timeout", res.status, firstByte), "failed step")
		time.Sleep(time.Hour) // let the clients' background dial and idle cleaner end
	})
}
