//go:build unix

package proxy

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// readAhead is a read of one byte that, once bytes arrive, reads as many as a pooled
// buffer holds: p gets the first, pending the rest, for the reads that follow. The
// buffer is taken in the socket's read callback, after the wait, so an idle
// connection holds none. ok is false when the connection is no socket (an in-memory
// one): the caller reads as usual.
func (c *prefixConn) readAhead(p []byte) (n int, ok bool, err error) {
	a := c.waiter
	if a == nil {
		sc, isSocket := c.Conn.(syscall.Conn)
		if !isSocket {
			return 0, false, nil
		}
		rc, err := sc.SyscallConn()
		if err != nil {
			return 0, false, nil
		}
		a = &aheadWaiter{rc: rc}
		a.fn = a.read
		c.waiter = a
	}
	// Read, not Control: it waits for the socket to be readable, within the read
	// deadline (fasthttp's idle timeout), as Conn.Read does.
	err = a.rc.Read(a.fn)
	buf, got, rerr := a.buf, a.got, a.err
	a.buf, a.err = nil, nil
	switch {
	case err != nil:
		if buf != nil {
			aheadBufs.Put(buf)
		}
		return 0, true, err
	case rerr != nil:
		aheadBufs.Put(buf)
		return 0, true, os.NewSyscallError("read", rerr)
	case got <= 0:
		aheadBufs.Put(buf)
		return 0, true, io.EOF
	}
	p[0] = (*buf)[0]
	if got == 1 {
		aheadBufs.Put(buf)
		return 1, true, nil
	}
	c.ahead, c.pending = buf, (*buf)[1:got]
	return 1, true, nil
}

// aheadWaiter is a connection's readAhead, made at its first wait: the socket's
// RawConn and the read callback, bound once, with the callback's results, so that a
// wait between requests allocates nothing (a RawConn and a closure per request
// otherwise).
type aheadWaiter struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool // read, bound to this waiter
	buf *[]byte               // the pooled buffer read into; nil while waiting
	got int
	err error
}

// read is the socket's read callback: false (wait) while nothing has arrived.
func (a *aheadWaiter) read(fd uintptr) bool {
	b := aheadBufs.Get().(*[]byte)
	for {
		a.got, a.err = syscall.Read(int(fd), *b)
		if !errors.Is(a.err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(a.err, syscall.EAGAIN) {
		aheadBufs.Put(b)
		return false
	}
	a.buf = b
	return true
}
