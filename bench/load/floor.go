package main

import (
	"net"
	"runtime/pprof"
	"time"

	"github.com/valyala/fasthttp"
)

// floor is the physical floor camproxy is compared with: a fasthttp reverse proxy that
// does nothing but forward. The request goes upstream as it came; the answer is relayed
// from the upstream connection as it arrives (the response body is streamed, so SSE
// events are flushed one by one, not buffered).
type floor struct {
	hc  *fasthttp.HostClient
	srv *fasthttp.Server
}

func newFloor(upstreamAddr string) *floor {
	f := &floor{hc: &fasthttp.HostClient{Addr: upstreamAddr, MaxConns: 1 << 16, StreamResponseBody: true,
		MaxIdleConnDuration: time.Minute, DisablePathNormalizing: true, NoDefaultUserAgentHeader: true}}
	f.srv = &fasthttp.Server{Handler: f.handle, Name: "floor", Concurrency: 1 << 20, MaxRequestBodySize: 64 << 20,
		ReadBufferSize: 16 << 10, NoDefaultServerHeader: true, NoDefaultContentType: true, IdleTimeout: time.Minute}
	return f
}

func (f *floor) start(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	go func() { _ = f.srv.Serve(ln) }()
	return ln.Addr().String(), nil
}

func (f *floor) close() { _ = f.srv.Shutdown() }

func (f *floor) handle(ctx *fasthttp.RequestCtx) {
	pprof.SetGoroutineLabels(floorRole) // the server's worker goroutine, from now on
	req := &ctx.Request
	req.Header.Del("Connection")
	if err := f.hc.Do(req, &ctx.Response); err != nil {
		ctx.Response.Reset()
		ctx.SetStatusCode(fasthttp.StatusBadGateway)
		ctx.SetBodyString(err.Error())
	}
}
