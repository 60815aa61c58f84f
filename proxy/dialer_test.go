package proxy

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
)

// The answers of the proxied upstreams, relayed byte for byte.
const (
	proxiedJSON = `{"id":"chatcmpl-proxied","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"through the tunnel"},"finish_reason":"stop"}]}`
	proxiedSSE1 = `data: {"id":"chatcmpl-proxied","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"through "},"finish_reason":null}]}` + "\n\n"
	proxiedSSE2 = `data: {"id":"chatcmpl-proxied","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"the tunnel"},"finish_reason":"stop"}]}` + "\n\n"
	proxiedSSE3 = "data: [DONE]\n\n"
)

// proxiedAnswer answers a chat call: proxiedJSON, or the three SSE events each
// flushed on its own when the call asks for a stream.
func proxiedAnswer(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if !gjson.GetBytes(body, "stream").Bool() {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, proxiedJSON)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range []string{proxiedSSE1, proxiedSSE2, proxiedSSE3} {
		_, _ = io.WriteString(w, ev)
		w.(http.Flusher).Flush()
	}
}

// envOf is an Upstream's Env reading vars.
func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// hostPort is the port of a loopback server's URL joined to host.
func hostPort(t *testing.T, host, serverURL string) string {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(host, u.Port())
}

// agentCall posts a chat call (streamed or not) to camproxy at base and returns the
// status and the body as the agent read it.
func agentCall(t *testing.T, base string, stream bool) (int, string) {
	t.Helper()
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
	agent := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}} // a hang guard
	resp, err := agent.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v (%q)", err, b)
	}
	return resp.StatusCode, string(b)
}

// TestUpstreamThroughHTTPProxy: with HTTP_PROXY / HTTPS_PROXY set (the Env given to
// the Upstream, in lower and upper case), an https upstream (its CA trusted through
// Upstream.TLS) and a plain http one are reached through the proxy's CONNECT tunnel
// to their own host:port, the https one with the Proxy-Authorization of
// HTTPS_PROXY's userinfo; answers, streamed and not, reach the agent byte for byte.
// The upstreams are named *.test, which resolves nowhere: only the proxy reaches them.
func TestUpstreamThroughHTTPProxy(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(proxiedAnswer))
	defer plain.Close()
	secure, roots := testkit.NewTLSServer(http.HandlerFunc(proxiedAnswer), "secure.test")
	defer secure.Close()
	plainAddr, secureAddr := hostPort(t, "plain.test", plain.URL), hostPort(t, "secure.test", secure.URL)
	cp := testkit.NewConnectProxy(t, map[string]string{
		plainAddr:  plain.Listener.Addr().String(),
		secureAddr: secure.Listener.Addr().String(),
	})
	proxyAddr := strings.TrimPrefix(cp.URL(), "http://")
	env := envOf(map[string]string{
		"http_proxy":  cp.URL(),
		"HTTPS_PROXY": "http://camproxy:s%3Acret@" + proxyAddr,
	})
	for _, tc := range []struct {
		name, base, target, auth string
	}{
		{"https", "https://" + secureAddr + "/v1", secureAddr, "Basic " + base64.StdEncoding.EncodeToString([]byte("camproxy:s:cret"))},
		{"http", "http://" + plainAddr, plainAddr, ""},
	} {
		for _, stream := range []bool{false, true} {
			name := tc.name + map[bool]string{true: "/stream", false: "/json"}[stream]
			t.Run(name, func(t *testing.T) {
				base, _ := url.Parse(tc.base)
				up := &Upstream{Name: "openai", Base: base, Env: env, TLS: &tls.Config{RootCAs: roots},
					FirstByteTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second}
				before := len(cp.Targets())
				status, got := agentCall(t, serveForward(t, up), stream)
				want := proxiedJSON
				if stream {
					want = proxiedSSE1 + proxiedSSE2 + proxiedSSE3
				}
				if status != 200 || got != want {
					t.Fatalf("agent got %d %q\nwant 200 %q", status, got, want)
				}
				targets, auths := cp.Targets()[before:], cp.Auths()[before:]
				if !slices.Equal(targets, []string{tc.target}) || auths[0] != tc.auth {
					t.Fatalf("the proxy saw CONNECT %q with Proxy-Authorization %q; want one CONNECT %s with %q", targets, auths, tc.target, tc.auth)
				}
			})
		}
	}
}

// TestUpstreamNoProxy: a host NO_PROXY names is dialled directly, the proxy of
// HTTP_PROXY not asked; a host it does not name takes the proxy.
func TestUpstreamNoProxy(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(proxiedAnswer))
	defer plain.Close()
	bypassAddr, viaAddr := hostPort(t, "bypass.test", plain.URL), hostPort(t, "via.test", plain.URL)
	cp := testkit.NewConnectProxy(t, map[string]string{viaAddr: plain.Listener.Addr().String()})
	env := envOf(map[string]string{"HTTP_PROXY": cp.URL(), "no_proxy": "example.com,.other.test,bypass.test"})

	base, _ := url.Parse("http://" + bypassAddr)
	up := &Upstream{Name: "openai", Base: base, Env: env, FirstByteTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second}
	addr := serveForward(t, up)
	hc := up.hostClient("http", bypassAddr)
	if hc.DialTimeout != nil {
		t.Fatal("the pool of a host NO_PROXY names dials through the proxy")
	}
	// bypass.test resolves nowhere: stand in for its DNS. A proxy dial, which takes
	// precedence over this one, would have failed the call.
	hc.Dial = func(string) (net.Conn, error) { return net.Dial("tcp", plain.Listener.Addr().String()) }
	if status, got := agentCall(t, addr, false); status != 200 || got != proxiedJSON {
		t.Fatalf("agent got %d %q", status, got)
	}
	if got := cp.Targets(); len(got) != 0 {
		t.Fatalf("the proxy saw CONNECT %q for a host NO_PROXY names", got)
	}

	base, _ = url.Parse("http://" + viaAddr)
	via := &Upstream{Name: "openai", Base: base, Env: env, FirstByteTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second}
	if status, got := agentCall(t, serveForward(t, via), false); status != 200 || got != proxiedJSON {
		t.Fatalf("agent got %d %q", status, got)
	}
	if got := cp.Targets(); !slices.Equal(got, []string{viaAddr}) {
		t.Fatalf("the proxy saw CONNECT %q, want %s", got, viaAddr)
	}
}

// TestUpstreamProxyRefuses: a proxy that refuses the tunnel gets the agent a 502 in
// the route's error shape that names the proxy and its answer.
func TestUpstreamProxyRefuses(t *testing.T) {
	cp := testkit.NewConnectProxy(t, nil)
	cp.Refuse = http.StatusForbidden
	base, _ := url.Parse("https://api.example.test")
	up := &Upstream{Name: "openai", Base: base, Env: envOf(map[string]string{"HTTPS_PROXY": cp.URL()}),
		FirstByteTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second}
	status, got := agentCall(t, serveForward(t, up), false)
	msg := gjson.Get(got, "error.message").Str
	if status != http.StatusBadGateway || !strings.Contains(msg, "CONNECT api.example.test:443") || !strings.Contains(msg, "answered 403") {
		t.Fatalf("agent got %d %q", status, got)
	}
}

// TestSocketThroughHTTPProxy: a WebSocket session's socket to the upstream takes
// the same route as its HTTP calls: the proxy's tunnel to the upstream's host:port,
// ws:// and wss:// alike, and the session's turns run on it.
func TestSocketThroughHTTPProxy(t *testing.T) {
	fake := testkit.NewUpstream()
	defer fake.Close()
	secure, roots := testkit.NewTLSServer(fake.Config.Handler, "wss.test")
	defer secure.Close()
	wsAddr, wssAddr := hostPort(t, "ws.test", fake.URL), hostPort(t, "wss.test", secure.URL)
	cp := testkit.NewConnectProxy(t, map[string]string{
		wsAddr:  fake.Listener.Addr().String(),
		wssAddr: secure.Listener.Addr().String(),
	})
	env := envOf(map[string]string{"HTTP_PROXY": cp.URL(), "HTTPS_PROXY": cp.URL()})
	for i, tc := range []struct{ base, target string }{
		{"http://" + wsAddr + "/v1", wsAddr},
		{"https://" + wssAddr + "/v1", wssAddr},
	} {
		base, _ := url.Parse(tc.base)
		up := &Upstream{Name: "openai", Base: base, Env: env, TLS: &tls.Config{RootCAs: roots},
			FirstByteTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second, WebSocket: WSAuto}
		up.init()
		ws := openSession(t, up)
		_, dec := wholeTurn(t, ws, up, firstTurn)
		if !dec.Finished() {
			t.Fatalf("%s: the turn did not finish", tc.base)
		}
		if got := cp.Targets(); len(got) != i+1 || got[i] != tc.target {
			t.Fatalf("%s: the proxy saw CONNECT %q, want %s last", tc.base, got, tc.target)
		}
		if n := len(fake.Sockets()); n != i+1 {
			t.Fatalf("%s: %d sockets reached the upstream", tc.base, n)
		}
	}
}

// FuzzReadConnectAnswer: a proxy's answer to CONNECT, whatever its bytes, is read
// without a panic, and only a 2xx status line opens the tunnel.
func FuzzReadConnectAnswer(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 Connection Established\r\n\r\n",
		"HTTP/1.0 200 OK\r\nProxy-Agent: squid\r\n\r\n",
		"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200\r\n",
		"SSH-2.0-OpenSSH\r\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		err := readConnectAnswer(bufio.NewReader(strings.NewReader(string(raw))))
		if err == nil {
			line, _, _ := strings.Cut(string(raw), "\n")
			if f := strings.Fields(line); len(f) < 2 || len(f[1]) != 3 || f[1][0] != '2' {
				t.Fatalf("tunnel opened on %q", raw)
			}
		}
	})
}
