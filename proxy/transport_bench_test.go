//go:build unix

package proxy

import (
	"bytes"
	"context"
	"net"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// BenchmarkTransport is camproxy's transport alone, over loopback sockets: a call that
// camproxy does not augment (passthrough: accept, read, forward on a pooled upstream
// connection, read the answer, write it back), beside the floor of bench/load — a bare
// fasthttp server and HostClient in the same process — with the same agent, body and
// fake upstream. cpu-µs/op is the process's CPU (user and system) per call: agent,
// upstream and proxy; the difference between the two paths is what camproxy's
// transport adds. The agent's and the upstream's goroutines carry the pprof label
// role (agent, upstream), so that a profile of the proxy alone is
// -tagignore 'role=agent|upstream'. Count system calls per path with, e.g.,
//
//	go test -c -o /tmp/proxy.test ./proxy
//	strace -f -c /tmp/proxy.test -test.run '^$' -test.bench 'Transport/path=camproxy/callers=1$' -test.benchtime 5000x
func BenchmarkTransport(b *testing.B) {
	body := transportBody(32 << 10)
	up := &fasthttp.Server{Handler: func(fc *fasthttp.RequestCtx) {
		pprof.SetGoroutineLabels(upstreamRole) // the server's worker goroutine, from now on
		answerCompletion(fc)
	}, NoDefaultServerHeader: true, ReadBufferSize: 16 << 10,
		Concurrency: 1 << 20, MaxRequestBodySize: 64 << 20, IdleTimeout: time.Minute}
	upAddr := serveLoopback(b, up.Serve, func() { _ = up.Shutdown() })
	paths := []struct {
		name  string
		start func(testing.TB, string) string
	}{{"floor", startFloor}, {"camproxy", startPassthrough}}
	for _, p := range paths {
		addr := p.start(b, upAddr)
		for _, callers := range []int{1, 32} {
			b.Run("path="+p.name+"/callers="+strconv.Itoa(callers), func(b *testing.B) {
				runTransport(b, addr, body, callers)
			})
		}
	}
}

var upstreamRole, agentRole = pprof.WithLabels(context.Background(), pprof.Labels("role", "upstream")),
	pprof.WithLabels(context.Background(), pprof.Labels("role", "agent"))

// transportBody is a chat body of about n bytes, as large as an agent's mid-episode call.
func transportBody(n int) []byte {
	b := []byte(`{"model":"gpt-4o","messages":[`)
	for i := 0; len(b) < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"role":"user","content":"`...)
		b = append(b, bytes.Repeat([]byte("lorem ipsum "), 40)...)
		b = append(b, `"}`...)
	}
	return append(b, `]}`...)
}

// serveLoopback serves on a loopback listener until the test ends and returns its address.
func serveLoopback(tb testing.TB, serve func(net.Listener) error, stop func()) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go func() { _ = serve(ln) }()
	tb.Cleanup(stop)
	return ln.Addr().String()
}

// startFloor is bench/load's floor: a fasthttp server whose handler forwards with a
// HostClient, streaming the answer back.
func startFloor(tb testing.TB, upAddr string) string {
	hc := &fasthttp.HostClient{Addr: upAddr, MaxConns: 1 << 16, StreamResponseBody: true,
		MaxIdleConnDuration: time.Minute, DisablePathNormalizing: true, NoDefaultUserAgentHeader: true}
	srv := &fasthttp.Server{Name: "floor", Concurrency: 1 << 20, MaxRequestBodySize: 64 << 20,
		ReadBufferSize: 16 << 10, NoDefaultServerHeader: true, NoDefaultContentType: true, IdleTimeout: time.Minute,
		Handler: func(fc *fasthttp.RequestCtx) {
			fc.Request.Header.Del("Connection")
			if err := hc.Do(&fc.Request, &fc.Response); err != nil {
				fc.Response.Reset()
				fc.SetStatusCode(fasthttp.StatusBadGateway)
			}
		}}
	return serveLoopback(tb, srv.Serve, func() { _ = srv.Shutdown() })
}

// startPassthrough is camproxy's data plane as app.New wires it (server timeouts as
// config's defaults), its OpenAI upstream at upAddr.
func startPassthrough(tb testing.TB, upAddr string) string {
	o := testOptions(tb, "http://"+upAddr+"/v1", &fixedAugmenter{}, &turnSink{discard: true})
	o.ReadTimeout, o.IdleTimeout = 60*time.Second, 90*time.Second
	s := New(o)
	return serveLoopback(tb, s.Serve, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
}

// runTransport sends b.N calls to addr from callers agents at once, each on its own
// keep-alive connection, and reports the process's CPU per call.
func runTransport(b *testing.B, addr string, body []byte, callers int) {
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: callers, ReadBufferSize: 16 << 10, NoDefaultUserAgentHeader: true}
	defer hc.CloseIdleConnections()
	var left atomic.Int64
	run := func(n int) {
		left.Store(int64(n))
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				pprof.SetGoroutineLabels(agentRole)
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				for left.Add(-1) >= 0 {
					req.Reset()
					req.Header.SetMethod(fasthttp.MethodPost)
					req.SetRequestURI("http://" + addr + "/v1/embeddings")
					req.Header.SetContentType("application/json")
					req.SetBodyRaw(body)
					if err := hc.Do(req, resp); err != nil || resp.StatusCode() != 200 || !bytes.Equal(resp.Body(), completion) {
						b.Errorf("call: %v (status %d)", err, resp.StatusCode())
						return
					}
				}
			})
		}
		wg.Wait()
	}
	run(20 * callers) // connections and pools warm
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	run(b.N)
	cpu := processCPU() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
