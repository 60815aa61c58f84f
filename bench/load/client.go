package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// target is one of the three ways to reach the upstream.
type target struct {
	name string
	addr string
	hc   *fasthttp.HostClient
}

func newTarget(name, addr string) *target {
	return &target{name: name, addr: addr, hc: &fasthttp.HostClient{Addr: addr, MaxConns: 1 << 16, StreamResponseBody: true,
		MaxIdleConnDuration: time.Minute, ReadBufferSize: 16 << 10, NoDefaultUserAgentHeader: true}}
}

// result is one call as the agent saw it; times count from when the call was due
// (open loop: a late send is part of the latency).
type result struct {
	ttfb, total time.Duration
	context     string // camproxy's X-CAM-Context
	err         error
	// Streams: SSE events read, and how many of them completed in the same Read as
	// the event before them (coalesced). fasthttp's body stream returns at most one
	// HTTP chunk per Read, so two events in one Read were merged into one chunk on
	// the way — by a proxy that buffers, or by the upstream's own copy falling behind
	// (which the direct path shows).
	events, coalesced int
	status            int // the answer's status when it was not 200 (0 when none came)
}

var (
	bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}
	readPool = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}
)

// call sends one turn and reads the whole answer. lockID, when set, acks every SSE
// event to the upstream as soon as it has been read (the no-coalescing check).
func (t *target) call(body []byte, key []byte, stream bool, lockID string, due time.Time) result {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	setPost(req, t.addr, "/v1/chat/completions")
	req.Header.SetBytesV(hdrReply, key)
	if stream {
		req.Header.Set(hdrStream, "1")
		req.Header.Set("Accept", "text/event-stream")
	}
	if lockID != "" {
		req.Header.Set(hdrLockstep, lockID)
	}
	req.SetBodyRaw(body)
	var r result
	if err := t.hc.Do(req, resp); err != nil {
		r.err = err
		return r
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		r.status = resp.StatusCode()
		r.err = fmt.Errorf("%s: status %d: %.200s", t.name, resp.StatusCode(), resp.Body())
		return r
	}
	r.context = ctxLabel(resp.Header.Peek("X-CAM-Context"))
	bp := readPool.Get().(*[]byte)
	defer readPool.Put(bp)
	buf := *bp
	s := resp.BodyStream()
	if s == nil { // the body came whole with the headers
		r.ttfb = time.Since(due)
		r.total = r.ttfb
		return r
	}
	last := byte(0)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			if r.ttfb == 0 {
				r.ttfb = time.Since(due)
			}
			k := eventsEnded(last, buf[:n])
			last = buf[n-1]
			r.events += k
			r.coalesced += max(0, k-1)
			if lockID != "" && r.events > 0 {
				locks.ack(lockID, r.events-1)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			r.err = err
			return r
		}
	}
	r.total = time.Since(due)
	return r
}

// setPost makes req an agent's JSON POST to path on addr, with its API key.
func setPost(req *fasthttp.Request, addr, path string) {
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("http://" + addr + path)
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", "Bearer sk-bench")
}

// eventsEnded is how many SSE events end in p ("\n\n"), given the last byte read
// before it (an event's blank line may straddle two reads).
func eventsEnded(prev byte, p []byte) int {
	k := bytes.Count(p, []byte("\n\n"))
	if prev == '\n' && len(p) > 0 && p[0] == '\n' {
		k++
	}
	return k
}

// locks is the lockstep registry of the in-process upstream.
var locks *lockstep

func ctxLabel(b []byte) string {
	for _, l := range []string{"hit", "miss", "episode", "none", "fail-open", "shed", "skip"} {
		if string(b) == l {
			return l
		}
	}
	if len(b) == 0 {
		return ""
	}
	return "other"
}

// instances numbers conversation instances: each is its own episode.
var instances atomic.Uint64

// slot replays conversations one after the other, one turn at a time: turn t+1 is
// sent only after turn t was answered, as an agent does.
type slot struct {
	mu     sync.Mutex
	c      *conv
	turn   int
	inst   uint64
	next   int
	stride int
}

func newSlots(k int) []*slot {
	out := make([]*slot, k)
	for i := range out {
		out[i] = &slot{next: i, stride: k}
	}
	return out
}

func (s *slot) nextTurn(convs []*conv) (*conv, int, uint64) {
	if s.c == nil || s.turn >= len(s.c.turns) {
		s.c = convs[s.next%len(convs)]
		s.next += s.stride
		s.turn = 0
		s.inst = instances.Add(1)
	}
	t := s.turn
	s.turn++
	return s.c, t, s.inst
}

func replyKey(dst []byte, c *conv, t int) []byte {
	dst = strconv.AppendInt(dst, int64(c.id), 10)
	dst = append(dst, '.')
	return strconv.AppendInt(dst, int64(t), 10)
}

// sample collects one target's calls in one cell.
type sample struct {
	mu       sync.Mutex
	lat      []time.Duration // total (non-streaming) or first byte (streaming)
	total    []time.Duration
	errs     int
	firstErr error
	events   int // SSE events read (streams)
	merged   int // of which coalesced with the one before
	refused  int // of the errors, 503s: refused past server.max_in_flight (overload.go)

	contexts map[string]int
	cpu      time.Duration // process CPU during this target's slices
	wall     time.Duration
	n        int
}

func newSample() *sample { return &sample{contexts: map[string]int{}} }

func (s *sample) add(r result, stream bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if r.err != nil {
		s.errs++
		if r.status == fasthttp.StatusServiceUnavailable {
			s.refused++
		}
		if s.firstErr == nil {
			s.firstErr = r.err
		}
		return
	}
	if stream {
		s.lat = append(s.lat, r.ttfb)
	} else {
		s.lat = append(s.lat, r.total)
	}
	s.total = append(s.total, r.total)
	s.events += r.events
	s.merged += r.coalesced
	if r.context != "" {
		s.contexts[r.context]++
	}
}

func (s *sample) sorted() {
	slices.Sort(s.lat)
	slices.Sort(s.total)
}

func pct(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// cpuTime is the process's user+system CPU so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runOpen sends rate calls a second for dur, open loop: call j is due at start+j/rate
// whatever happened to the calls before it (a conversation's next turn still waits for
// its previous answer, in its slot).
func runOpen(tg *target, convs []*conv, slots []*slot, rate float64, dur time.Duration, stream bool, s *sample) {
	n := int(rate * dur.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	cpu0, start := cpuTime(), time.Now()
	var wg sync.WaitGroup
	for j := range n {
		due := start.Add(time.Duration(j) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		sl := slots[j%len(slots)]
		wg.Go(func() {
			pprof.SetGoroutineLabels(agentRole)
			sl.mu.Lock()
			defer sl.mu.Unlock()
			c, t, inst := sl.nextTurn(convs)
			bp := bodyPool.Get().(*[]byte)
			body := c.body((*bp)[:0], t, inst, stream)
			var kb [24]byte
			r := tg.call(body, replyKey(kb[:0], c, t), stream, "", due)
			*bp = body
			bodyPool.Put(bp)
			s.add(r, stream)
		})
	}
	wg.Wait()
	s.mu.Lock()
	s.cpu += cpuTime() - cpu0
	s.wall += time.Since(start)
	s.mu.Unlock()
}

// runClosed drives conns workers back to back for dur: the throughput at saturation.
func runClosed(tg *target, convs []*conv, conns int, dur time.Duration) (done int, errs int, elapsed time.Duration, cpu time.Duration) {
	var ok, bad atomic.Int64
	slots := newSlots(conns)
	cpu0, start := cpuTime(), time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for _, sl := range slots {
		wg.Go(func() {
			pprof.SetGoroutineLabels(agentRole)
			bp := bodyPool.Get().(*[]byte)
			defer bodyPool.Put(bp)
			for time.Now().Before(deadline) {
				c, t, inst := sl.nextTurn(convs)
				body := c.body((*bp)[:0], t, inst, false)
				*bp = body
				var kb [24]byte
				if r := tg.call(body, replyKey(kb[:0], c, t), false, "", time.Now()); r.err != nil {
					bad.Add(1)
				} else {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(ok.Load()), int(bad.Load()), time.Since(start), cpuTime() - cpu0
}
