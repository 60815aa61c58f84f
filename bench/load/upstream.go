package main

import (
	"bufio"
	"bytes"
	"net"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Request headers the harness sends and every path forwards untouched.
const (
	hdrReply    = "X-Bench-Reply"    // "conv.turn": which pre-rendered answer to give
	hdrStream   = "X-Bench-Stream"   // "1": answer as SSE (the body also says "stream":true)
	hdrLockstep = "X-Bench-Lockstep" // id: send event i+1 only once the client has read event i
	hdrIdle     = "X-Bench-Idle"     // "1": send the first event, then hold the stream open
)

// upstream is the fake model server all three paths call: a fixed latency before the
// answer, then either the chat.completion or its SSE events paced interval apart.
// Answers are pre-rendered, so it costs each path the same few microseconds.
type upstream struct {
	convs    []*conv
	latency  time.Duration
	interval time.Duration
	srv      *fasthttp.Server
	ln       net.Listener

	lock    lockstep
	release chan struct{} // closed: idle streams end
	idle    atomic.Int64  // idle streams open
}

func newUpstream(convs []*conv, latency, interval time.Duration) *upstream {
	u := &upstream{convs: convs, latency: latency, interval: interval, release: make(chan struct{})}
	u.lock.waiters = map[string]chan int{}
	u.srv = &fasthttp.Server{Handler: u.handle, Name: "fake-upstream", Concurrency: 1 << 20, MaxRequestBodySize: 64 << 20,
		ReadBufferSize: 16 << 10, NoDefaultServerHeader: true, NoDefaultContentType: true, IdleTimeout: time.Minute}
	return u
}

func (u *upstream) start(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	u.ln = ln
	go func() { _ = u.srv.Serve(ln) }()
	return ln.Addr().String(), nil
}

func (u *upstream) close() { _ = u.srv.Shutdown() }

func (u *upstream) handle(ctx *fasthttp.RequestCtx) {
	pprof.SetGoroutineLabels(upstreamRole) // the server's worker goroutine, from now on
	c, t, ok := u.lookup(ctx.Request.Header.Peek(hdrReply))
	if !ok || string(ctx.Path()) != "/v1/chat/completions" {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"error":{"message":"unknown reply","type":"invalid_request_error","param":null,"code":null}}`)
		return
	}
	if u.latency > 0 {
		time.Sleep(u.latency)
	}
	ctx.Response.Header.Set("X-Request-Id", "req_bench")
	if string(ctx.Request.Header.Peek(hdrStream)) != "1" {
		ctx.SetContentType("application/json")
		ctx.Response.SetBodyRaw(c.replyJSON[t])
		return
	}
	events := c.replySSE[t]
	lockID := string(ctx.Request.Header.Peek(hdrLockstep))
	idle := string(ctx.Request.Header.Peek(hdrIdle)) == "1"
	ctx.SetContentType("text/event-stream; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		var acks chan int
		if lockID != "" {
			acks = u.lock.register(lockID)
			defer u.lock.unregister(lockID)
		}
		for i, ev := range events {
			if i > 0 {
				switch {
				case acks != nil:
					u.lock.await(acks, i-1)
				case idle && i == 1:
					u.idle.Add(1)
					<-u.release
					u.idle.Add(-1)
				case u.interval > 0:
					time.Sleep(u.interval)
				}
			}
			if _, err := w.Write(ev); err != nil {
				return
			}
			if err := w.Flush(); err != nil {
				return
			}
		}
	})
}

func (u *upstream) lookup(key []byte) (*conv, int, bool) {
	ci, ti, ok := bytes.Cut(key, []byte{'.'})
	if !ok {
		return nil, 0, false
	}
	c, err1 := strconv.Atoi(string(ci))
	t, err2 := strconv.Atoi(string(ti))
	if err1 != nil || err2 != nil || c < 0 || c >= len(u.convs) || t < 0 || t >= len(u.convs[c].turns) {
		return nil, 0, false
	}
	return u.convs[c], t, true
}

// lockstep lets the upstream wait, before each event, until the client has read the
// previous one. A proxy that holds a chunk back until more arrive makes that wait time
// out: each timeout is a coalesced chunk.
type lockstep struct {
	mu         sync.Mutex
	waiters    map[string]chan int
	violations atomic.Int64
	checked    atomic.Int64
}

// lockstepWait is how long the upstream waits for the client to have an event.
const lockstepWait = 500 * time.Millisecond

func (l *lockstep) register(id string) chan int {
	ch := make(chan int, 64)
	l.mu.Lock()
	l.waiters[id] = ch
	l.mu.Unlock()
	return ch
}

func (l *lockstep) unregister(id string) {
	l.mu.Lock()
	delete(l.waiters, id)
	l.mu.Unlock()
}

// ack is the client saying it has read event i.
func (l *lockstep) ack(id string, i int) {
	l.mu.Lock()
	ch := l.waiters[id]
	l.mu.Unlock()
	if ch != nil {
		select {
		case ch <- i:
		default:
		}
	}
}

func (l *lockstep) await(acks chan int, want int) {
	l.checked.Add(1)
	t := time.NewTimer(lockstepWait)
	defer t.Stop()
	for {
		select {
		case got := <-acks:
			if got >= want {
				return
			}
		case <-t.C:
			l.violations.Add(1)
			return
		}
	}
}
