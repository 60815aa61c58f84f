package proxy

import (
	"bytes"
	"strings"

	"github.com/valyala/fasthttp"
)

// An upstream call's target and headers: where a call goes (the configured base and
// the raw path as received, never a host the client names) and which headers cross
// the hop each way.

// hopHeaders are connection-scoped (RFC 9110 §7.6.1) and never forwarded.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// target joins the configured base with the request's path and query. A base that ends
// in /v1 (as OpenAI clients are configured) absorbs the request's own /v1 prefix.
// The path is the raw origin-form path as received (percent-encoding kept) plus the
// query: never the request-target as written, which may be absolute-form and name
// another host.
func (u *Upstream) target(rawPath, query []byte) string {
	return u.Base.Scheme + "://" + u.Base.Host + string(u.requestURI(nil, rawPath, query))
}

// requestURI appends the origin-form request target sent upstream: the base's path,
// then the raw path as received (a base ending in /v1 absorbs its /v1), then the query.
func (u *Upstream) requestURI(dst, rawPath, query []byte) []byte {
	basePath := strings.TrimSuffix(u.Base.Path, "/")
	dst = append(dst, basePath...)
	start := len(dst)
	if len(rawPath) == 0 || rawPath[0] != '/' {
		dst = append(dst, '/')
	}
	dst = append(dst, rawPath...)
	if len(query) > 0 {
		dst = append(dst, '?')
		dst = append(dst, query...)
	}
	if p := dst[start:]; strings.HasSuffix(basePath, "/v1") && (bytes.HasPrefix(p, []byte("/v1/")) || string(p) == "/v1") {
		n := copy(dst[start:], p[3:])
		dst = dst[:start+n]
	}
	return dst
}

// forwardHeader reports whether a client request header goes upstream: not hop-by-hop
// (nor named by Connection), not Host or the length (set for the body sent), not
// camproxy's own X-CAM-*, and no Accept-Encoding when the answer must be identity.
func forwardHeader(key []byte, connTokens []byte, identity bool) bool {
	k := string(key) // no allocation: map index and comparisons
	if hopHeaders[k] || k == "Host" || k == "Content-Length" || k == "Expect" || hasCAMPrefix(k) {
		return false
	}
	if identity && k == "Accept-Encoding" {
		return false
	}
	return len(connTokens) == 0 || !listsHeader(string(connTokens), k)
}

// listsHeader reports whether a Connection header value names key (those headers are
// hop-by-hop too).
func listsHeader(conn, key string) bool {
	for conn != "" {
		var tok string
		tok, conn, _ = strings.Cut(conn, ",")
		if strings.EqualFold(strings.TrimSpace(tok), key) {
			return true
		}
	}
	return false
}

func hasCAMPrefix(key string) bool {
	return len(key) >= 6 && strings.EqualFold(key[:6], "x-cam-")
}

// copyHeaders relays the upstream's headers (request ids, rate limits, retry-after
// …) minus hop-by-hop and length headers, which fasthttp sets itself.
//
// The headers fasthttp keeps in fields of their own are set from them: an Add would
// copy and normalise the key, then find it one of them and set it all the same.
func copyHeaders(dst, src *fasthttp.ResponseHeader) {
	if v := src.ContentType(); len(v) > 0 {
		dst.SetContentTypeBytes(v)
	}
	if v := src.ContentEncoding(); len(v) > 0 {
		dst.SetContentEncodingBytes(v)
	}
	if v := src.Server(); len(v) > 0 {
		dst.SetServerBytes(v)
	}
	for k, v := range src.All() {
		switch ks := string(k); ks {
		case "Content-Type", "Content-Encoding", "Server", "Content-Length":
			continue
		default:
			if hopHeaders[ks] {
				continue
			}
		}
		dst.AddBytesKV(k, v)
	}
}
