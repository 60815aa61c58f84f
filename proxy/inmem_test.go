package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/camproxy/camproxy/augment"
	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/metrics"
	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/protocol"
)

// The in-memory data plane: a Server serving one fasthttputil.InmemoryListener, its
// OpenAI upstream a fasthttp server on another, so that a test or benchmark drives the
// whole pipeline — routing, parse, episode, arm, context, splice, forward, relay,
// record — without sockets, as app.New wires it (CAM arm, warm two-tier cache,
// in-memory episode store).

// camContext is what the fake CAM augmenter answers; its cache serves it after the
// first call.
const camContext = "CAM-CONTEXT: check the reservation before changing it."

// fixedAugmenter is a CAM that always answers the same context, counting its calls.
type fixedAugmenter struct{ calls atomic.Int64 }

func (f *fixedAugmenter) Augment(context.Context, augment.Request) (string, error) {
	f.calls.Add(1)
	return camContext, nil
}

// turnSink records turns; discard keeps none (benchmarks), else they go to turns.
type turnSink struct {
	discard bool
	turns   chan *episode.Turn
}

func (r *turnSink) Record(t *episode.Turn) {
	if !r.discard {
		r.turns <- t
	}
}

// inmemProxy is a Server and its fake upstream, each on its own in-memory listener.
type inmemProxy struct {
	srv      *Server
	ln, upLn *fasthttputil.InmemoryListener
	client   *fasthttp.HostClient // the agent: keep-alive connections to the proxy
	rec      *turnSink
	aug      *fixedAugmenter
}

// newInmemProxy starts a proxy whose OpenAI upstream is served by upstream. The upstream
// is reached through fasthttp's own client path: its host client dials the in-memory
// listener instead of the configured (never dialed) loopback address. Each setup may
// change the proxy's options and the upstream server before either starts.
func newInmemProxy(tb testing.TB, upstream fasthttp.RequestHandler, discard bool, setup ...func(*Options, *fasthttp.Server)) *inmemProxy {
	tb.Helper()
	p := &inmemProxy{ln: fasthttputil.NewInmemoryListener(), upLn: fasthttputil.NewInmemoryListener(),
		rec: &turnSink{discard: discard, turns: make(chan *episode.Turn, 16)}, aug: &fixedAugmenter{}}
	upSrv := &fasthttp.Server{Handler: upstream, NoDefaultServerHeader: true}

	o := testOptions(tb, "http://127.0.0.1:1/v1", p.aug, p.rec)
	for _, f := range setup {
		f(&o, upSrv)
	}
	go func() { _ = upSrv.Serve(p.upLn) }()
	p.srv = New(o)
	for _, u := range o.Upstreams { // a setup may add the other protocols' upstreams
		u.hostClient(u.Base.Scheme, u.Base.Host).Dial = func(string) (net.Conn, error) { return p.upLn.Dial() }
	}
	go func() { _ = p.srv.Serve(p.ln) }()

	p.client = &fasthttp.HostClient{Addr: "camproxy.test", Dial: func(string) (net.Conn, error) { return p.ln.Dial() },
		MaxConns: 64, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.srv.Shutdown(ctx)
		_ = upSrv.ShutdownWithContext(ctx)
		p.client.CloseIdleConnections()
	})
	return p
}

// testOptions are a data plane's options as app.New wires them, for tests: the
// OpenAI upstream at base, a CAM arm answering with aug through a warm two-tier
// cache, the in-memory episode store, turns recorded to rec.
func testOptions(tb testing.TB, baseURL string, aug augment.Augmenter, rec Recorder) Options {
	tb.Helper()
	base, err := url.Parse(baseURL)
	if err != nil {
		tb.Fatal(err)
	}
	up := &Upstream{Name: "openai", Base: base, FirstByteTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second}
	pol, err := policies.New("bench", policies.StickyEpisode, true, []policies.Arm{{Name: "cam", Weight: 1, Augmenter: "cam"}})
	if err != nil {
		tb.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	o := Options{
		Logger: log, Metrics: metrics.New(prometheus.NewRegistry()), Upstreams: map[string]*Upstream{"openai": up},
		Runtime: &Runtime{
			TaskRules: protocol.DefaultTaskRules(),
			Placement: Placement{Mode: protocol.AppendToTask, Template: "\n\n{{context}}"},
			Policy:    pol,
			Augmenters: map[string]ContextSource{"cam": {Name: "cam", Version: func() string { return "v1" },
				Timeout: 5 * time.Second, Augmenter: aug}},
		},
		Cache:     augment.NewCache(augment.CacheOptions{LocalEntries: 1024}, nil, log),
		Episodes:  episode.NewMemory(time.Hour, nil),
		Recorders: []Recorder{rec}, MaxBodyBytes: 32 << 20,
	}
	return o
}

// do sends one chat call as an agent would and returns the answer's status.
func (p *inmemProxy) do(req *fasthttp.Request, resp *fasthttp.Response, body []byte, hdr ...string) error {
	return p.doAt("/v1/chat/completions", req, resp, body, hdr...)
}

// doAt is do on another path.
func (p *inmemProxy) doAt(path string, req *fasthttp.Request, resp *fasthttp.Response, body []byte, hdr ...string) error {
	req.Reset()
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("http://camproxy.test" + path)
	req.Header.SetContentType("application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	req.SetBodyRaw(body)
	return p.client.Do(req, resp)
}

// completion is a fixed non-streamed chat answer: a short text, as tau-bench's agent
// mostly gets.
var completion = []byte(`{"id":"chatcmpl-inmem","object":"chat.completion","created":1700000000,"model":"gpt-4o",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"Could you give me your user id?"},"logprobs":null,"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":4000,"completion_tokens":9,"total_tokens":4009}}`)

// answerCompletion is a fake upstream that answers every call with completion.
func answerCompletion(fc *fasthttp.RequestCtx) {
	fc.SetContentType("application/json")
	fc.SetBody(completion)
}

// tauPath is the shared tau-bench data set: real agent trajectories with rewards.
const tauPath = "/work/shared/data/tau-bench/gpt-4o-airline.json"

// tauTrajectories reads the trajectories' messages as compact JSON, or skips tb when
// the data set is absent.
func tauTrajectories(tb testing.TB) [][][]byte {
	tb.Helper()
	raw, err := os.ReadFile(tauPath)
	if os.IsNotExist(err) {
		tb.Skipf("%s absent: the benchmark replays the real tau-bench bodies", tauPath)
	}
	if err != nil {
		tb.Fatal(err)
	}
	var out [][][]byte
	for _, run := range gjson.ParseBytes(raw).Array() {
		var msgs [][]byte
		for _, m := range run.Get("traj").Array() {
			var b bytes.Buffer
			if err := json.Compact(&b, []byte(m.Raw)); err != nil {
				tb.Fatal(err)
			}
			msgs = append(msgs, b.Bytes())
		}
		out = append(out, msgs)
	}
	return out
}

// chatBody is the request of turn t (from 1) of a trajectory: the messages before its
// t-th assistant message, as the agent sent them. ok is false when it has fewer turns.
func chatBody(msgs [][]byte, t int) (body []byte, ok bool) {
	seen := 0
	for i, m := range msgs {
		if gjson.GetBytes(m, "role").Str != "assistant" {
			continue
		}
		if seen++; seen == t {
			return joinChat(msgs[:i]), true
		}
	}
	return nil, false
}

// joinChat is a chat completions body holding msgs.
func joinChat(msgs [][]byte) []byte {
	b := []byte(`{"model":"gpt-4o","messages":[`)
	b = append(b, bytes.Join(msgs, []byte(","))...)
	return append(b, `],"temperature":0}`...)
}

// longEpisode is the request of turn t of a long episode made of real messages: the
// system prompt and task of the first trajectory, then t-1 assistant tool calls each
// with its tool result, taken in order from all trajectories (ids renumbered to stay
// unique). tau-bench's own trajectories stop at 30 turns.
func longEpisode(tb testing.TB, trajs [][][]byte, t int) []byte {
	tb.Helper()
	msgs := [][]byte{trajs[0][0], trajs[0][1]}
	for _, tr := range trajs {
		for i := 2; i+1 < len(tr) && len(msgs) < 2+2*(t-1); i++ {
			a, res := gjson.ParseBytes(tr[i]), gjson.ParseBytes(tr[i+1])
			if a.Get("role").Str != "assistant" || len(a.Get("tool_calls").Array()) != 1 || res.Get("role").Str != "tool" {
				continue
			}
			id := fmt.Sprintf("call_long_%03d", len(msgs)/2)
			call := a.Get("tool_calls.0.function")
			am, _ := json.Marshal(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": id,
				"type": "function", "function": map[string]any{"name": call.Get("name").Str, "arguments": call.Get("arguments").Str}}}})
			rm, _ := json.Marshal(map[string]any{"role": "tool", "tool_call_id": id, "name": res.Get("name").Str, "content": res.Get("content").Str})
			msgs = append(msgs, am, rm)
			i++
		}
	}
	if len(msgs) < 2+2*(t-1) {
		tb.Fatalf("the trajectories hold %d tool call pairs; turn %d needs %d", (len(msgs)-2)/2, t, t-1)
	}
	return joinChat(msgs)
}
