package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/valyala/fasthttp"
)

// One upstream exchange: the answer as forward and the relay see it — its head, its
// body as a reader, and release — read off the connection the client (client.go)
// wrote the call to, with fasthttp's header codec and a chunked reader that keeps the
// upstream's chunks apart (chunkedBody).

// exchange is an upstream's answer once its head has arrived.
type exchange interface {
	// head is the status line and headers as the upstream sent them.
	head() *fasthttp.ResponseHeader
	// Read reads the body, its transfer coding removed (its content coding kept). A
	// Read returns what has arrived without waiting for more; io.EOF comes only at
	// the body's real end, and a body cut short (a chunked body without its last
	// chunk, a short Content-Length) is io.ErrUnexpectedEOF, never a clean end.
	Read(p []byte) (int, error)
	// release ends the exchange, once, on the goroutine that read the body, after its
	// last Read: the connection is reused when reuse is true (the body was read to
	// its end) and its framing allows it, else closed.
	release(reuse bool)
}

// bodiless says whether an answer has no body whatever its headers say (RFC 9112 §6.3).
func bodiless(head bool, status int) bool {
	return head || status < 200 || status == http.StatusNoContent || status == http.StatusNotModified
}

// connExchange is an answer read off a pool connection. Pooled: a call allocates
// only its release func.
type connExchange struct {
	resp    fasthttp.Response // only its header is used: the answer's head
	br      *bufio.Reader
	body    io.Reader // the body's framing: chunked, fixed or br (until the connection closes)
	fixed   fixedBody
	chunks  chunkedBody
	chunked bool
	ended   bool  // the body was read to its end (for a chunked one, its trailer too)
	err     error // the trailer's error, once read
	put     func(reuse bool)
}

var connExchanges = sync.Pool{New: func() any { return new(connExchange) }}

func (x *connExchange) head() *fasthttp.ResponseHeader { return &x.resp.Header }

// readHead reads the status line and headers (skipping interim 1xx answers) and
// sets up the body's framing.
func (x *connExchange) readHead(br *bufio.Reader, head bool) error {
	h := &x.resp.Header
	for n := 0; ; n++ {
		if err := h.Read(br); err != nil {
			return headError(err)
		}
		if code := h.StatusCode(); code < 100 || code > 199 || code == http.StatusSwitchingProtocols {
			break
		}
		if n >= maxInterim {
			return &badAnswerError{fmt.Sprintf("more than %d interim (1xx) answers before its answer", maxInterim)}
		}
	}
	h.SetNoDefaultContentType(true) // relay the upstream's Content-Type, or none
	x.br = br
	switch cl := h.ContentLength(); {
	case bodiless(head, h.StatusCode()):
		x.fixed = fixedBody{r: br}
		x.body = &x.fixed
	case cl == -1: // chunked
		x.chunked = true
		x.chunks = chunkedBody{r: br}
		x.body = &x.chunks
	case cl >= 0:
		x.fixed = fixedBody{r: br, left: int64(cl)}
		x.body = &x.fixed
	default: // -2: identity, until the connection closes
		x.body = br
	}
	return nil
}

// maxInterim bounds the interim (1xx) answers skipped before an answer's head.
const maxInterim = 10

// badAnswerError is an answer that is not HTTP/1.1 as RFC 9112 defines it (a head
// that does not parse, endless interim answers): the connection is out of step and is
// closed; the agent gets a 502 that says what was wrong.
type badAnswerError struct{ problem string }

func (e *badAnswerError) Error() string { return e.problem }

// headError is err of reading an answer's head: the connection's own error (a timeout,
// a close, a reset) as it is, anything else a head that does not parse.
func headError(err error) error {
	var ne net.Error
	if errors.As(err, &ne) || idleClosed(err) {
		return err
	}
	return &badAnswerError{"an answer head that is not HTTP/1.1 (" + err.Error() + ")"}
}

// Read reads the body. The chunked reader returns io.EOF at the last chunk; the
// trailer section after it is read (and dropped) then, so that the connection can
// carry the next call: a body without it is cut short.
//
// A chunked Read returns at most one chunk (chunkedBody), and what of it has arrived:
// it waits only for the data of a chunk whose size line was read, bytes the upstream
// committed to with that line (and in practice wrote with it).
func (x *connExchange) Read(p []byte) (int, error) {
	if x.ended {
		return 0, io.EOF
	}
	if x.err != nil {
		return 0, x.err
	}
	n, err := x.body.Read(p)
	if !errors.Is(err, io.EOF) {
		return n, err
	}
	if x.chunked {
		if terr := x.resp.Header.ReadTrailer(x.br); terr != nil {
			if errors.Is(terr, io.EOF) {
				terr = io.ErrUnexpectedEOF
			}
			x.err = terr
			return n, terr
		}
	}
	// A body delimited by the connection's close ends cleanly, but leaves no
	// connection to reuse.
	x.ended = x.body != io.Reader(x.br)
	return n, io.EOF
}

func (x *connExchange) release(reuse bool) {
	x.put(reuse && x.ended && !x.resp.ConnectionClose())
	x.reset()
}

func (x *connExchange) reset() {
	x.resp.Reset()
	x.br, x.body, x.fixed, x.chunks, x.chunked, x.ended, x.err, x.put = nil, nil, fixedBody{}, chunkedBody{}, false, false, nil, nil
	connExchanges.Put(x)
}

// fixedBody is a body of a known length: the connection closing short of it is
// io.ErrUnexpectedEOF. Its last bytes come with io.EOF, so a reader need not ask again.
type fixedBody struct {
	r    *bufio.Reader
	left int64
}

func (b *fixedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	switch {
	case b.left == 0:
		return n, io.EOF
	case errors.Is(err, io.EOF):
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}
