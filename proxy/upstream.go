package proxy

import (
	"crypto/tls"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Upstream is one provider camproxy forwards to. Its target comes only from config:
// nothing in a request can point it at another host. Its calls go through
// camproxy's own HTTP/1.1 client on fasthttp's connection pools (client.go), one
// pool per host.
type Upstream struct {
	Name string // protocol label, e.g. "openai"
	Base *url.URL
	Auth Auth // nil = pass the client's auth through
	// Env reads the environment's proxy settings (HTTP_PROXY, HTTPS_PROXY, NO_PROXY
	// and their lower-case forms; dialer.go): os.Getenv in production, a map in
	// tests. nil = no proxy: every host is dialled directly.
	Env func(string) string
	// TLS is the base of the TLS config of the upstream's https hosts (and of an
	// https:// proxy), cloned per host with its ServerName; nil = the system's roots.
	// Either way TLS 1.2 at least, with a session cache.
	TLS              *tls.Config
	FirstByteTimeout time.Duration
	IdleTimeout      time.Duration
	// WebSocket says whether agents' WebSocket sessions get a socket of their own to
	// this upstream (see wsupstream.go).
	WebSocket WSMode

	wsRefused atomic.Int64     // under WSAuto: unix nanoseconds until which the upstream is taken for HTTP-only
	now       func() time.Time // the refusal cache's clock; nil = time.Now

	proxyFor func(*url.URL) (*url.URL, error) // Env's proxy choice; nil = none
	base     dialRoute                        // how Base's host is reached

	own   atomic.Pointer[fasthttp.HostClient] // the pool of Base's own host: every call's, without a lock
	mu    sync.Mutex
	hosts map[string]*fasthttp.HostClient // by scheme://host: SigV4 may pick the region's host per call
}

// init reads the proxy environment and decides how Base's host is dialled; the
// pools are made at their first call.
func (u *Upstream) init() {
	u.hosts = map[string]*fasthttp.HostClient{}
	u.proxyFor = proxyFunc(u.Env)
	u.base = u.routeTo(u.Base.Scheme, u.Base.Host)
}

// upstreamWriteBuffer is the write buffer of an upstream request (hostClient).
const upstreamWriteBuffer = 64 << 10

// connectTimeout bounds connecting when the call's deadline is further away: an
// upstream that does not accept is reported within it.
const connectTimeout = 10 * time.Second

// hostClient is the connection pool of one upstream host. Its read buffers are
// small: an answer is relayed a read at a time, and ten thousand idle streams each
// hold one. Its write buffers are held only while a request is written (pooled):
// they hold a whole agent request (an airline conversation is 10-60 KB), so that
// head and body go out in one write, not one per 16 KB (a syscall and a TCP push
// each).
// It dials with fasthttp's dialer, or through the environment's proxy (dialer.go),
// either given the time left of the call's deadline (a Dial set here instead —
// tests — is called without it).
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
		WriteBufferSize:               upstreamWriteBuffer,
		DisablePathNormalizing:        true,
		DisableHeaderNamesNormalizing: false,
		NoDefaultUserAgentHeader:      true,
	}
	r := u.base
	if scheme != u.Base.Scheme || host != u.Base.Host {
		r = u.routeTo(scheme, host)
	}
	hc.DialTimeout = r.poolDial()
	if tlsOn {
		h, _, err := net.SplitHostPort(addr)
		if err != nil {
			h = addr
		}
		hc.TLSConfig = clientTLS(u.TLS, h)
	}
	u.hosts[key] = hc
	return hc
}

// clientTLS is base (nil: the system's roots) for serverName: TLS 1.2 at least, a
// session cache of its own unless base shares one.
func clientTLS(base *tls.Config, serverName string) *tls.Config {
	c := &tls.Config{}
	if base != nil {
		c = base.Clone()
	}
	c.ServerName = serverName
	if c.MinVersion < tls.VersionTLS12 {
		c.MinVersion = tls.VersionTLS12
	}
	if c.ClientSessionCache == nil {
		c.ClientSessionCache = tls.NewLRUClientSessionCache(64)
	}
	return c
}
