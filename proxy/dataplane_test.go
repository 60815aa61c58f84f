package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/episode"
)

// The data plane step by step, over in-memory listeners (inmem_test.go): what reaches
// the upstream, what reaches the agent and when, and what is recorded.

// upstreamCall is what the fake upstream received.
type upstreamCall struct {
	path   string
	body   []byte
	header http.Header
}

// capture wraps an upstream handler so that each call it receives is sent on calls.
func capture(calls chan<- upstreamCall, h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(fc *fasthttp.RequestCtx) {
		c := upstreamCall{path: string(fc.Path()), body: bytes.Clone(fc.PostBody()), header: http.Header{}}
		for k, v := range fc.Request.Header.All() {
			c.header.Add(string(k), string(v))
		}
		calls <- c
		h(fc)
	}
}

// nextTurn returns the turn recorded next, failing t when none comes.
func nextTurn(t *testing.T, p *inmemProxy) *episode.Turn {
	t.Helper()
	select {
	case turn := <-p.rec.turns:
		return turn
	case <-time.After(10 * time.Second): // a hang guard, not a measurement
		t.Fatal("no turn recorded")
		return nil
	}
}

const taskBody = `{"model":"gpt-4o","messages":[{"role":"system","content":"You are an airline agent."},` +
	`{"role":"user","content":"Change my flight to Friday."}],"temperature":0}`

// TestNonStreamedCallSplicedAndRelayed: the context reaches the upstream spliced after
// the task, byte for byte around it; camproxy's own headers do not reach it, the
// agent's others do; the agent gets the upstream's answer with the episode's headers,
// and the turn is recorded with its answer. The second call of the same task is served
// from the cache.
func TestNonStreamedCallSplicedAndRelayed(t *testing.T) {
	calls := make(chan upstreamCall, 4)
	p := newInmemProxy(t, capture(calls, answerCompletion), false)
	want := strings.Replace(taskBody, `Friday."`, `Friday.\n\n`+camContext+`"`, 1)

	for i, source := range []string{"miss", "hit"} {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		err := p.do(req, resp, []byte(taskBody), "Authorization", "Bearer sk-agent", hdrTask, "airline-7", hdrArm, "cam", "X-Cam-Future", "1")
		if err != nil {
			t.Fatal(err)
		}
		up := <-calls
		if string(up.body) != want {
			t.Errorf("call %d: upstream body\n%s\nwant\n%s", i, up.body, want)
		}
		if up.path != "/v1/chat/completions" {
			t.Errorf("call %d: upstream path %q", i, up.path)
		}
		for k := range up.header {
			if strings.HasPrefix(strings.ToLower(k), "x-cam-") {
				t.Errorf("call %d: camproxy's header %s reached the upstream", i, k)
			}
		}
		if got := up.header.Get("Authorization"); got != "Bearer sk-agent" {
			t.Errorf("call %d: upstream Authorization %q; the agent's passes through", i, got)
		}
		if resp.StatusCode() != 200 || !bytes.Equal(resp.Body(), completion) {
			t.Errorf("call %d: agent got %d %s", i, resp.StatusCode(), resp.Body())
		}
		h := &resp.Header
		if got := string(h.Peek(hdrContext)); got != source {
			t.Errorf("call %d: %s %q; want %q", i, hdrContext, got, source)
		}
		if string(h.Peek(hdrArm)) != "cam" || len(h.Peek(hdrEpisode)) == 0 {
			t.Errorf("call %d: arm %q, episode %q", i, h.Peek(hdrArm), h.Peek(hdrEpisode))
		}
		turn := nextTurn(t, p)
		if turn.Status != 200 || turn.Error != "" || turn.Response.Content != "Could you give me your user id?" {
			t.Errorf("call %d: recorded %d %q, answer %+v", i, turn.Status, turn.Error, turn.Response)
		}
		if turn.Episode.ID != string(h.Peek(hdrEpisode)) || turn.Episode.TaskID != "airline-7" || turn.Episode.Context != camContext {
			t.Errorf("call %d: recorded episode %+v", i, turn.Episode)
		}
		if len(turn.Messages) != 2 || turn.Messages[1].Content != "Change my flight to Friday." {
			t.Errorf("call %d: recorded messages %+v; want the two the agent sent, unspliced", i, turn.Messages)
		}
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
	if n := p.aug.calls.Load(); n != 1 {
		t.Errorf("the augmenter was called %d times; the second call is a cache hit", n)
	}
}

// streamEvents is a streamed chat answer, one SSE event a write.
var streamEvents = []string{
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Your user \"},\"finish_reason\":null}]}\n\n",
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"id, please?\"},\"finish_reason\":null}]}\n\n",
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
	"data: [DONE]\n\n",
}

// TestStreamRelayedEventByEvent: the upstream sends each event only once the agent
// has read the one before, so a proxy that held back or coalesced events would never
// deliver the next; the streamed answer is recorded whole.
func TestStreamRelayedEventByEvent(t *testing.T) {
	next, stop := make(chan struct{}), make(chan struct{})
	defer close(stop)
	p := newInmemProxy(t, func(fc *fasthttp.RequestCtx) {
		fc.SetContentType("text/event-stream")
		fc.SetBodyStreamWriter(func(w *bufio.Writer) {
			for i, ev := range streamEvents {
				if i > 0 {
					select {
					case <-next:
					case <-stop:
						return
					}
				}
				_, _ = w.WriteString(ev)
				if w.Flush() != nil {
					return
				}
			}
		})
	}, false)

	hc := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return p.ln.Dial() }}}
	defer hc.CloseIdleConnections()
	body := strings.Replace(taskBody, `"temperature":0`, `"stream":true`, 1)
	resp, err := hc.Post("http://camproxy.test/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := make(chan string)
	go func() {
		br := bufio.NewReader(resp.Body)
		var ev strings.Builder
		for {
			line, err := br.ReadString('\n')
			ev.WriteString(line)
			if line == "\n" {
				events <- ev.String()
				ev.Reset()
			}
			if err != nil {
				close(events)
				return
			}
		}
	}()
	for i, want := range streamEvents {
		if i > 0 {
			next <- struct{}{}
		}
		select {
		case got, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended before event %d", i)
			}
			if got != want {
				t.Fatalf("event %d: %q; want %q", i, got, want)
			}
		case <-time.After(10 * time.Second): // a hang guard, not a measurement
			t.Fatalf("event %d did not reach the agent while the upstream held back the next", i)
		}
	}
	if rest, ok := <-events; ok {
		t.Errorf("after [DONE]: %q", rest)
	}
	turn := nextTurn(t, p)
	if turn.Status != 200 || turn.Error != "" || turn.Response.Content != "Your user id, please?" {
		t.Errorf("recorded %d %q, answer %+v", turn.Status, turn.Error, turn.Response)
	}
}

// TestUpstreamErrorRelayed: an upstream's error reaches the agent with its status,
// headers and body as they were, and the turn is recorded as failed with no answer.
func TestUpstreamErrorRelayed(t *testing.T) {
	tests := []struct {
		status int
		body   string
	}{
		{500, `{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}`},
		{429, `{"error":{"message":"Rate limit reached for gpt-4o.","type":"requests","code":"rate_limit_exceeded"}}`},
		{400, `{"error":{"message":"Invalid 'messages[1].content'.","type":"invalid_request_error"}}`},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			p := newInmemProxy(t, func(fc *fasthttp.RequestCtx) {
				fc.SetStatusCode(tt.status)
				fc.Response.Header.Set("X-Request-Id", "req_upstream")
				fc.SetContentType("application/json")
				fc.SetBodyString(tt.body)
			}, false)
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			if err := p.do(req, resp, []byte(taskBody)); err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(bytes.NewReader(resp.Body()))
			if resp.StatusCode() != tt.status || string(got) != tt.body {
				t.Errorf("agent got %d %s; want %d %s", resp.StatusCode(), got, tt.status, tt.body)
			}
			if id := string(resp.Header.Peek("X-Request-Id")); id != "req_upstream" {
				t.Errorf("X-Request-Id %q; the upstream's headers are relayed", id)
			}
			turn := nextTurn(t, p)
			if turn.Status != tt.status || turn.Response.Content != "" || turn.Response.Role != "" {
				t.Errorf("recorded %d, answer %+v; want %d and none", turn.Status, turn.Response, tt.status)
			}
		})
	}
}
