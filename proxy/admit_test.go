package proxy

import (
	"bufio"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/protocol/registry"
)

// admitServer is a data plane limited to max calls at once, waiting at most wait for
// a slot, whose upstream never answers: a call forwarded upstream stays in flight
// until first_byte_timeout (hang) fails it. For tests on synctest's clock.
func admitServer(t *testing.T, max int, wait, hang time.Duration) (*Server, *sync.Map) {
	t.Helper()
	o := testOptions(t, "http://upstream.test/v1", &fixedAugmenter{}, &turnSink{discard: true})
	o.Upstreams = map[string]*Upstream{"openai": hangingDial(t, hang)}
	o.MaxInFlight, o.QueueTimeout = max, wait
	s := New(o)
	t.Cleanup(func() {
		s.cancelBase()
		if c, ok := o.Episodes.(io.Closer); ok {
			_ = c.Close()
		}
		time.Sleep(10 * time.Minute) // every call ends, and the pools' cleaners (90s idle) with them
	})
	var left sync.Map // the conns whose client left; a pipe cannot be peeked at
	s.peerGone = func(c net.Conn) bool { _, ok := left.Load(c); return ok }
	return s, &left
}

// pendingCall is a call being handled on its own goroutine.
type pendingCall struct {
	fc   *fasthttp.RequestCtx
	done atomic.Bool
}

// startCall hands s a call of method on path; it runs until its handler returns.
func startCall(t *testing.T, s *Server, method, path string) *pendingCall {
	t.Helper()
	agent, other := net.Pipe()
	t.Cleanup(func() { agent.Close(); other.Close() })
	c := &pendingCall{fc: &fasthttp.RequestCtx{}}
	c.fc.Init2(agent, log.New(io.Discard, "", 0), true)
	c.fc.Request.Header.SetMethod(method)
	c.fc.Request.SetRequestURI(path)
	c.fc.Request.Header.SetContentType("application/json")
	c.fc.Request.SetBodyString(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	go func() {
		s.Handler()(c.fc)
		c.done.Store(true)
	}()
	return c
}

// inFlight starts n calls that hold their slots until the upstream gives up.
func inFlight(t *testing.T, s *Server, n int) []*pendingCall {
	t.Helper()
	cs := make([]*pendingCall, n)
	for i := range cs {
		cs[i] = startCall(t, s, "GET", "/v1/models") // relayed upstream as it came
	}
	synctest.Wait()
	if got, q := s.limit.counts(); got != n || q != 0 {
		t.Fatalf("%d calls started: in flight %d, queued %d", n, got, q)
	}
	return cs
}

// overloadShape checks a refusal in p's error shape, as p's SDKs read it.
func overloadShape(t *testing.T, p *registry.Protocol, r *fasthttp.Response) {
	t.Helper()
	b := r.Body()
	var msg string
	switch p.Errors {
	case registry.OpenAIErrors:
		msg = gjson.GetBytes(b, "error.message").String()
		if typ := gjson.GetBytes(b, "error.type").String(); typ != "overloaded_error" {
			t.Errorf("error.type %q", typ)
		}
	case registry.AnthropicErrors:
		msg = gjson.GetBytes(b, "error.message").String()
		if typ := gjson.GetBytes(b, "type").String(); typ != "error" {
			t.Errorf("type %q", typ)
		}
		if typ := gjson.GetBytes(b, "error.type").String(); typ != "overloaded_error" {
			t.Errorf("error.type %q", typ)
		}
	case registry.AWSErrors:
		msg = gjson.GetBytes(b, "message").String()
		// The AWS SDKs retry a 503 whatever its type; Bedrock names its 503 so.
		if h := string(r.Header.Peek("X-Amzn-Errortype")); h != "ServiceUnavailableException" {
			t.Errorf("x-amzn-ErrorType %q", h)
		}
	case registry.GoogleErrors:
		msg = gjson.GetBytes(b, "error.message").String()
		if c, st := gjson.GetBytes(b, "error.code").Int(), gjson.GetBytes(b, "error.status").String(); c != 503 || st != "UNAVAILABLE" {
			t.Errorf("error.code %d, error.status %q", c, st)
		}
	default:
		t.Fatalf("no check for the error shape %s", p.Errors.Name)
	}
	if !strings.Contains(msg, "overloaded") || !strings.Contains(msg, "server.max_in_flight") {
		t.Errorf("message %q does not say why", msg)
	}
}

// TestAdmissionLimit (issue 32): with server.max_in_flight = N, the N+1th call waits;
// after server.queue_timeout it gets 503 with Retry-After in its protocol's error
// shape, counted as camproxy_rejected_total{reason="queue_timeout"}; once the calls
// in flight end, calls are admitted again.
func TestAdmissionLimit(t *testing.T) {
	const n, wait, hang = 2, time.Second, 10 * time.Second
	for _, p := range registry.All {
		t.Run(p.Explain, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, _ := admitServer(t, n, wait, hang)
				running := inFlight(t, s, n)

				c := startCall(t, s, "POST", p.Example)
				synctest.Wait()
				if c.done.Load() {
					t.Fatalf("call past the limit answered at once: %d %s", c.fc.Response.StatusCode(), c.fc.Response.Body())
				}
				if _, q := s.limit.counts(); q != 1 {
					t.Fatalf("queued %d, want 1", q)
				}
				time.Sleep(wait - time.Millisecond)
				synctest.Wait()
				if c.done.Load() {
					t.Fatal("refused before server.queue_timeout")
				}
				time.Sleep(time.Millisecond)
				synctest.Wait()
				if !c.done.Load() {
					t.Fatal("still waiting after server.queue_timeout")
				}
				r := &c.fc.Response
				if r.StatusCode() != http.StatusServiceUnavailable || string(r.Header.Peek("Retry-After")) != retryAfter {
					t.Fatalf("status %d, Retry-After %q: %s", r.StatusCode(), r.Header.Peek("Retry-After"), r.Body())
				}
				overloadShape(t, p, r)
				if v := testutil.ToFloat64(s.m.Rejected.WithLabelValues(rejectQueueTimeout)); v != 1 {
					t.Errorf("rejected_total{queue_timeout} = %v", v)
				}
				if _, q := s.limit.counts(); q != 0 {
					t.Errorf("queued %d after the refusal", q)
				}

				time.Sleep(hang) // the calls in flight fail upstream and give their slots back
				synctest.Wait()
				for _, r := range running {
					if !r.done.Load() || r.fc.Response.StatusCode() != http.StatusGatewayTimeout {
						t.Fatalf("call in flight: done %v, status %d", r.done.Load(), r.fc.Response.StatusCode())
					}
				}
				if got, _ := s.limit.counts(); got != 0 {
					t.Fatalf("%d slots still held after every call ended", got)
				}
				again := inFlight(t, s, n) // admitted, none waits
				_ = again
				if v := testutil.ToFloat64(s.m.Rejected.WithLabelValues(rejectQueueTimeout)); v != 1 {
					t.Errorf("rejected_total{queue_timeout} = %v after the calls ended", v)
				}
				time.Sleep(hang)
				synctest.Wait()
			})
		})
	}
}

// TestAdmissionWaitsForSlot: a waiting call takes the first slot that frees up,
// and waiting calls get slots in the order they came.
func TestAdmissionWaitsForSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hang = 10 * time.Second
		s, _ := admitServer(t, 2, time.Minute, hang)
		startCall(t, s, "GET", "/v1/models")
		time.Sleep(time.Second)
		startCall(t, s, "GET", "/v1/models") // ends a second after the first
		first := startCall(t, s, "GET", "/v1/models?first")
		synctest.Wait()
		second := startCall(t, s, "GET", "/v1/models?second")
		synctest.Wait()
		if _, q := s.limit.counts(); q != 2 {
			t.Fatalf("queued %d, want 2", q)
		}
		time.Sleep(hang - time.Second) // the first call in flight ends
		synctest.Wait()
		if _, q := s.limit.counts(); q != 1 {
			t.Fatalf("queued %d once a slot freed, want 1", q)
		}
		// The first to wait holds the slot: it ends (504) a hang after it got it.
		time.Sleep(hang)
		synctest.Wait()
		if !first.done.Load() || second.done.Load() {
			t.Fatalf("first done %v, second done %v: slots not given in arrival order", first.done.Load(), second.done.Load())
		}
		time.Sleep(2 * hang)
		synctest.Wait()
	})
}

// TestAdmissionQueueFull: as many calls wait as run; one more is refused at once,
// counted as queue_full.
func TestAdmissionQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, hang = 2, 10 * time.Second
		s, _ := admitServer(t, n, time.Minute, hang)
		inFlight(t, s, n)
		for range n {
			startCall(t, s, "GET", "/v1/models")
		}
		synctest.Wait()
		c := startCall(t, s, "POST", "/v1/chat/completions")
		synctest.Wait()
		if !c.done.Load() || c.fc.Response.StatusCode() != http.StatusServiceUnavailable {
			t.Fatalf("call past a full queue: done %v, status %d", c.done.Load(), c.fc.Response.StatusCode())
		}
		if v := testutil.ToFloat64(s.m.Rejected.WithLabelValues(rejectQueueFull)); v != 1 {
			t.Errorf("rejected_total{queue_full} = %v", v)
		}
		time.Sleep(3 * hang)
		synctest.Wait()
	})
}

// TestAdmissionClientLeftQueue: a client that goes away while its call waits leaves
// the queue at the watcher's next check, is not refused nor counted as an upstream
// error (499), and takes no slot: the next call to wait gets it.
func TestAdmissionClientLeftQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hang = 10 * time.Second
		s, left := admitServer(t, 1, time.Minute, hang)
		inFlight(t, s, 1)
		gone := startCall(t, s, "POST", "/v1/chat/completions")
		synctest.Wait()
		left.Store(gone.fc.Conn(), true)
		time.Sleep(peerPoll)
		synctest.Wait()
		if !gone.done.Load() || gone.fc.Response.StatusCode() != 499 {
			t.Fatalf("the call whose client left: done %v, status %d", gone.done.Load(), gone.fc.Response.StatusCode())
		}
		if _, q := s.limit.counts(); q != 0 {
			t.Fatalf("queued %d after its client left", q)
		}
		if v := testutil.CollectAndCount(s.m.Rejected); v != 0 {
			t.Errorf("%d rejected_total series: a client that left was counted as refused", v)
		}
		next := startCall(t, s, "GET", "/v1/models")
		time.Sleep(hang) // the call in flight ends: next gets its slot
		synctest.Wait()
		if got, q := s.limit.counts(); next.done.Load() || got != 1 || q != 0 {
			t.Fatalf("next: done %v (%d %s), in flight %d, queued %d", next.done.Load(), next.fc.Response.StatusCode(), next.fc.Response.Body(), got, q)
		}
		time.Sleep(hang)
		synctest.Wait()
	})
}

// TestAdmissionShedsContext: near the limit a new episode's context is not loaded
// (the CAM call is skipped, X-CAM-Context: shed) and the call goes on unaugmented;
// with slots free again the next new episode calls the augmenter.
func TestAdmissionShedsContext(t *testing.T) {
	p := newInmemProxy(t, answerCompletion, true, func(o *Options, _ *fasthttp.Server) { o.MaxInFlight = 8 })
	held := int(p.srv.limit.shedAt.Load()) - 1 // the call itself takes one more
	for range held {
		if r := p.srv.limit.enter(nil, nil); r != "" {
			t.Fatal(r)
		}
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	body := func(task string) []byte {
		return []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"` + task + `"}]}`)
	}
	if err := p.do(req, resp, body("book a flight to Lisbon")); err != nil {
		t.Fatal(err)
	}
	if src := string(resp.Header.Peek(hdrContext)); resp.StatusCode() != 200 || src != "shed" || p.aug.calls.Load() != 0 {
		t.Fatalf("near the limit: status %d, context %q, augmenter calls %d", resp.StatusCode(), src, p.aug.calls.Load())
	}
	for range held {
		p.srv.limit.leave()
	}
	if err := p.do(req, resp, body("book a flight to Porto")); err != nil {
		t.Fatal(err)
	}
	if src := string(resp.Header.Peek(hdrContext)); src != "miss" || p.aug.calls.Load() != 1 {
		t.Fatalf("slots free: context %q, augmenter calls %d", src, p.aug.calls.Load())
	}
}

// TestAdmissionStreamHoldsSlot: a streamed answer keeps its call's slot until its
// last event was relayed (the handler returned long before), then gives it back.
func TestAdmissionStreamHoldsSlot(t *testing.T) {
	release := make(chan struct{})
	stream := func(fc *fasthttp.RequestCtx) {
		fc.SetContentType("text/event-stream")
		fc.SetBodyStreamWriter(func(w *bufio.Writer) {
			_, _ = w.WriteString("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
			_ = w.Flush()
			<-release
			_, _ = w.WriteString("data: [DONE]\n\n")
		})
	}
	p := newInmemProxy(t, stream, true)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	resp.StreamBody = true
	if err := p.do(req, resp, []byte(`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`)); err != nil {
		t.Fatal(err)
	}
	// The head and first event are here: the handler has returned, the stream is open.
	if n, _ := p.srv.limit.counts(); n != 1 {
		t.Fatalf("in flight %d while the stream is open, want 1", n)
	}
	close(release)
	if _, err := io.Copy(io.Discard, resp.BodyStream()); err != nil {
		t.Fatal(err)
	}
	_ = resp.CloseBodyStream()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if n, _ := p.srv.limit.counts(); n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slot was not given back once the stream ended")
		}
	}
}

// TestAdmissionWebSocketTurn: an open socket holds no slot between turns; a turn past
// the limit ends with an error event of status 503 in OpenAI's WebSocket shape, the
// socket stays open, and the next turn, with a slot free, runs.
func TestAdmissionWebSocketTurn(t *testing.T) {
	p := newWSProxy(t, func(o *Options, _ *Upstream) { o.MaxInFlight, o.QueueTimeout = 1, 0 })
	ws := p.dial(t)
	if n, _ := p.srv.limit.counts(); n != 0 {
		t.Fatalf("an open socket holds %d slots", n)
	}
	if r := p.srv.limit.enter(nil, nil); r != "" { // another call takes the only slot
		t.Fatal(r)
	}
	send(t, ws, firstCreate())
	ev := last(readTurn(t, ws))
	if ev.Get("type").Str != "error" || ev.Get("status").Int() != http.StatusServiceUnavailable ||
		!strings.Contains(ev.Get("error.message").Str, "server.max_in_flight") {
		t.Fatalf("turn past the limit: %s", ev.Raw)
	}
	if v := testutil.ToFloat64(p.m.Rejected.WithLabelValues(rejectQueueFull)); v != 1 {
		t.Errorf("rejected_total{queue_full} = %v", v)
	}
	p.srv.limit.leave()
	send(t, ws, firstCreate())
	if ev := last(readTurn(t, ws)); ev.Get("type").Str != "response.completed" {
		t.Fatalf("turn with a slot free: %s", ev.Raw)
	}
}

// TestAdmissionAdaptsToCPU: while goroutines wait long for a core, the limit comes
// down to 3/4 of the calls in flight (never below its floor) and calls past it wait;
// while they do not, it climbs back an eighth at a time to server.max_in_flight,
// handing the slots it frees to the calls waiting. A pause longer than two intervals
// is not taken as this server's measure.
func TestAdmissionAdaptsToCPU(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cpu atomic.Int64 // the injected 90th percentile wait, ns
		a := newAdmission(1000, time.Minute, func() time.Duration { return time.Duration(cpu.Load()) })
		a.min = 10
		enter := func() chan string {
			c := make(chan string, 1)
			go func() { c <- a.enter(nil, nil) }()
			synctest.Wait()
			return c
		}
		for range 200 {
			if r := <-enter(); r != "" {
				t.Fatal(r)
			}
		}
		cpu.Store(int64(20 * time.Millisecond)) // saturated
		time.Sleep(adaptEvery)
		waiting := enter()
		if l := a.current(); l != 150 {
			t.Fatalf("limit %d after a saturated interval with 200 in flight, want 150", l)
		}
		if n, q := a.counts(); n != 200 || q != 1 {
			t.Fatalf("in flight %d, queued %d: the call past the lowered limit should wait", n, q)
		}
		for range 60 {
			a.leave()
		}
		if r := <-waiting; r != "" {
			t.Fatalf("waiting call: %q once slots were free under the limit", r)
		}
		if n, _ := a.counts(); n != 141 {
			t.Fatalf("in flight %d, want 141", n)
		}
		for range 30 {
			time.Sleep(adaptEvery)
			a.adapt()
		}
		if l := a.current(); l != 10 {
			t.Fatalf("limit %d after a long saturation, want the floor 10", l)
		}
		if !a.pressed() {
			t.Error("not pressed with the calls in flight over the lowered limit: the CAM call would not be shed")
		}
		if e := overloaded(rejectQueueFull, a); !strings.Contains(e.Msg, "CPU is saturated") || !strings.Contains(e.Msg, "server.max_in_flight 1000") {
			t.Errorf("refusal under a lowered limit: %q", e.Msg)
		}

		// Idle again: an eighth more per interval, up to the ceiling; waiters get the slots.
		for range 141 - 11 {
			a.leave()
		}
		for range 11 {
			a.leave()
		}
		for range 10 {
			if r := <-enter(); r != "" {
				t.Fatal(r)
			}
		}
		queued := enter()
		if _, q := a.counts(); q != 1 {
			t.Fatalf("queued %d at the floor, want 1", q)
		}
		cpu.Store(int64(time.Millisecond))
		time.Sleep(adaptEvery)
		a.adapt()
		if l := a.current(); l != 11 {
			t.Fatalf("limit %d after one idle interval from 10, want 11", l)
		}
		if r := <-queued; r != "" {
			t.Fatalf("queued call: %q when the limit grew", r)
		}
		for range 60 {
			time.Sleep(adaptEvery)
			a.adapt()
		}
		if l := a.current(); l != 1000 {
			t.Fatalf("limit %d after a long idle spell, want server.max_in_flight 1000", l)
		}

		// A pause: the waits measured since are not this server's.
		cpu.Store(int64(time.Second))
		time.Sleep(time.Second)
		a.adapt()
		if l := a.current(); l != 1000 {
			t.Fatalf("limit %d after a pause: the first measure after it was taken", l)
		}
		for range 11 {
			a.leave()
		}
	})
}

// TestAdmissionClimbsWhileCallsWait: streams that hold their slots for long (agents'
// idle streams) keep the calls in flight above a limit that a saturated moment
// lowered; once the CPU is idle again the limit climbs back above them and admits the
// calls waiting, though no call arrives meanwhile (the clients all wait in the queue).
// It used to adapt only when a call arrived, and to climb from the lowered limit, not
// from the calls in flight: the waiters timed out and were refused while the CPU was
// idle, and the bench's 10 000 idle streams never all opened.
func TestAdmissionClimbsWhileCallsWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cpu atomic.Int64 // the injected 90th percentile wait, ns
		a := newAdmission(1000, time.Second, func() time.Duration { return time.Duration(cpu.Load()) })
		a.min = 10
		for range 200 { // held to the end of the test: idle streams
			if r := a.enter(nil, nil); r != "" {
				t.Fatal(r)
			}
		}
		cpu.Store(int64(20 * time.Millisecond)) // the streams' opening saturated the CPU
		time.Sleep(adaptEvery)
		waiting := make([]chan string, 3)
		for i := range waiting {
			waiting[i] = make(chan string, 1)
			go func() { waiting[i] <- a.enter(nil, nil) }()
		}
		synctest.Wait()
		if l := a.current(); l != 150 {
			t.Fatalf("limit %d after a saturated interval with 200 in flight, want 150", l)
		}
		if n, q := a.counts(); n != 200 || q != 3 {
			t.Fatalf("in flight %d, queued %d: the calls past the lowered limit should wait", n, q)
		}
		cpu.Store(int64(time.Millisecond)) // idle from now on; no call arrives
		for i, w := range waiting {
			if r := <-w; r != "" {
				t.Fatalf("waiting call %d: %q with the CPU idle for its whole wait (limit %d, in flight 200)", i, r, a.current())
			}
		}
		if n, q := a.counts(); n != 203 || q != 0 {
			t.Fatalf("in flight %d, queued %d, want 203 and 0", n, q)
		}
		if l := a.current(); l <= 203 {
			t.Fatalf("limit %d: not above the calls in flight", l)
		}

		// A long saturation cut the limit to its floor under the 203 streams; then the
		// CPU is idle one interval in two. An idle interval lifts the limit an eighth
		// over the calls that ran idle, not over the floor, so the waiters get in.
		cpu.Store(int64(20 * time.Millisecond))
		for range 10 {
			time.Sleep(adaptEvery)
			a.adapt()
		}
		if l := a.current(); l != 10 {
			t.Fatalf("limit %d after a long saturation, want the floor 10", l)
		}
		busy := false
		a.cpuWait = func() time.Duration {
			busy = !busy
			if busy {
				return 20 * time.Millisecond
			}
			return time.Millisecond
		}
		for i := range waiting {
			go func() { waiting[i] <- a.enter(nil, nil) }()
		}
		for i, w := range waiting {
			if r := <-w; r != "" {
				t.Fatalf("waiting call %d: %q though the CPU was idle every other interval (limit %d, in flight %d)", i, r, a.current(), 203)
			}
		}
		if n, q := a.counts(); n != 206 || q != 0 {
			t.Fatalf("in flight %d, queued %d, want 206 and 0", n, q)
		}
		time.Sleep(time.Second) // the limit's ticker stops with the queue empty (synctest: no goroutine left)
	})
}

// TestCPUWaitQuantile: the 90th percentile of the waits added since the last read,
// as the upper bound of its bucket; the open-ended last bucket reads as its lower one.
func TestCPUWaitQuantile(t *testing.T) {
	buckets := []float64{0, 1e-6, 1e-3, 1e-2, 1e-1, math.Inf(1)}
	tests := []struct {
		name         string
		prev, counts []uint64
		want         time.Duration
	}{
		{"nothing new", []uint64{5, 5, 5, 5, 5}, []uint64{5, 5, 5, 5, 5}, 0},
		{"all under a µs", []uint64{0, 0, 0, 0, 0}, []uint64{100, 0, 0, 0, 0}, time.Microsecond},
		{"a tenth slow", []uint64{0, 0, 0, 0, 0}, []uint64{0, 90, 0, 10, 0}, time.Millisecond},
		{"over a tenth slow", []uint64{0, 0, 0, 0, 0}, []uint64{0, 89, 0, 11, 0}, 100 * time.Millisecond},
		{"only the new ones count", []uint64{0, 1000, 0, 0, 0}, []uint64{0, 1001, 0, 9, 0}, 100 * time.Millisecond},
		{"open-ended bucket", []uint64{0, 0, 0, 0, 0}, []uint64{0, 0, 0, 0, 3}, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := slices.Clone(tt.prev)
			if got := quantile(buckets, tt.counts, prev, 0.9); got != tt.want {
				t.Fatalf("quantile = %v, want %v", got, tt.want)
			}
			if !slices.Equal(prev, tt.counts) {
				t.Fatalf("prev %v not moved to %v", prev, tt.counts)
			}
		})
	}
	found := false
	for _, d := range metrics.All() {
		found = found || d.Name == schedLatency && d.Kind == metrics.KindFloat64Histogram
	}
	if !found {
		t.Fatalf("this runtime has no %s histogram: the limit would never adapt", schedLatency)
	}
}
