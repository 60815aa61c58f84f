//go:build !unix

package proxy

import "net"

// peerClosed cannot peek on this platform; a departed client is seen at the next write.
func peerClosed(net.Conn) bool { return false }
