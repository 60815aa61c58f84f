//go:build unix

package proxy

import (
	"errors"
	"net"
	"syscall"
)

// peerClosed reports whether the client closed its side of conn, without consuming any
// byte it may have sent: a non-blocking MSG_PEEK that reads 0 bytes means EOF. fasthttp
// gives no other signal for a client that leaves while the upstream is silent.
func peerClosed(conn net.Conn) bool {
	for {
		u, ok := conn.(interface{ Unwrap() net.Conn })
		if !ok {
			break
		}
		conn = u.Unwrap()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	var buf [1]byte
	// Control, not Read: Read honours the read deadline fasthttp left on the
	// connection and would stop peeking once server.read_timeout has passed.
	_ = rc.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = n == 0 && err == nil || err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EINTR)
	})
	return closed
}
