package proxy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// Upstream is one provider camproxy forwards to. Its target comes only from config:
// nothing in a request can point it at another host.
type Upstream struct {
	Name             string // protocol label, e.g. "openai"
	Base             *url.URL
	Auth             Auth // nil = pass the client's auth through
	Transport        http.RoundTripper
	FirstByteTimeout time.Duration
	IdleTimeout      time.Duration

	client *http.Client
}

// init makes the upstream's client: redirects are relayed, never followed to another host.
func (u *Upstream) init() {
	t := u.Transport
	if t == nil {
		t = NewTransport(u.FirstByteTimeout)
	}
	u.client = &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}

// NewTransport is the upstream HTTP transport. camproxy streams upstream with net/http
// rather than fasthttp's client: cancelling a request through its context is reliable
// and no pooled response object outlives its reader (the data race Bifrost hit).
func NewTransport(firstByte time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: firstByte,
		ExpectContinueTimeout: time.Second,
		// The proxy relays bytes as the upstream encoded them; augmented routes ask for
		// identity so the answer can be decoded for the replay buffer.
		DisableCompression: true,
		WriteBufferSize:    32 << 10,
		ReadBufferSize:     32 << 10,
	}
}

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
	path := string(rawPath)
	if len(path) == 0 || path[0] != '/' {
		path = "/" + path
	}
	if len(query) > 0 {
		path += "?" + string(query)
	}
	basePath := strings.TrimSuffix(u.Base.Path, "/")
	if strings.HasSuffix(basePath, "/v1") && (strings.HasPrefix(path, "/v1/") || path == "/v1") {
		path = path[3:]
	}
	return u.Base.Scheme + "://" + u.Base.Host + basePath + path
}

// newRequest builds the upstream request: the client's headers minus hop-by-hop ones,
// camproxy's own X-CAM-* headers and Host; auth replaced when a key is configured.
func (u *Upstream) newRequest(ctx context.Context, fc *fasthttp.RequestCtx, body []byte, identity bool) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, string(fc.Method()), u.target(fc.URI().PathOriginal(), fc.URI().QueryString()), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if req.URL.Host != u.Base.Host {
		return nil, fmt.Errorf("request target %q would leave the configured upstream", fc.Request.Header.RequestURI())
	}
	req.ContentLength = int64(len(body))
	connTokens := string(fc.Request.Header.Peek("Connection"))
	for k, v := range fc.Request.Header.All() {
		key := string(k)
		if hopHeaders[key] || key == "Host" || key == "Content-Length" || key == "Expect" || hasCAMPrefix(key) || listsHeader(connTokens, key) {
			continue
		}
		if identity && key == "Accept-Encoding" {
			continue
		}
		req.Header.Add(key, string(v))
	}
	if u.Auth != nil {
		if err := u.Auth.Apply(ctx, req, body); err != nil {
			return nil, err
		}
	}
	return req, nil
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

// copyResponseHeaders relays the upstream's headers (request ids, rate limits,
// retry-after …) minus hop-by-hop and length headers, which fasthttp sets itself.
func copyResponseHeaders(fc *fasthttp.RequestCtx, h http.Header) {
	for k, vs := range h {
		if hopHeaders[k] || k == "Content-Length" {
			continue
		}
		for _, v := range vs {
			fc.Response.Header.Add(k, v)
		}
	}
}
