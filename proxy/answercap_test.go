package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/protocol"
)

// TestHardeningAnswerCap (issue 18 item 6): K streams each relay M MiB of text deltas
// and then stall. The agent must get every byte as the upstream sent it, while the
// copy decoded for the record stays under replay.max_answer_bytes (the default here):
// the heap an open stream holds is measured, and bounded by the cap plus 1 MiB of
// buffers. Once the streams end, each step holds at most the cap, says how many bytes
// it lacks, and its episode advanced. M is 4 MiB, four times the cap: a stream that
// kept its whole answer, or twice the cap, would break the bound just as 8 MiB did, at
// half the bytes relayed (each costs CPU under -race).
func TestHardeningAnswerCap(t *testing.T) {
	const streams, perStream = 8, 4 << 20
	if perStream < 4*protocol.DefaultMaxAnswer {
		t.Fatalf("each stream must relay at least 4× the cap %d", protocol.DefaultMaxAnswer)
	}
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

// TestResponsesLongFinalEvent (issue 27): a Responses stream whose answer is longer than
// replay.max_answer_bytes (64 KiB here) ends with a response.completed event that
// repeats it whole, longer than the SSE framer holds for that limit (2 × 64 KiB +
// 256 KiB; so are output_text.done and output_item.done). The agent gets every byte
// as the upstream sent it; the step keeps a prefix of the text within the limit and
// says it lacks the rest, the final event's usage, no error; and the episode advanced:
// a call continuing the response by its id is its second turn.
func TestResponsesLongFinalEvent(t *testing.T) {
	const limit = 64 << 10
	// Words of 1 KiB (the fake streams a delta a word) with quotes, newlines and
	// non-ASCII, which JSON escapes or keeps as they are.
	text := strings.Repeat(strings.Repeat("\"Résumé\"\n", 100)+"lorem ipsum ", 512)
	if len(text) <= protocol.EventBound(limit) {
		t.Fatalf("the answer (%d bytes) must outgrow the framer's bound %d", len(text), protocol.EventBound(limit))
	}
	sent := make(chan []byte, 2)
	var calls atomic.Int32
	upstream := func(fc *fasthttp.RequestCtx) {
		rep := testkit.Reply{Content: text}
		if calls.Add(1) > 1 {
			rep.Content = "Short."
		}
		stream := testkit.ResponseStream(gjson.ParseBytes(fc.PostBody()), int(calls.Load()), rep)
		sent <- stream
		fc.SetContentType("text/event-stream")
		fc.SetBodyStreamWriter(func(w *bufio.Writer) {
			for b := stream; len(b) > 0; b = b[min(16<<10, len(b)):] {
				_, _ = w.Write(b[:min(16<<10, len(b))])
				_ = w.Flush()
			}
		})
	}
	p := newInmemProxy(t, upstream, false, func(o *Options, _ *fasthttp.Server) { o.MaxAnswerBytes = limit })
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)

	if err := p.doAt("/v1/responses", req, resp, []byte(`{"model":"gpt-4.1","stream":true,"input":"Write the long report."}`)); err != nil {
		t.Fatal(err)
	}
	if want := <-sent; resp.StatusCode() != 200 || !bytes.Equal(resp.Body(), want) {
		t.Fatalf("status %d: the agent got %d bytes, not the %d the upstream sent", resp.StatusCode(), len(resp.Body()), len(want))
	}
	turn := <-p.rec.turns
	kept := turn.Response.Content
	if len(kept) == 0 || len(kept) > limit || !strings.HasPrefix(text, kept) || turn.AnswerTruncated <= 0 {
		t.Fatalf("the step kept %d bytes (limit %d; a prefix of the text: %v), answer_truncated_bytes %d",
			len(kept), limit, strings.HasPrefix(text, kept), turn.AnswerTruncated)
	}
	if turn.Status != 200 || turn.Error != "" || turn.Usage != (protocol.Usage{InputTokens: 42, OutputTokens: 7}) || turn.Episode.Turns != 1 {
		t.Fatalf("step: status %d, error %q, usage %+v, episode turns %d", turn.Status, turn.Error, turn.Usage, turn.Episode.Turns)
	}

	// The response's id was read: the next call continues the episode through it.
	if err := p.doAt("/v1/responses", req, resp, []byte(`{"model":"gpt-4.1","stream":true,"previous_response_id":"resp_0001","input":"Shorter."}`)); err != nil {
		t.Fatal(err)
	}
	<-sent
	next := <-p.rec.turns
	if next.Episode.ID != turn.Episode.ID || next.Episode.Turns != 2 || next.Response.Content != "Short." || next.AnswerTruncated != 0 {
		t.Fatalf("the call continuing resp_0001: episode %s (want %s), turns %d, answer %q, truncated %d",
			next.Episode.ID, turn.Episode.ID, next.Episode.Turns, next.Response.Content, next.AnswerTruncated)
	}
}
