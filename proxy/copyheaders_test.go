package proxy

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestCopyHeadersAsAdded: the relayed head is what adding each upstream header (but
// hop-by-hop ones and Content-Length) gives, special headers, repeated ones and
// cookies alike: setting the special ones from their fields changes nothing.
func TestCopyHeadersAsAdded(t *testing.T) {
	for _, head := range []string{
		"HTTP/1.1 200 OK\r\nServer: up/1\r\nDate: Sat, 28 Nov 2026 06:00:00 GMT\r\nContent-Type: application/json; charset=utf-8\r\n" +
			"Content-Encoding: gzip\r\nContent-Length: 12\r\nX-Request-Id: r1\r\nx-ratelimit-remaining: 9\r\nVia: a\r\nVia: b\r\n" +
			"Set-Cookie: a=1; Path=/\r\nSet-Cookie: b=2\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nTrailer: X-T\r\n\r\n",
		"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: 0\r\n\r\n",
	} {
		var src fasthttp.ResponseHeader
		src.SetNoDefaultContentType(true)
		if err := src.Read(bufio.NewReader(strings.NewReader(head))); err != nil {
			t.Fatal(err)
		}
		var got, want fasthttp.ResponseHeader
		got.SetNoDefaultContentType(true)
		want.SetNoDefaultContentType(true)
		copyHeaders(&got, &src)
		for k, v := range src.All() {
			if ks := string(k); !hopHeaders[ks] && ks != "Content-Length" {
				want.AddBytesKV(k, v)
			}
		}
		if got.String() != want.String() {
			t.Errorf("copyHeaders of\n%s\n= %q\nwant %q", head, got.String(), want.String())
		}
	}
}

// TestWireHeaderNames: the answer headers set by their wire names (setAnswerHeader)
// come out byte for byte as setting them by name does: the wire names are fasthttp's
// normalized names, an upstream's header of that name is replaced, not repeated, and
// newlines in a value are dropped as Set drops them.
func TestWireHeaderNames(t *testing.T) {
	for hdr, wire := range map[string]string{hdrEpisode: wireEpisode, hdrExperiment: wireExperiment, hdrArm: wireArm, hdrContext: wireContext} {
		for _, value := range []string{"ep_123", "", "a\r\nX-Injected: 1"} {
			var set, canon fasthttp.ResponseHeader
			for _, h := range []*fasthttp.ResponseHeader{&set, &canon} {
				h.SetContentType("application/json")
				h.Add("X-Request-Id", "r1")
				h.Add(strings.ToLower(hdr), "from upstream")
			}
			set.Set(hdr, value)
			setAnswerHeader(&canon, wire, value)
			if got, want := canon.String(), set.String(); got != want {
				t.Errorf("%s = %q:\n got %q\nwant %q", hdr, value, got, want)
			}
		}
	}
}
