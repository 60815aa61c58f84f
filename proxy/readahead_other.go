//go:build !unix

package proxy

// aheadWaiter has nothing to hold on this platform.
type aheadWaiter struct{}

// readAhead cannot wait for a socket's bytes on this platform without a buffer: the
// caller reads as usual.
func (c *prefixConn) readAhead(p []byte) (n int, ok bool, err error) { return 0, false, nil }
