//go:build unix

package proxy

import (
	"crypto/tls"
	"errors"
	"net"
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
	var buf [1]byte
	// Control, not Read: Read honours the read deadline left on the connection and
	// would stop peeking once it has passed.
	err = rc.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = n == 0 && err == nil || err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EINTR)
		waiting = n > 0
	})
	return closed, waiting, err == nil
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
