package testkit

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
)

// ConnectProxy is an HTTP proxy on loopback that opens CONNECT tunnels, as an egress
// proxy does, and nothing else. It keeps each CONNECT's target (host:port as the
// client named it) and Proxy-Authorization, and connects a target to the loopback
// address its routes give: test upstreams are named with names that resolve nowhere
// (upstream.test), so a client that bypassed the proxy could not reach them.
type ConnectProxy struct {
	ln     net.Listener
	routes map[string]string
	// Refuse, when set before the first CONNECT, is the status every CONNECT gets
	// instead of a tunnel (403, 407 …).
	Refuse int

	mu      sync.Mutex
	targets []string
	auths   []string
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// NewConnectProxy starts a proxy whose tunnels to target (host:port) reach
// routes[target], a loopback address. It closes when the test ends.
func NewConnectProxy(t interface{ Cleanup(func()) }, routes map[string]string) *ConnectProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	p := &ConnectProxy{ln: ln, routes: routes, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// URL is the proxy's address as HTTP_PROXY names it.
func (p *ConnectProxy) URL() string { return "http://" + p.ln.Addr().String() }

// Targets are the CONNECT targets so far, in order.
func (p *ConnectProxy) Targets() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.targets...)
}

// Auths are the Proxy-Authorization values of the CONNECTs so far ("" for none).
func (p *ConnectProxy) Auths() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.auths...)
}

// Close stops the proxy and cuts its tunnels.
func (p *ConnectProxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *ConnectProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			_ = c.Close()
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c)
			p.tunnel(c)
		}()
	}
}

// track keeps c to be cut by Close; false once the proxy is closed.
func (p *ConnectProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *ConnectProxy) untrack(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// tunnel serves one client connection: a CONNECT, then bytes both ways.
func (p *ConnectProxy) tunnel(c net.Conn) {
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect {
		_, _ = io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
		return
	}
	p.mu.Lock()
	p.targets = append(p.targets, req.RequestURI)
	p.auths = append(p.auths, req.Header.Get("Proxy-Authorization"))
	refuse := p.Refuse
	p.mu.Unlock()
	if refuse != 0 {
		_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Length: 0\r\n\r\n", refuse, http.StatusText(refuse))
		return
	}
	addr, ok := p.routes[req.RequestURI]
	if !ok {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	up, err := net.Dial("tcp", addr)
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	if !p.track(up) {
		_ = up.Close()
		return
	}
	defer p.untrack(up)
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(c, up)
		_ = c.Close()
		close(done)
	}()
	_, _ = io.Copy(up, br) // what the client sent after its CONNECT, then the rest
	_ = up.Close()
	<-done
}
