package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// chunkedBody decodes a chunked body (RFC 9112 §7.1) with the rules of net/http's
// reader (httputil.NewChunkedReader: CRLF line endings only, extensions dropped, at
// most 16 hex digits, a bound on non-data bytes), but never past one chunk in a Read.
// httputil's reader goes on into every chunk already buffered, so a relay that read
// late (a busy CPU) handed the agent several of the upstream's events as one write,
// which its SDK then reads as one: the chunks the upstream sent apart reach the agent
// apart, however late they are read. io.EOF comes at the last chunk; its trailer is
// left on r for the caller (connExchange.Read).
type chunkedBody struct {
	r      *bufio.Reader
	left   uint64 // bytes of the current chunk not read yet
	inData bool   // a chunk's data was begun: its CRLF comes before the next size line
	excess int64  // non-data bytes beyond the allowance (as net/http counts them)
	err    error
}

var (
	errChunkLine    = errors.New("chunked encoding: a chunk size line that does not end in CRLF")
	errChunkLong    = errors.New("chunked encoding: chunk size line too long")
	errChunkSize    = errors.New("chunked encoding: invalid chunk size")
	errChunkEnd     = errors.New("chunked encoding: chunk data not followed by CRLF")
	errChunkOverrun = errors.New("chunked encoding contains too much non-data")
)

// maxChunkLine is net/http's bound on a chunk size line.
const maxChunkLine = 4096

func (c *chunkedBody) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.left == 0 {
		if c.err = c.next(); c.err != nil {
			return 0, c.err
		}
	}
	if len(p) == 0 {
		return 0, nil
	}
	if uint64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= uint64(n)
	switch {
	case errors.Is(err, io.EOF):
		c.err = io.ErrUnexpectedEOF
	case err != nil:
		c.err = err
	}
	return n, c.err
}

// next ends the chunk read (its CRLF) and begins the next one; io.EOF at the last.
func (c *chunkedBody) next() error {
	if c.inData {
		var crlf [2]byte
		if _, err := io.ReadFull(c.r, crlf[:]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if crlf != [2]byte{'\r', '\n'} {
			return errChunkEnd
		}
		c.inData = false
	}
	line, err := c.r.ReadSlice('\n')
	switch {
	case errors.Is(err, io.EOF):
		return io.ErrUnexpectedEOF
	case errors.Is(err, bufio.ErrBufferFull):
		return errChunkLong
	case err != nil:
		return err
	}
	if i := bytes.IndexByte(line, '\r'); len(line) < 2 || i != len(line)-2 {
		return errChunkLine // a bare LF, or a CR inside the line
	}
	line = line[:len(line)-2]
	if len(line) >= maxChunkLine {
		return errChunkLong
	}
	c.excess += int64(len(line)) + 2
	line, _, _ = bytes.Cut(bytes.TrimRight(line, " \t"), []byte(";"))
	size, ok := parseChunkSize(line)
	if !ok {
		return errChunkSize
	}
	c.excess = max(c.excess-16-2*int64(size), 0)
	if c.excess > 16<<10 {
		return errChunkOverrun
	}
	if size == 0 {
		return io.EOF
	}
	c.left, c.inData = size, true
	return nil
}

// parseChunkSize reads 1 to 16 hex digits.
func parseChunkSize(v []byte) (uint64, bool) {
	if len(v) == 0 || len(v) > 16 {
		return 0, false
	}
	var n uint64
	for _, b := range v {
		switch {
		case '0' <= b && b <= '9':
			b -= '0'
		case 'a' <= b && b <= 'f':
			b -= 'a' - 10
		case 'A' <= b && b <= 'F':
			b -= 'A' - 10
		default:
			return 0, false
		}
		n = n<<4 | uint64(b)
	}
	return n, true
}
