//go:build unix

package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// waitReadable returns once bytes wait on conn (no clock: the test's timeout bounds it).
func waitReadable(t *testing.T, conn net.Conn) {
	t.Helper()
	for {
		closed, waiting, ok := peek(conn)
		if !ok || closed {
			t.Fatal("the connection cannot be peeked, or closed")
		}
		if waiting {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPrefixConnReadAhead: fasthttp's one-byte wait for the next request reads what
// has arrived at once (the next read is served from it, not from the socket), and the
// bytes come out whole and in order, however they are read: the sniffed prefix, the
// byte, what was read ahead, then the socket again.
func TestPrefixConnReadAhead(t *testing.T) {
	client, server := tcpPair(t)
	c := &prefixConn{Conn: server, pending: []byte("PO")}
	req := []byte("ST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := client.Write(req); err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 1)
	for range 2 { // the sniffed prefix first
		n, err := c.Read(buf)
		if n != 1 || err != nil {
			t.Fatalf("Read = %d, %v", n, err)
		}
		got = append(got, buf[0])
	}
	waitReadable(t, server)
	if n, err := c.Read(buf); n != 1 || err != nil {
		t.Fatalf("the one-byte read = %d, %v", n, err)
	}
	got = append(got, buf[0])
	if len(c.pending) != len(req)-1 || c.ahead == nil {
		t.Fatalf("the one-byte read left %d bytes pending, want the %d that had arrived", len(c.pending), len(req)-1)
	}
	// The rest of the request, then a second request written after the first was read.
	big := make([]byte, readBufferSize-1)
	n, err := c.Read(big)
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, big[:n]...)
	if c.ahead != nil || len(c.pending) != 0 {
		t.Fatal("the read-ahead buffer was kept once its bytes were read")
	}
	second := bytes.Repeat([]byte("x"), 3*readBufferSize)
	go func() { _, _ = client.Write(second); client.Close() }()
	for {
		p := big
		if len(c.pending) == 0 && c.ahead == nil && bytes.Equal(got[len(got)-1:], []byte("\n")) {
			p = buf // between requests, fasthttp reads one byte
		}
		n, err := c.Read(p)
		got = append(got, p[:n]...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if want := append(append([]byte("PO"), req...), second...); !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want %d (equal: %v)", len(got), len(want), bytes.Equal(got, want))
	}
}

// TestPrefixConnReadAheadDeadline: the one-byte wait keeps the read deadline
// (fasthttp's idle timeout) as Conn.Read does.
func TestPrefixConnReadAheadDeadline(t *testing.T) {
	_, server := tcpPair(t)
	c := &prefixConn{Conn: server}
	if err := server.SetReadDeadline(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline = %d, %v", n, err)
	}
}

// TestPrefixConnReadAheadAllocs: once a connection has waited for a request, each
// later wait allocates nothing (its buffer is pooled, its RawConn and callback made
// once per connection): fasthttp waits so before every request of a keep-alive
// connection.
func TestPrefixConnReadAheadAllocs(t *testing.T) {
	client, server := tcpPair(t)
	c := &prefixConn{Conn: server}
	req := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
	rest := make([]byte, readBufferSize)
	one := make([]byte, 1)
	call := func() {
		if _, err := client.Write(req); err != nil {
			t.Fatal(err)
		}
		got := 0
		for got < len(req) {
			p := rest
			if got == 0 {
				p = one // fasthttp's wait for the next request
			}
			n, err := c.Read(p)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	call()
	if n := testing.AllocsPerRun(200, call); n > 0 {
		t.Fatalf("a wait for the next request allocates %.1f times, want none", n)
	}
}

// TestPeekAllocs: the liveness check of a pooled upstream connection, made each time
// one is reused, allocates only the socket's RawConn.
func TestPeekAllocs(t *testing.T) {
	_, server := tcpPair(t)
	if _, _, ok := peek(server); !ok {
		t.Fatal("a TCP connection cannot be peeked")
	}
	if n := testing.AllocsPerRun(200, func() { peek(server) }); n > 1 {
		t.Fatalf("peek allocates %.1f times, want at most 1 (its RawConn)", n)
	}
}

// TestPrefixConnReadAheadWholeRequest: an agent's request that has arrived whole (a
// 40 KB conversation) is taken by the one read that ends the wait for it: fasthttp
// then reads its head and body from memory, not with a read of the socket per 16 KB
// of its read buffer.
func TestPrefixConnReadAheadWholeRequest(t *testing.T) {
	client, server := tcpPair(t)
	c := &prefixConn{Conn: server}
	body := bytes.Repeat([]byte("x"), 40<<10)
	req := append([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 40960\r\n\r\n"), body...)
	if _, err := client.Write(req); err != nil {
		t.Fatal(err)
	}
	waitArrived(t, server, len(req))
	one := make([]byte, 1)
	if n, err := c.Read(one); n != 1 || err != nil {
		t.Fatalf("the one-byte read = %d, %v", n, err)
	}
	if len(c.pending) != len(req)-1 {
		t.Fatalf("the wait's read took %d bytes of the %d that had arrived", len(c.pending)+1, len(req))
	}
	got := append([]byte(nil), one...)
	for len(got) < len(req) {
		p := make([]byte, readBufferSize) // as fasthttp's read buffer takes them
		n, err := c.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p[:n]...)
	}
	if !bytes.Equal(got, req) || c.ahead != nil {
		t.Fatalf("read %d bytes (equal: %v), buffer kept: %v", len(got), bytes.Equal(got, req), c.ahead != nil)
	}
}

// waitArrived returns once n bytes wait on conn (no clock: the test's timeout bounds it).
func waitArrived(t *testing.T, conn net.Conn, n int) {
	t.Helper()
	rc, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, n)
	for {
		var got int
		if err := rc.Control(func(fd uintptr) {
			got, _, _ = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		}); err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
