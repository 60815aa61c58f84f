//go:build !unix

package proxy

import "net"

// peek cannot look at a socket on this platform: a departed client is seen at the
// next write, an upstream's stale connection at the next call's read.
func peek(net.Conn) (closed, waiting, ok bool) { return false, false, false }

// peerClosed can tell only a WebSocket turn's client gone (its session knows).
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(interface{ clientGone() bool })
	return ok && sc.clientGone()
}
