package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Upstream is one provider camproxy forwards to. Its target comes only from config:
// nothing in a request can point it at another host.
type Upstream struct {
	Name string // protocol label, e.g. "openai"
	Base *url.URL
	Auth Auth // nil = pass the client's auth through
	// Transport nil (or one made by NewTransport) = camproxy's own HTTP/1.1 client on
	// fasthttp's connection pool; any other RoundTripper, or an HTTP proxy configured
	// in the environment for Base, sends the calls through net/http instead.
	Transport        http.RoundTripper
	FirstByteTimeout time.Duration
	IdleTimeout      time.Duration
	// WebSocket says whether agents' WebSocket sessions get a socket of their own to
	// this upstream (see wsupstream.go).
	WebSocket WSMode

	wsRefused atomic.Int64     // under WSAuto: unix nanoseconds until which the upstream is taken for HTTP-only
	now       func() time.Time // the refusal cache's clock; nil = time.Now

	client *http.Client // the net/http path; nil on the fasthttp path

	own   atomic.Pointer[fasthttp.HostClient] // the pool of Base's own host: every call's, without a lock
	mu    sync.Mutex
	hosts map[string]*fasthttp.HostClient // by scheme://host: SigV4 may pick the region's host per call
}

// Transport is camproxy's default upstream transport: NewTransport's. An Upstream
// given one (or none) uses the fasthttp client, unless an HTTP proxy is configured in
// the environment; elsewhere (the CAM's client) it is a plain net/http transport.
type Transport struct{ *http.Transport }

// init makes the upstream's client: redirects are relayed, never followed to another host.
func (u *Upstream) init() {
	t := u.Transport
	_, ownDefault := t.(*Transport)
	if t == nil || ownDefault {
		if p, err := http.ProxyFromEnvironment(&http.Request{URL: u.Base}); err == nil && p == nil {
			u.hosts = map[string]*fasthttp.HostClient{}
			return
		}
		if t == nil {
			t = NewTransport(u.FirstByteTimeout)
		}
	}
	u.client = &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}

// NewTransport is the net/http upstream transport, for the calls that do not go
// through the fasthttp client (see Upstream.Transport) and for the CAM's client.
func NewTransport(firstByte time.Duration) *Transport {
	return &Transport{&http.Transport{
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
	}}
}

// connectTimeout bounds connecting (on the fasthttp path) when the call's deadline
// is further away: an upstream that does not accept is reported within it.
const connectTimeout = 10 * time.Second

// hostClient is the connection pool of one upstream host. Its buffers are small: an
// answer is relayed a read at a time, and ten thousand idle streams each hold one.
// It dials with fasthttp's dialer, which takes the time left of the call's deadline
// (a Dial set here instead — tests — is called without it).
func (u *Upstream) hostClient(scheme, host string) *fasthttp.HostClient {
	own := scheme == u.Base.Scheme && host == u.Base.Host
	if own {
		if hc := u.own.Load(); hc != nil {
			return hc
		}
	}
	hc := u.newHostClient(scheme, host)
	if own {
		u.own.Store(hc)
	}
	return hc
}

// newHostClient finds or makes the pool of scheme://host.
func (u *Upstream) newHostClient(scheme, host string) *fasthttp.HostClient {
	key := scheme + "://" + host
	u.mu.Lock()
	defer u.mu.Unlock()
	if hc := u.hosts[key]; hc != nil {
		return hc
	}
	tlsOn := scheme == "https"
	addr := host
	if _, _, err := net.SplitHostPort(host); err != nil {
		if tlsOn {
			addr += ":443"
		} else {
			addr += ":80"
		}
	}
	hc := &fasthttp.HostClient{
		Addr: addr, IsTLS: tlsOn, Name: "camproxy", DialDualStack: true,
		// Connections are held for the whole of a stream: as many as there are calls.
		MaxConns:                      1 << 20,
		MaxIdleConnDuration:           90 * time.Second,
		ReadBufferSize:                4 << 10,
		WriteBufferSize:               16 << 10,
		DisablePathNormalizing:        true,
		DisableHeaderNamesNormalizing: false,
		NoDefaultUserAgentHeader:      true,
	}
	if tlsOn {
		h, _, err := net.SplitHostPort(addr)
		if err != nil {
			h = addr
		}
		hc.TLSConfig = &tls.Config{ServerName: h, MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(64)}
	}
	u.hosts[key] = hc
	return hc
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

// newRequest builds the net/http upstream request: the client's headers minus hop-by-hop ones,
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
	conn := fc.Request.Header.Peek("Connection")
	for k, v := range fc.Request.Header.All() {
		if forwardHeader(k, conn, identity) {
			req.Header.Add(string(k), string(v))
		}
	}
	if u.Auth != nil {
		if err := u.Auth.Apply(ctx, req, body); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// fastRequest fills req (fasthttp's) with the upstream request and returns the host
// pool it goes to. The request line is the origin-form target built from the config's
// base; the Host header is the base's host: nothing in the client's request-target
// can name another host.
func (u *Upstream) fastRequest(ctx context.Context, fc *fasthttp.RequestCtx, req *fasthttp.Request, body []byte, identity bool) (*fasthttp.HostClient, error) {
	h := &req.Header
	h.SetMethodBytes(fc.Method())
	var uri [256]byte
	h.SetRequestURIBytes(u.requestURI(uri[:0], fc.URI().PathOriginal(), fc.URI().QueryString()))
	h.SetHost(u.Base.Host)
	conn := fc.Request.Header.Peek("Connection")
	for k, v := range fc.Request.Header.All() {
		if forwardHeader(k, conn, identity) {
			h.AddBytesKV(k, v)
		}
	}
	req.SetBodyRaw(body)
	scheme, host := u.Base.Scheme, u.Base.Host
	switch a := u.Auth.(type) {
	case nil:
	case headerAuth:
		a.applyHeaders(h)
	default:
		// Signing needs the request as net/http sees it: sign that, and send exactly
		// the host, target and headers that were signed.
		shell, err := http.NewRequestWithContext(ctx, string(fc.Method()), u.target(fc.URI().PathOriginal(), fc.URI().QueryString()), nil)
		if err != nil {
			return nil, err
		}
		if shell.URL.Host != u.Base.Host {
			return nil, fmt.Errorf("request target %q would leave the configured upstream", fc.Request.Header.RequestURI())
		}
		shell.ContentLength = int64(len(body))
		for k, v := range h.All() {
			if ks := string(k); ks != "Host" && ks != "Content-Length" {
				shell.Header.Add(ks, string(v))
			}
		}
		if err := u.Auth.Apply(ctx, shell, body); err != nil {
			return nil, err
		}
		h.Reset()
		h.SetMethodBytes(fc.Method())
		h.SetRequestURI(shell.URL.RequestURI())
		host = shell.URL.Host
		if shell.Host != "" {
			host = shell.Host
		}
		h.SetHost(host)
		for k, vs := range shell.Header {
			for _, v := range vs {
				h.Add(k, v)
			}
		}
		scheme = shell.URL.Scheme
	}
	return u.hostClient(scheme, host), nil
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
func copyHeaders(dst, src *fasthttp.ResponseHeader) {
	for k, v := range src.All() {
		ks := string(k)
		if hopHeaders[ks] || ks == "Content-Length" {
			continue
		}
		dst.AddBytesKV(k, v)
	}
}

// roundTrip sends the call upstream and returns its answer once the head has
// arrived, on camproxy's fasthttp client or, when the upstream has one, through
// net/http. The call's deadline — first_byte_timeout from now — covers connecting,
// TLS, writing the request and reading the head. A failure is an *Error.
func (u *Upstream) roundTrip(ctx context.Context, call *upCall, fc *fasthttp.RequestCtx, body []byte, identity bool) (exchange, error) {
	if ws := upstreamSocket(fc); ws != nil {
		return ws.turn(ctx, call, body)
	}
	if u.client == nil {
		if u.FirstByteTimeout > 0 {
			call.setDeadline(time.Now().Add(u.FirstByteTimeout))
		}
		return u.fastRoundTrip(ctx, call, fc, body, identity)
	}
	return u.httpRoundTrip(ctx, call, fc, body, identity)
}

// httpRoundTrip is roundTrip through net/http: the call cancels the request's
// context, at its deadline too, whatever the transport's own timeouts.
func (u *Upstream) httpRoundTrip(ctx context.Context, call *upCall, fc *fasthttp.RequestCtx, body []byte, identity bool) (exchange, error) {
	// Only the call cancels the request (its cause named): not ctx's own end.
	ctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	call.useContext(stop)
	if u.FirstByteTimeout > 0 {
		call.setDeadline(time.Now().Add(u.FirstByteTimeout))
	}
	req, err := u.newRequest(ctx, fc, body, identity)
	if err != nil {
		call.end()
		return nil, requestError(err)
	}
	resp, err := u.client.Do(req)
	if err != nil {
		call.end()
		return nil, upstreamError(req.URL.Host, call.failure(err, "no first byte within "+u.FirstByteTimeout.String()+" (first_byte_timeout)"))
	}
	x := &httpExchange{resp: resp, call: call}
	h := &x.h
	h.SetNoDefaultContentType(true)
	h.SetStatusCode(resp.StatusCode)
	for k, vs := range resp.Header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	return x, nil
}

// httpExchange is an answer read by net/http, its head in fasthttp's form.
type httpExchange struct {
	h    fasthttp.ResponseHeader
	resp *http.Response
	call *upCall
}

func (x *httpExchange) head() *fasthttp.ResponseHeader { return &x.h }

// Read reads net/http's body: the same chunked reader as the fasthttp path's, and a
// short Content-Length is io.ErrUnexpectedEOF there too.
func (x *httpExchange) Read(p []byte) (int, error) { return x.resp.Body.Read(p) }

// release closes the body: net/http pools the connection when the body was read to
// its end and closes it otherwise.
func (x *httpExchange) release(bool) {
	_ = x.resp.Body.Close()
	x.call.end()
}

// requestError is a call that could not be built (signing, a target that would
// leave the upstream).
func requestError(err error) *Error {
	return &Error{Status: http.StatusBadGateway, Type: "upstream_request", Msg: "cannot build the upstream request", Err: err}
}
