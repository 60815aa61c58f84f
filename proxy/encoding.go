package proxy

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// An answer's Content-Encoding is relayed as it is: the agent decodes it. What the
// replay buffer records is the decoded answer, so the copy the tee hands the
// protocol Decoder goes through a decoder of the content codings first.

// maxDecoded bounds the decoded bytes of one answer, so that a small compressed body
// cannot grow without limit in the recorder's copy (a decompression bomb).
const maxDecoded = maxResponseBytes

// errDecodedTooLarge is the error of an answer that decodes to more than maxDecoded.
var errDecodedTooLarge = fmt.Errorf("the answer decodes to more than %d bytes", maxDecoded)

// bodyWriter takes the relayed bytes of an answer, in any chunking.
type bodyWriter interface {
	// Write hands over the next bytes; once it returns, everything they complete
	// has reached the protocol Decoder. It never fails: a body that cannot be
	// decoded leaves the answer unfinished, and Close says why.
	Write(p []byte) (int, error)
	// Close ends the body and returns why it could not be decoded, if it could not.
	Close() error
}

// identityBody is an answer without content coding: the bytes go to the Decoder.
type identityBody struct{ w io.Writer }

func (b identityBody) Write(p []byte) (int, error) { return b.w.Write(p) }
func (identityBody) Close() error                  { return nil }

// failedBody is an answer whose coding camproxy cannot decode: it is relayed, not
// recorded.
type failedBody struct{ err error }

func (failedBody) Write(p []byte) (int, error) { return len(p), nil }
func (b failedBody) Close() error              { return b.err }

// decodeBody returns the writer that brings an answer encoded with contentEncoding
// (the header's value: codings in the order they were applied, comma-separated) to
// dst decoded: dst itself for identity; else a decoder of gzip (x-gzip), deflate
// (zlib, or raw deflate as some servers send), br and zstd, in any stack.
func decodeBody(contentEncoding string, dst io.Writer) bodyWriter {
	codings, err := parseCodings(contentEncoding)
	switch {
	case err != nil:
		return failedBody{err}
	case len(codings) == 0:
		return identityBody{dst}
	}
	return newCodingWriter(codings, dst)
}

// parseCodings lists the codings of a Content-Encoding value, identity left out.
func parseCodings(v string) ([]string, error) {
	var out []string
	for c := range strings.SplitSeq(v, ",") {
		c = strings.ToLower(strings.TrimSpace(c))
		switch c {
		case "", "identity":
		case "gzip", "x-gzip", "deflate", "br", "zstd":
			out = append(out, c)
		default:
			return nil, fmt.Errorf("Content-Encoding %q is not one camproxy decodes (gzip, deflate, br, zstd)", c)
		}
	}
	return out, nil
}

// codingWriter decodes as the bytes arrive: a goroutine runs the decoders (which
// pull their input) on the chunks Write hands it, and Write returns once that
// goroutine has used up the chunk and asks for the next one. By then it has written
// to dst everything the bytes so far decode to (up to the coding's own flush points:
// a stream the upstream flushes per event decodes per event). Nothing of the relay
// waits but for the decoding of its own chunk.
type codingWriter struct {
	in     chan []byte   // the next chunk; closed by Close
	ack    chan struct{} // the goroutine used up the last chunk
	done   chan struct{} // the goroutine ended; err says why
	err    error
	closed bool
}

func newCodingWriter(codings []string, dst io.Writer) *codingWriter {
	w := &codingWriter{in: make(chan []byte), ack: make(chan struct{}), done: make(chan struct{})}
	go w.run(codings, dst)
	return w
}

// Write hands p to the decoding goroutine and waits until it has used it up or
// ended.
func (w *codingWriter) Write(p []byte) (int, error) {
	if w.closed || len(p) == 0 {
		return len(p), nil
	}
	select {
	case w.in <- p:
	case <-w.done:
		return len(p), nil
	}
	select {
	case <-w.ack:
	case <-w.done:
	}
	return len(p), nil
}

// Close ends the input and waits for the goroutine. It returns nil when the body
// decoded whole, else why not.
func (w *codingWriter) Close() error {
	if !w.closed {
		w.closed = true
		close(w.in)
	}
	<-w.done
	return w.err
}

// run decodes until the input ends or cannot be decoded.
func (w *codingWriter) run(codings []string, dst io.Writer) {
	defer close(w.done)
	src := &chunkSource{w: w}
	defer src.drain()
	var r io.Reader = src
	// The last coding applied is the first to undo.
	for i := len(codings) - 1; i >= 0; i-- {
		dr, closeFn, err := decoder(codings[i], r)
		if err != nil {
			w.err = fmt.Errorf("the answer is not valid %s: %w", codings[i], err)
			return
		}
		if closeFn != nil {
			defer closeFn()
		}
		r = dr
	}
	n, err := io.Copy(dst, io.LimitReader(r, maxDecoded+1))
	switch {
	case n > maxDecoded:
		w.err = errDecodedTooLarge
	case err != nil:
		w.err = fmt.Errorf("the answer is not valid %s: %w", strings.Join(codings, ", "), err)
	}
}

// decoder wraps r in the decoder of one coding.
func decoder(coding string, r io.Reader) (io.Reader, func(), error) {
	switch coding {
	case "gzip", "x-gzip":
		return newGzipMembers(r)
	case "deflate":
		// RFC 9110's deflate is the zlib format; some servers send raw deflate.
		br := bufio.NewReader(r)
		head, err := br.Peek(2)
		if err != nil {
			return nil, nil, err
		}
		if isZlibHeader(head) {
			zr, err := zlib.NewReader(br)
			if err != nil {
				return nil, nil, err
			}
			return zr, nil, nil
		}
		return flate.NewReader(br), nil, nil
	case "br":
		return brotli.NewReader(r), nil, nil
	case "zstd":
		// One decoder goroutine-free (concurrency 1): it decodes in Read, so a
		// block is handed on as soon as it is whole.
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxDecoded),
			zstd.WithDecoderMaxWindow(64<<20))
		if err != nil {
			return nil, nil, err
		}
		return zr, zr.Close, nil
	}
	return nil, nil, errors.New("unknown coding")
}

// gzipMembers reads a gzip body member by member. gzip.Reader's own multistream
// mode looks for the next member before it returns the end of the last one, which
// would hold a whole answer back until the connection ends.
type gzipMembers struct {
	src *bufio.Reader // one buffer for every member: gzip reads it directly
	zr  *gzip.Reader
}

func newGzipMembers(r io.Reader) (io.Reader, func(), error) {
	g := &gzipMembers{src: bufio.NewReader(r)}
	zr, err := gzip.NewReader(g.src)
	if err != nil {
		return nil, nil, err
	}
	zr.Multistream(false)
	g.zr = zr
	return g, nil, nil
}

func (g *gzipMembers) Read(p []byte) (int, error) {
	for {
		n, err := g.zr.Read(p)
		if err != io.EOF {
			return n, err
		}
		if n > 0 {
			return n, nil // the member's end: the next Read looks for another
		}
		if err := g.zr.Reset(g.src); err != nil {
			return 0, err // io.EOF: no further member
		}
		g.zr.Multistream(false)
	}
}

// isZlibHeader reports whether b starts a zlib stream (RFC 1950: deflate, a valid
// window size and a header checksum).
func isZlibHeader(b []byte) bool {
	return len(b) >= 2 && b[0]&0x0f == 8 && b[0]>>4 <= 7 && (uint16(b[0])<<8|uint16(b[1]))%31 == 0
}

// chunkSource is the decoders' input: the chunks Write hands over, in order.
type chunkSource struct {
	w   *codingWriter
	cur []byte
	had bool // cur came from a chunk not yet acknowledged
	eof bool
}

func (s *chunkSource) Read(p []byte) (int, error) {
	for len(s.cur) == 0 {
		if s.eof {
			return 0, io.EOF
		}
		if s.had {
			// The last chunk is used up, and everything it completed went to dst.
			s.w.ack <- struct{}{}
			s.had = false
		}
		chunk, ok := <-s.w.in
		if !ok {
			s.eof = true
			return 0, io.EOF
		}
		s.cur, s.had = chunk, true
	}
	n := copy(p, s.cur)
	s.cur = s.cur[n:]
	return n, nil
}

// drain runs when decoding has ended: a Write waiting for the chunk in hand is let
// go by done; the chunk is simply not used.
func (s *chunkSource) drain() { s.cur = nil }
