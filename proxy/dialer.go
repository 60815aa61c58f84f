package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpproxy"
)

// How an upstream host is reached: directly, or through the HTTP proxy the
// environment names (HTTP_PROXY, HTTPS_PROXY, NO_PROXY and their lower-case forms,
// read as net/http reads them: golang.org/x/net/http/httpproxy, so a loopback host is
// never proxied and NO_PROXY's names, domains and CIDRs bypass it). The choice is
// made once per upstream host, when its connection pool is made, as Traefik's fast
// dialer does: nothing per call.
//
// A proxied host's pool dials the proxy and opens a tunnel with CONNECT, for https
// and plain http upstreams alike: one path, the pool's connection a tunnel, TLS (for
// https) end to end inside it, the proxy seeing only host:port. A plain-http
// upstream behind a proxy that allows CONNECT only to 443 (Squid's default) needs its
// port allowed there. The proxy's URL may be http:// or https:// (TLS to the proxy,
// then the tunnel); its userinfo is sent as Proxy-Authorization: Basic.

// proxyFunc is the proxy choice of the environment env reads (nil: no proxy at all).
func proxyFunc(env func(string) string) func(*url.URL) (*url.URL, error) {
	if env == nil {
		return nil
	}
	first := func(names ...string) string {
		for _, n := range names {
			if v := env(n); v != "" {
				return v
			}
		}
		return ""
	}
	cfg := &httpproxy.Config{
		HTTPProxy:  first("HTTP_PROXY", "http_proxy"),
		HTTPSProxy: first("HTTPS_PROXY", "https_proxy"),
		NoProxy:    first("NO_PROXY", "no_proxy"),
		CGI:        env("REQUEST_METHOD") != "",
	}
	return cfg.ProxyFunc()
}

// dialRoute is how one upstream host is reached.
type dialRoute struct {
	tunnel *tunnelDialer // nil: directly
	err    error         // a proxy camproxy cannot use: every dial fails with it
}

// routeTo decides how scheme://host is reached, from Env's proxy settings.
func (u *Upstream) routeTo(scheme, host string) dialRoute {
	if u.proxyFor == nil {
		return dialRoute{}
	}
	pu, err := u.proxyFor(&url.URL{Scheme: scheme, Host: host})
	var d *tunnelDialer
	if err == nil && pu != nil {
		d, err = newTunnelDialer(pu, u.TLS)
	}
	if err != nil {
		return dialRoute{err: fmt.Errorf("the HTTP proxy for %s://%s: %w", scheme, host, err)}
	}
	return dialRoute{tunnel: d}
}

// poolDial is the dialRoute as a pool's DialTimeout: nil when direct (fasthttp's own
// dialer, with its DNS cache).
func (r dialRoute) poolDial() fasthttp.DialFuncWithTimeout {
	switch {
	case r.err != nil:
		return func(string, time.Duration) (net.Conn, error) { return nil, r.err }
	case r.tunnel != nil:
		return r.tunnel.dial
	}
	return nil
}

// tunnelDialer opens CONNECT tunnels through one HTTP proxy.
type tunnelDialer struct {
	addr string      // the proxy's host:port
	tls  *tls.Config // non-nil: an https:// proxy
	auth string      // the Proxy-Authorization value; "" without userinfo
}

func newTunnelDialer(pu *url.URL, base *tls.Config) (*tunnelDialer, error) {
	d := &tunnelDialer{addr: pu.Host}
	switch pu.Scheme {
	case "http":
		if pu.Port() == "" {
			d.addr = net.JoinHostPort(pu.Hostname(), "80")
		}
	case "https":
		if pu.Port() == "" {
			d.addr = net.JoinHostPort(pu.Hostname(), "443")
		}
		d.tls = clientTLS(base, pu.Hostname())
	default:
		return nil, fmt.Errorf("proxy scheme %q: camproxy tunnels through http:// and https:// proxies only", pu.Scheme)
	}
	if pu.User != nil {
		pass, _ := pu.User.Password()
		d.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(pu.User.Username()+":"+pass))
	}
	return d, nil
}

// dial opens a tunnel to target (host:port) within timeout: the pool's dial, given
// the time left of the call (a cancel of the call leaves it to end on its own: see
// dial in client.go).
func (d *tunnelDialer) dial(target string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.dialContext(ctx, target)
}

// dialContext opens a tunnel to target (host:port) before ctx ends: connecting to the
// proxy, its TLS handshake for an https:// proxy, CONNECT and the proxy's answer.
func (d *tunnelDialer) dialContext(ctx context.Context, target string) (net.Conn, error) {
	if strings.ContainsAny(target, "\r\n") {
		return nil, fmt.Errorf("tunnel target %q has a line break", target)
	}
	conn, err := (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext(ctx, "tcp", d.addr)
	if err != nil {
		return nil, fmt.Errorf("connecting to the HTTP proxy %s: %w", d.addr, err)
	}
	deadline, _ := ctx.Deadline()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(past) })
	c, err := d.connect(conn, target, deadline)
	if !stop() && err == nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("HTTP proxy %s, CONNECT %s: %w", d.addr, target, err)
	}
	return tunnelConn{c}, nil
}

// connect opens the tunnel on conn, a connection to the proxy, and returns it: conn
// itself, or the TLS connection over it to an https:// proxy.
func (d *tunnelDialer) connect(conn net.Conn, target string, deadline time.Time) (net.Conn, error) {
	_ = conn.SetDeadline(deadline)
	c := conn
	if d.tls != nil {
		tc := tls.Client(conn, d.tls)
		if err := tc.Handshake(); err != nil {
			return nil, err
		}
		c = tc
	}
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if d.auth != "" {
		req += "Proxy-Authorization: " + d.auth + "\r\n"
	}
	if _, err := c.Write([]byte(req + "\r\n")); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(c, 1024)
	if err := readConnectAnswer(br); err != nil {
		return nil, err
	}
	if br.Buffered() > 0 {
		// Bytes the upstream cannot have sent yet (it speaks after the request or
		// the ClientHello): the tunnel is out of step.
		return nil, errors.New("the proxy sent bytes after its CONNECT answer")
	}
	_ = conn.SetDeadline(time.Time{})
	return c, nil
}

// readConnectAnswer reads a proxy's answer to CONNECT: a 2xx opens the tunnel (RFC
// 9110 §9.3.6), anything else is the proxy's refusal, which names its status. The
// answer has no body that camproxy reads: a refusal's is left unread with its
// connection, which is closed.
func readConnectAnswer(br *bufio.Reader) error {
	var h fasthttp.ResponseHeader
	if err := h.Read(br); err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if code := h.StatusCode(); code < 200 || code > 299 {
		return fmt.Errorf("the proxy answered %d", code)
	}
	return nil
}

// tunnelConn is a connection through a proxy's tunnel. It hides a TLS connection to
// an https:// proxy (fasthttp takes any connection with a Handshake method for the
// upstream's own TLS, and would not start it), and lets peek reach the socket.
type tunnelConn struct{ net.Conn }

func (c tunnelConn) Unwrap() net.Conn { return c.Conn }
