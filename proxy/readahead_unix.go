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
	sc, isSocket := c.Conn.(syscall.Conn)
	if !isSocket {
		return 0, false, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	var (
		buf  *[]byte
		got  int
		rerr error
	)
	// Read, not Control: it waits for the socket to be readable, within the read
	// deadline (fasthttp's idle timeout), as Conn.Read does.
	err = rc.Read(func(fd uintptr) bool {
		b := aheadBufs.Get().(*[]byte)
		for {
			got, rerr = syscall.Read(int(fd), *b)
			if !errors.Is(rerr, syscall.EINTR) {
				break
			}
		}
		if errors.Is(rerr, syscall.EAGAIN) {
			aheadBufs.Put(b)
			return false
		}
		buf = b
		return true
	})
	switch {
	case err != nil:
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
