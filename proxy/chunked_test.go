package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http/httputil"
	"strings"
	"testing"
)

// readChunks reads a chunked body through chunkedBody, returning each Read's bytes.
func readChunks(t testing.TB, wire string, size int) (reads []string, err error) {
	c := &chunkedBody{r: bufio.NewReaderSize(strings.NewReader(wire), size)}
	buf := make([]byte, 32<<10)
	for range 1 << 16 {
		n, rerr := c.Read(buf)
		if n > 0 {
			reads = append(reads, string(buf[:n]))
		}
		if rerr != nil {
			return reads, rerr
		}
	}
	t.Fatal("no end")
	return nil, nil
}

// TestChunkedOneChunkPerRead: chunks buffered together still come one per Read, so
// the events an upstream sent apart are relayed apart (issue 32: under a busy CPU
// httputil's reader merged them); the body ends at the last chunk, its trailer left.
func TestChunkedOneChunkPerRead(t *testing.T) {
	wire := "b\r\ndata: one\n\n\r\nb\r\ndata: two\n\n\r\n0;x=1\r\nX-T: v\r\n\r\n"
	br := bufio.NewReader(strings.NewReader(wire))
	br.Peek(len(wire)) // everything buffered at once, as for a relay that read late
	c := &chunkedBody{r: br}
	buf := make([]byte, 1024)
	var reads []string
	for {
		n, err := c.Read(buf)
		if n > 0 {
			reads = append(reads, string(buf[:n]))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(reads) != 2 || reads[0] != "data: one\n\n" || reads[1] != "data: two\n\n" {
		t.Fatalf("reads %q, want the two events apart", reads)
	}
	if rest, _ := io.ReadAll(br); string(rest) != "X-T: v\r\n\r\n" {
		t.Fatalf("left after the last chunk: %q, want the trailer", rest)
	}
}

// TestChunkedRefuses: what net/http's reader refuses, so does chunkedBody.
func TestChunkedRefuses(t *testing.T) {
	for _, wire := range []string{
		"5\nhello\r\n0\r\n\r\n", // bare LF
		"5\r\nhello\n0\r\n\r\n", // data not followed by CRLF
		"x\r\n",                 // not hex
		"\r\n",                  // empty size
		"11111111111111111\r\n", // 17 digits
		"5\r\nhel",              // cut short
		"5 ;a\r\nhello\r\n",     // space before the extension
		"1;" + strings.Repeat("e", 5000) + "\r\n", // line too long
	} {
		if _, err := readChunks(t, wire, 4096); err == nil || err == io.EOF {
			t.Errorf("%.40q: err %v, want a refusal", wire, err)
		}
	}
	// A byte per chunk with long extensions: too much non-data, as net/http says.
	var b strings.Builder
	for range 200 {
		b.WriteString("1;" + strings.Repeat("e", 200) + "\r\nX\r\n")
	}
	b.WriteString("0\r\n\r\n")
	if _, err := readChunks(t, b.String(), 4096); !errors.Is(err, errChunkOverrun) {
		t.Errorf("extension flood: %v", err)
	}
}

// FuzzChunkedBody: chunkedBody reads the bytes net/http's chunked reader reads, and
// refuses what it refuses.
func FuzzChunkedBody(f *testing.F) {
	for _, s := range []string{"5\r\nhello\r\n0\r\n\r\n", "3;a=b\r\nabc\r\n1\r\nd\r\n0\r\n", "A \r\n0123456789\r\n0\r\n", "5\nhello", "0\r\n", "ff\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, wire string) {
		reads, err := readChunks(t, wire, 64)
		got := strings.Join(reads, "")
		want, werr := io.ReadAll(httputil.NewChunkedReader(bufio.NewReaderSize(strings.NewReader(wire), 64)))
		if (err == io.EOF) != (werr == nil) {
			t.Fatalf("%q: chunkedBody %v, net/http %v", wire, err, werr)
		}
		if werr == nil && got != string(want) {
			t.Fatalf("%q: chunkedBody read %q, net/http %q", wire, got, want)
		}
		if werr != nil && !bytes.HasPrefix(want, []byte(got)) && !bytes.HasPrefix([]byte(got), want) {
			t.Fatalf("%q: before the error chunkedBody read %q, net/http %q", wire, got, want)
		}
	})
}
