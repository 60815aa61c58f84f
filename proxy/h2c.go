package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// h2Preface opens every HTTP/2 connection with prior knowledge (h2c).
var h2Preface = []byte(http2.ClientPreface)

// sniffListener splits accepted connections by protocol: HTTP/1.x goes to fasthttp,
// HTTP/2 with prior knowledge (the AWS JavaScript SDK speaks it to http:// endpoints)
// goes to a bridge that relays each stream to fasthttp over HTTP/1.1 on loopback.
// fasthttp has no HTTP/2 server; the bridge keeps one pipeline for every client.
type sniffListener struct {
	net.Listener
	log    *slog.Logger
	h1     chan net.Conn
	h2     *http2.Server
	hs     *http.Server
	bridge http.Handler
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	// sniff bounds how long a new connection may stay silent before it is classified:
	// server.read_timeout, which fasthttp applies only once it has the connection.
	sniff time.Duration
}

// sniffTimeout is the sniff's bound when the server has no read timeout.
const sniffTimeout = 30 * time.Second

func newSniffListener(ln net.Listener, log *slog.Logger, readTimeout time.Duration) *sniffListener {
	if readTimeout <= 0 {
		readTimeout = sniffTimeout
	}
	target := &url.URL{Scheme: "http", Host: ln.Addr().String()}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		target.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp.Port))
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
		},
		FlushInterval: -1, // streams stay unbuffered across the bridge
		Transport: &http.Transport{DialContext: (&net.Dialer{}).DialContext, MaxIdleConnsPerHost: 256,
			DisableCompression: true, ResponseHeaderTimeout: 0},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	s := &sniffListener{Listener: ln, log: log, h1: make(chan net.Conn), h2: &http2.Server{IdleTimeout: 90 * time.Second},
		bridge: rp, done: make(chan struct{}), sniff: readTimeout}
	// An http.Server only to give the HTTP/2 connections a graceful shutdown (GOAWAY).
	s.hs = &http.Server{Handler: rp}
	_ = http2.ConfigureServer(s.hs, s.h2)
	go s.acceptLoop()
	return s
}

// shutdown sends GOAWAY to the HTTP/2 clients and waits for their streams, until ctx ends.
func (s *sniffListener) shutdown(ctx context.Context) error {
	err := s.hs.Shutdown(ctx)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return err
}

func (s *sniffListener) acceptLoop() {
	backoff := 5 * time.Millisecond
	for {
		c, err := s.Listener.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				s.Close()
				return
			}
			// Out of file descriptors, an aborted handshake …: wait and keep serving.
			s.log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		go s.classify(c)
	}
}

// classify reads the first bytes: "PRI" can only start the HTTP/2 preface; every
// HTTP/1 method differs within three bytes. The bytes read are replayed to whoever
// serves the connection.
func (s *sniffListener) classify(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(s.sniff))
	head := make([]byte, 3)
	if _, err := io.ReadFull(c, head); err != nil {
		_ = c.Close()
		return
	}
	if !bytes.Equal(head, h2Preface[:3]) {
		_ = c.SetReadDeadline(time.Time{})
		select {
		case s.h1 <- &prefixConn{Conn: c, pending: head}:
		case <-s.done:
			_ = c.Close()
		}
		return
	}
	rest := make([]byte, len(h2Preface)-3)
	if _, err := io.ReadFull(c, rest); err != nil || !bytes.Equal(rest, h2Preface[3:]) {
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	s.wg.Add(1)
	defer s.wg.Done()
	s.h2.ServeConn(&prefixConn{Conn: c, pending: append([]byte(nil), h2Preface...)},
		&http2.ServeConnOpts{Handler: s.bridge, BaseConfig: s.hs, Context: context.Background()})
}

func (s *sniffListener) Accept() (net.Conn, error) {
	select {
	case c := <-s.h1:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

func (s *sniffListener) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		err = s.Listener.Close()
	})
	return err
}

// prefixConn replays bytes already read before the rest of the connection.
type prefixConn struct {
	net.Conn
	pending []byte
	ahead   *[]byte      // the pooled buffer pending lies in, if any (readAhead)
	waiter  *aheadWaiter // readAhead's, from the connection's first wait between requests
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		if len(c.pending) == 0 && c.ahead != nil {
			aheadBufs.Put(c.ahead)
			c.ahead, c.pending = nil, nil
		}
		return n, nil
	}
	if len(p) == 1 {
		// fasthttp's wait for a connection's next request (ReduceMemoryUsage): one
		// byte, then its read buffer for the rest, a second read of the socket.
		// Read ahead instead, into a buffer taken only once bytes have arrived: the
		// request costs one read, as it would with a read buffer held while idle.
		if n, ok, err := c.readAhead(p); ok {
			return n, err
		}
	}
	return c.Conn.Read(p)
}

// aheadBufs are readAhead's buffers. One holds what a read takes of an agent's
// request as it arrives (an airline conversation is 10-60 KB): the head and most
// bodies whole, which fasthttp's read buffer (readBufferSize) then takes in copies
// instead of a read of the socket per 16 KB. Held only while a request is read.
var aheadBufs = sync.Pool{New: func() any { b := make([]byte, readAheadSize); return &b }}

const (
	// readBufferSize is the server's read buffer (fasthttp.Server.ReadBufferSize).
	readBufferSize = 16 << 10
	// readAheadSize is readAhead's buffer.
	readAheadSize = 64 << 10
)

// Close closes as net/http does: the answer already written is followed by a FIN, and
// what the client still sends is read and dropped for a moment (lingerTimeout) before
// the socket closes. Closing a socket with unread bytes — the body of a request
// refused before it was read, or bytes smuggled after one — sends a reset instead,
// and a reset can destroy the answer in the client's buffer before it reads it.
func (c *prefixConn) Close() error {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return c.Conn.Close()
	}
	go func() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(lingerTimeout))
		_, _ = io.CopyN(io.Discard, c.Conn, lingerBytes)
		_ = c.Conn.Close()
	}()
	return nil
}

// A closing connection is drained for at most lingerTimeout and lingerBytes (as
// net/http's rstAvoidanceDelay and maxPostHandlerReadBytes).
const (
	lingerTimeout = 500 * time.Millisecond
	lingerBytes   = 256 << 10
)

// Unwrap exposes the connection underneath, so that peerClosed can peek at it.
func (c *prefixConn) Unwrap() net.Conn { return c.Conn }
