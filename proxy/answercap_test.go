package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/protocol"
)

// TestHardeningAnswerCap (issue 18 item 6): K streams each relay M MiB of text deltas
// and then stall. The agent must get every byte as the upstream sent it, while the
// copy decoded for the record stays under replay.max_answer_bytes (the default here):
// the heap an open stream holds is measured, and bounded by the cap plus 1 MiB of
// buffers. Once the streams end, each step holds at most the cap, says how many bytes
// it lacks, and its episode advanced.
func TestHardeningAnswerCap(t *testing.T) {
	const streams, perStream = 8, 8 << 20
	delta := []byte(`data: {"choices":[{"index":0,"delta":{"content":"` + string(bytes.Repeat([]byte("lorem ipsum "), 85)) + `"}}]}` + "\n\n")
	deltas := perStream / len(delta)
	tail := []byte(`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":7}}` + "\n\ndata: [DONE]\n\n")
	sent := deltas * len(delta)

	release := make(chan struct{})
	upstream := func(fc *fasthttp.RequestCtx) {
		fc.SetContentType("text/event-stream")
		fc.SetBodyStreamWriter(func(w *bufio.Writer) {
			for range deltas {
				_, _ = w.Write(delta)
				if w.Buffered() > 32<<10 {
					_ = w.Flush()
				}
			}
			_ = w.Flush()
			<-release // stalled: the answer is open, its final event not sent
			_, _ = w.Write(tail)
			_ = w.Flush()
		})
	}
	p := newInmemProxy(t, upstream, false)
	p.client.StreamResponseBody = true
	p.client.ReadTimeout = 0 // the stall is the test's own

	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	before := heap()

	var relayed sync.WaitGroup // each stream's first M MiB reached the agent
	var ended sync.WaitGroup
	errs := make(chan error, streams)
	relayed.Add(streams)
	ended.Add(streams)
	for i := range streams {
		go func() {
			defer ended.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			body := fmt.Appendf(nil, `{"model":"m","stream":true,"messages":[{"role":"user","content":"write forever %d"}]}`, i)
			if err := p.do(req, resp, body); err != nil {
				relayed.Done()
				errs <- err
				return
			}
			// The agent reads the stream as it comes, comparing each byte with the sent ones.
			r := resp.BodyStream()
			got := make([]byte, len(delta))
			for k := range deltas {
				if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, delta) {
					relayed.Done()
					errs <- fmt.Errorf("stream %d: delta %d differs from what the upstream sent (err %v)", i, k, err)
					return
				}
			}
			relayed.Done()
			rest, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(rest, tail) {
				errs <- fmt.Errorf("stream %d: the end differs from what the upstream sent (%q, err %v)", i, rest, err)
			}
		}()
	}
	relayed.Wait()
	perOpen := (int64(heap()) - int64(before)) / streams
	close(release)
	ended.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	var maxKept, minCut int64 = 0, -1
	for range streams {
		turn := <-p.rec.turns
		kept := int64(len(turn.Response.Content))
		maxKept = max(maxKept, kept)
		if minCut < 0 || turn.AnswerTruncated < minCut {
			minCut = turn.AnswerTruncated
		}
		if turn.Error != "" || turn.Usage != (protocol.Usage{InputTokens: 5, OutputTokens: 7}) || turn.Episode.Turns != 1 {
			t.Fatalf("turn: error %q, usage %+v, episode turns %d", turn.Error, turn.Usage, turn.Episode.Turns)
		}
	}
	faultRow(t, "proxy", fmt.Sprintf("%d streams relay %d MiB of text deltas each, then stall", streams, perStream>>20),
		fmt.Sprintf("every byte as sent (%d each)", sent),
		fmt.Sprintf("heap %.2f MiB per open stream; steps keep ≤ %d bytes, answer_truncated_bytes ≥ %d", float64(perOpen)/(1<<20), maxKept, minCut))
	if bound := int64(protocol.DefaultMaxAnswer + 1<<20); perOpen > bound {
		t.Errorf("an open stream holds %d bytes of heap, more than the cap %d plus 1 MiB", perOpen, protocol.DefaultMaxAnswer)
	}
	if maxKept > protocol.DefaultMaxAnswer || minCut <= 0 {
		t.Errorf("a step kept %d bytes (cap %d), or was not marked truncated (%d)", maxKept, protocol.DefaultMaxAnswer, minCut)
	}
}
