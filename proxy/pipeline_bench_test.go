package proxy

import (
	"bytes"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// The whole-pipeline cost per call, for issue 17's targets: at most 30 allocations
// and at most 2× the body's bytes allocated per call, and turn 60 of an episode within
// 1.5× of turn 1. Run with
//
//	go test -run '^$' -bench . -benchmem ./proxy/
//
// allocs/op and B/op count the whole process: the agent's fasthttp client and the
// fake upstream too. Each benchmark first measures that floor — the same calls sent
// straight to the upstream — and reports what camproxy adds on top of it:
// proxy-allocs/op, proxy-B/op, body-x (proxy-B/op ÷ the body's length) and
// proxy-ns/op (the time added to the direct call).

// floorCost is the allocations, bytes and nanoseconds per call of the agent and the
// fake upstream alone: body sent straight to the upstream's listener, n times.
func floorCost(tb testing.TB, p *inmemProxy, body []byte, n int) cost {
	tb.Helper()
	direct := &fasthttp.HostClient{Addr: "upstream.test", Dial: p.client.Dial, MaxConns: 64,
		ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	defer direct.CloseIdleConnections()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	direct.Dial = func(string) (c net.Conn, err error) { return p.upLn.Dial() }
	call := func() {
		req.Reset()
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("http://upstream.test/v1/chat/completions")
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(body)
		if err := direct.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			tb.Fatalf("direct call: %v (status %d)", err, resp.StatusCode())
		}
	}
	for range 50 { // warm the pools
		call()
	}
	return measure(n, call)
}

// cost is what one call costs on average.
type cost struct{ allocs, bytes, ns float64 }

// measure runs call n times and returns its cost per call.
func measure(n int, call func()) cost {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	for range n {
		call()
	}
	ns := float64(time.Since(start).Nanoseconds())
	runtime.ReadMemStats(&after)
	return cost{allocs: float64(after.Mallocs-before.Mallocs) / float64(n),
		bytes: float64(after.TotalAlloc-before.TotalAlloc) / float64(n), ns: ns / float64(n)}
}

// benchCalls runs body through the proxy b.N times and reports what the proxy adds to
// the floor's allocations, and its bytes relative to the body.
func benchCalls(b *testing.B, p *inmemProxy, body []byte, hdr ...string) {
	floor := floorCost(b, p, body, 200)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	call := func() {
		if err := p.do(req, resp, body, hdr...); err != nil || resp.StatusCode() != 200 {
			b.Fatalf("call: %v (status %d)", err, resp.StatusCode())
		}
		if string(resp.Header.Peek(hdrContext)) == "none" {
			b.Fatal("no context spliced: the benchmark would measure a call without augmentation")
		}
	}
	for range 20 { // warm the cache, the pools and the connections
		call()
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	c := measure(b.N, call)
	b.StopTimer()
	b.ReportMetric(c.allocs-floor.allocs, "proxy-allocs/op")
	b.ReportMetric(c.bytes-floor.bytes, "proxy-B/op")
	b.ReportMetric((c.bytes-floor.bytes)/float64(len(body)), "body-x")
	b.ReportMetric(c.ns-floor.ns, "proxy-ns/op")
}

// BenchmarkPipeline is one non-streamed chat call through the whole pipeline with the
// real tau-bench bodies: turn 1 of a trajectory (a new episode each call: context from
// the warm cache, an episode created), and turn 20 (a call of a known episode, named by
// X-CAM-Episode-Id as a harness does: its context spliced again).
func BenchmarkPipeline(b *testing.B) {
	trajs := tauTrajectories(b)
	turn1, _ := chatBody(trajs[0], 1)
	var turn20 []byte
	for _, tr := range trajs {
		if body, ok := chatBody(tr, 20); ok {
			turn20 = body
			break
		}
	}
	if turn20 == nil {
		b.Fatal("no trajectory has 20 turns")
	}
	b.Run("turn=1/new-episode", func(b *testing.B) {
		benchCalls(b, newInmemProxy(b, answerCompletion, true), turn1)
	})
	b.Run("turn=20/known-episode", func(b *testing.B) {
		benchCalls(b, newInmemProxy(b, answerCompletion, true), turn20, hdrEpisode, "bench-turn20")
	})
	b.Run("turn=21/stitched", func(b *testing.B) {
		// No header: the call finds its episode by its messages. Turn 20 is sent once;
		// each call then resends its history, the upstream's answer and a user reply,
		// so that its longest assistant prefix is the tip turn 20 left (claimed once,
		// then found again as a retried turn is: the same work).
		p := newInmemProxy(b, answerCompletion, true)
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		if err := p.do(req, resp, turn20); err != nil || resp.StatusCode() != 200 {
			b.Fatalf("turn 20: %v (status %d)", err, resp.StatusCode())
		}
		id := string(resp.Header.Peek(hdrEpisode))
		answer := gjson.GetBytes(completion, "choices.0.message").Raw
		turn21 := append(bytes.TrimSuffix(bytes.Clone(turn20), []byte(`],"temperature":0}`)),
			`,`+answer+`,{"role":"user","content":"My user id is mia_li_3668."}],"temperature":0}`...)
		if err := p.do(req, resp, turn21); err != nil || string(resp.Header.Peek(hdrEpisode)) != id {
			b.Fatalf("turn 21 was not stitched to turn 20's episode %s (got %q, err %v)", id, resp.Header.Peek(hdrEpisode), err)
		}
		benchCalls(b, p, turn21)
	})
}

// BenchmarkEpisodeTurns is turn 1 and turn 60 of one long episode of real messages,
// each call of a known episode; the target is turn 60 within 1.5× of turn 1
// (compare their ns/op, and see BenchmarkEpisodeTurnRatio).
func BenchmarkEpisodeTurns(b *testing.B) {
	trajs := tauTrajectories(b)
	for _, t := range []int{1, 60} {
		body := longEpisode(b, trajs, t)
		b.Run("turn="+strconv.Itoa(t), func(b *testing.B) {
			benchCalls(b, newInmemProxy(b, answerCompletion, true), body, hdrEpisode, "bench-long-"+strconv.Itoa(t))
		})
	}
}

// BenchmarkEpisodeTurnRatio sends turn 1 and turn 60 alternately through the same
// proxy, so that both see the same machine at the same moment, and reports their time
// ratio (t60/t1) beside each one's mean time; proxy-t60/t1 is the same ratio of the
// time each adds to its direct call (the floor moves the longer body too).
func BenchmarkEpisodeTurnRatio(b *testing.B) {
	trajs := tauTrajectories(b)
	p := newInmemProxy(b, answerCompletion, true)
	bodies := [2][]byte{longEpisode(b, trajs, 1), longEpisode(b, trajs, 60)}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	var spent [2]time.Duration
	call := func(k int) {
		start := time.Now()
		if err := p.do(req, resp, bodies[k], hdrEpisode, "bench-ratio-"+strconv.Itoa(k)); err != nil || resp.StatusCode() != 200 {
			b.Fatalf("call: %v (status %d)", err, resp.StatusCode())
		}
		spent[k] += time.Since(start)
	}
	for range 20 {
		call(0)
		call(1)
	}
	spent = [2]time.Duration{}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		call(0)
		call(1)
	}
	b.StopTimer()
	b.ReportMetric(float64(spent[0].Nanoseconds())/float64(b.N), "t1-ns")
	b.ReportMetric(float64(spent[1].Nanoseconds())/float64(b.N), "t60-ns")
	b.ReportMetric(float64(spent[1])/float64(spent[0]), "t60/t1")
	floor1, floor60 := floorCost(b, p, bodies[0], 200), floorCost(b, p, bodies[1], 200)
	added1 := float64(spent[0].Nanoseconds())/float64(b.N) - floor1.ns
	added60 := float64(spent[1].Nanoseconds())/float64(b.N) - floor60.ns
	b.ReportMetric(added60/added1, "proxy-t60/t1")
}
