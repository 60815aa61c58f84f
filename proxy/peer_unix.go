//go:build unix

package proxy

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"syscall"
)

// peek looks at conn's socket without consuming anything and without waiting (a
// non-blocking MSG_PEEK): closed is true when the peer closed its side (a read of 0
// bytes, or an error), waiting when bytes are there to read. ok is false when conn is
// not a socket (an in-memory connection): nothing can be told. fasthttp gives no other
// signal for a client that leaves while the upstream is silent, nor for an upstream
// that closed, or wrote to, a connection resting in the pool.
func peek(conn net.Conn) (closed, waiting, ok bool) {
	for {
		switch c := conn.(type) {
		case *tls.Conn:
			conn = c.NetConn()
			continue
		case interface{ Unwrap() net.Conn }:
			conn = c.Unwrap()
			continue
		}
		break
	}
	sc, isSocket := conn.(syscall.Conn)
	if !isSocket {
		return false, false, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, false, false
	}
	pk := peekers.Get().(*peeker)
	// Control, not Read: Read honours the read deadline left on the connection and
	// would stop peeking once it has passed.
	if err = rc.Control(pk.fn); err == nil {
		closed = pk.n == 0 && pk.err == nil || pk.err != nil && !errors.Is(pk.err, syscall.EAGAIN) && !errors.Is(pk.err, syscall.EINTR)
		waiting = pk.n > 0
	}
	pk.n, pk.err = 0, nil
	peekers.Put(pk)
	return closed, waiting, err == nil
}

// peeker is peek's callback, bound once, and its results: pooled, so that a peek —
// one per pooled upstream connection reused — allocates only its RawConn.
type peeker struct {
	fn  func(fd uintptr) // recv, bound to this peeker
	buf [1]byte
	n   int
	err error
}

var peekers = sync.Pool{New: func() any { p := new(peeker); p.fn = p.recv; return p }}

func (p *peeker) recv(fd uintptr) {
	p.n, _, p.err = syscall.Recvfrom(int(fd), p.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
}

// peerClosed reports whether the client closed its side of conn. A WebSocket turn's
// connection (sessConn) is asked first: its session knows.
func peerClosed(conn net.Conn) bool {
	if sc, ok := conn.(interface{ clientGone() bool }); ok {
		return sc.clientGone()
	}
	closed, _, _ := peek(conn)
	return closed
}
