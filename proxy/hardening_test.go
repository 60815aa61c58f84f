package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/protocol/registry"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// Issue 18's hardening of the data plane, as an outside tester sees it: hand-written
// request bytes over a real loopback TCP connection. Each case logs a row of the fault
// matrix (`make faults`).

// faultRow logs one row of `make faults`.
var faultRow = testkit.FaultRow

// serveTCP serves p's proxy on a loopback TCP listener too, and returns its address.
func serveTCP(t *testing.T, p *inmemProxy) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String()
}

// rawAnswers writes raw to a new connection to addr and reads every answer until the
// connection ends. closed reports that the proxy closed it (EOF after the last answer,
// nothing left over); a connection still open after the guard counts as not closed.
func rawAnswers(t *testing.T, addr, raw string) (answers []*http.Response, bodies []string, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second)) // a hang guard, not a measurement
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for {
		if _, err := br.Peek(1); err != nil {
			return answers, bodies, errors.Is(err, io.EOF) // a timeout: left open
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return answers, bodies, false
		}
		b, _ := io.ReadAll(resp.Body)
		answers, bodies = append(answers, resp), append(bodies, string(b))
	}
}

// chunked frames body as one chunk and the last chunk.
func chunked(body string) string {
	return strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n"
}

// smuggled is the request hidden after an ambiguously framed body: were it read as a
// request of its own it would go upstream with the configured key.
const smuggled = "GET /v1/models HTTP/1.1\r\nHost: camproxy.test\r\n\r\n"

// TestHardeningAmbiguousFramingRefused: every request whose framing two HTTP parsers
// could read differently (RFC 9112 §6.1, §6.3) gets one 400 in its route's error shape
// and a closed connection: the bytes after it are never read as another request, and
// nothing reaches the upstream.
func TestHardeningAmbiguousFramingRefused(t *testing.T) {
	calls := make(chan upstreamCall, 16)
	p := newInmemProxy(t, capture(calls, answerCompletion), true, func(o *Options, _ *fasthttp.Server) {
		o.Upstreams["openai"].Auth = KeyAuth(registry.OpenAI.Auth, "sk-configured-key")
	})
	addr := serveTCP(t, p)

	body := chunked(taskBody) + smuggled // what a front proxy framing by Content-Length forwards as one body
	cl := strconv.Itoa(len(body))
	post := func(path string, head ...string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: camproxy.test\r\nContent-Type: application/json\r\n" +
			strings.Join(head, "\r\n") + "\r\n\r\n"
	}
	cases := []struct {
		name, raw string
		style     *registry.Errors
	}{
		{"Content-Length then Transfer-Encoding: chunked", post("/v1/chat/completions", "Content-Length: "+cl, "Transfer-Encoding: chunked") + body, registry.OpenAIErrors},
		{"Transfer-Encoding: chunked then Content-Length", post("/v1/chat/completions", "Transfer-Encoding: chunked", "Content-Length: "+cl) + body, registry.OpenAIErrors},
		{"CL+TE on an Anthropic route", post("/v1/messages", "Content-Length: "+cl, "Transfer-Encoding: chunked") + body, registry.AnthropicErrors},
		{"CL+TE on a passthrough route", post("/v1/embeddings", "Content-Length: "+cl, "Transfer-Encoding: chunked") + body, registry.OpenAIErrors},
		{"Transfer-Encoding: identity with Content-Length", post("/v1/chat/completions", "Transfer-Encoding: identity", "Content-Length: "+strconv.Itoa(len(taskBody))) + taskBody + smuggled, registry.OpenAIErrors},
		{"Transfer-Encoding: identity alone", post("/v1/chat/completions", "Transfer-Encoding: identity") + taskBody + smuggled, registry.OpenAIErrors},
		{"Transfer-Encoding folded (obs-fold)", post("/v1/chat/completions", "Transfer-Encoding:", " chunked") + body, registry.OpenAIErrors},
		{"obs-fold in another header", post("/v1/chat/completions", "X-Note: a", "\tb", "Content-Length: "+strconv.Itoa(len(taskBody))) + taskBody + smuggled, registry.OpenAIErrors},
		{"Content-Length folded", post("/v1/chat/completions", "Content-Length: 1", " "+cl) + body, registry.OpenAIErrors},
		{"two differing Content-Length", post("/v1/chat/completions", "Content-Length: "+strconv.Itoa(len(taskBody)), "Content-Length: "+cl) + taskBody + smuggled, registry.OpenAIErrors},
		{"two equal Content-Length", post("/v1/chat/completions", "Content-Length: "+cl, "Content-Length: "+cl) + body, registry.OpenAIErrors},
		{"Content-Length with a non-digit", post("/v1/chat/completions", "Content-Length: +"+cl) + body, registry.OpenAIErrors},
		{"Content-Length list", post("/v1/chat/completions", "Content-Length: "+cl+", "+cl) + body, registry.OpenAIErrors},
		{"Transfer-Encoding not ending in chunked", post("/v1/chat/completions", "Transfer-Encoding: chunked, gzip") + body, registry.OpenAIErrors},
		{"Transfer-Encoding: gzip, chunked", post("/v1/chat/completions", "Transfer-Encoding: gzip, chunked") + body, registry.OpenAIErrors},
		{"two Transfer-Encoding headers", post("/v1/chat/completions", "Transfer-Encoding: chunked", "Transfer-Encoding: chunked") + body, registry.OpenAIErrors},
		{"Transfer-Encoding in HTTP/1.0", strings.Replace(post("/v1/chat/completions", "Transfer-Encoding: chunked"), "HTTP/1.1", "HTTP/1.0", 1) + body, registry.OpenAIErrors},
		{"space before the colon of Transfer-Encoding", post("/v1/chat/completions", "Transfer-Encoding : chunked", "Content-Length: "+cl) + body, registry.OpenAIErrors},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			answers, bodies, closed := rawAnswers(t, addr, tc.raw)
			var statuses []string
			for _, a := range answers {
				statuses = append(statuses, strconv.Itoa(a.StatusCode))
			}
			upstream := 0
		drain:
			for {
				select {
				case <-calls:
					upstream++
				default:
					break drain
				}
			}
			conn := "connection closed"
			if !closed {
				conn = "connection left open"
			}
			faultRow(t, "proxy", "request framing: "+tc.name, fmt.Sprintf("answers [%s], %s", strings.Join(statuses, " "), conn),
				fmt.Sprintf("%d calls upstream", upstream))
			if len(answers) != 1 || answers[0].StatusCode != http.StatusBadRequest {
				t.Fatalf("answers %v %q; want exactly one 400", statuses, bodies)
			}
			if !closed {
				t.Error("the connection stayed open after an ambiguously framed request")
			}
			if upstream != 0 {
				t.Errorf("%d calls reached the upstream (with the configured key)", upstream)
			}
			if !errorShaped(tc.style, bodies[0]) {
				t.Errorf("400 body %s is not in the route's error shape %s", bodies[0], tc.style.Name)
			}
		})
	}

	// A well-framed chunked call still works, and keeps its connection.
	ok := post("/v1/chat/completions", "Transfer-Encoding: chunked") + chunked(taskBody) +
		post("/v1/chat/completions", "Content-Length: "+strconv.Itoa(len(taskBody)), "Connection: close") + taskBody
	answers, bodies, closed := rawAnswers(t, addr, ok)
	if len(answers) != 2 || answers[0].StatusCode != 200 || answers[1].StatusCode != 200 || !closed {
		t.Errorf("two well-framed calls on one connection: %d answers %q, closed %v", len(answers), bodies, closed)
	}
}

// errorShaped reports whether body is an error in style st's shape.
func errorShaped(st *registry.Errors, body string) bool {
	switch st {
	case registry.AnthropicErrors:
		return gjson.Get(body, "type").Str == "error" && gjson.Get(body, "error.message").Str != ""
	case registry.AWSErrors:
		return gjson.Get(body, "message").Str != ""
	}
	return gjson.Get(body, "error.type").Str == "invalid_request_error" && gjson.Get(body, "error.message").Str != ""
}

// TestHardeningMalformedHeadNotEchoed: a request head camproxy cannot parse gets an
// error that names the problem and never the request's bytes — its Authorization
// header least of all — neither in the answer nor in the logs (at debug level).
func TestHardeningMalformedHeadNotEchoed(t *testing.T) {
	const secret = "sk-secret-0123456789"
	logs := &testkit.SyncBuffer{} // the proxy's goroutines write to it concurrently
	p := newInmemProxy(t, answerCompletion, true, func(o *Options, _ *fasthttp.Server) {
		o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	addr := serveTCP(t, p)
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: camproxy.test\r\nAuthorization: Bearer " + secret + "\r\n"
	cases := []struct {
		name, raw string
		status    int
		names     string // what the message must name
	}{
		{"a control byte in a header value", strings.Replace(head, secret, secret+"\x01", 1) + "Content-Length: 2\r\n\r\n{}", 400, "invalid header"},
		{"a header line without a colon", head + "no colon here\r\nContent-Length: 2\r\n\r\n{}", 400, "invalid header"},
		{"a space before a header's colon", head + "X-Note : a\r\nContent-Length: 2\r\n\r\n{}", 400, "invalid header"},
		{"two Content-Length", head + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400, "Content-Length"},
		{"an unknown Transfer-Encoding", head + "Transfer-Encoding: " + secret + "\r\n\r\n{}", 400, "Transfer-Encoding"},
		{"a bad chunk size", head + "Transfer-Encoding: chunked\r\n\r\nzz" + secret + "\r\n{}\r\n0\r\n\r\n", 400, "chunked"},
		{"a bad request line", "POST /v1/chat/completions HTTP/9\r\nAuthorization: Bearer " + secret + "\r\n\r\n", 400, "request line"},
		{"a head larger than the read buffer", head + "X-Pad: " + strings.Repeat("a", 20<<10) + "\r\n\r\n", 431, "too large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			answers, bodies, _ := rawAnswers(t, addr, tc.raw)
			if len(answers) != 1 {
				t.Fatalf("%d answers %q; want one", len(answers), bodies)
			}
			msg := gjson.Get(bodies[0], "error.message").Str
			echoed := strings.Contains(bodies[0], "sk-secret")
			faultRow(t, "proxy", "malformed head: "+tc.name, fmt.Sprintf("%d %q", answers[0].StatusCode, trimTo(msg, 60)),
				fmt.Sprintf("Authorization echoed: %v", echoed))
			if answers[0].StatusCode != tc.status {
				t.Errorf("status %d; want %d", answers[0].StatusCode, tc.status)
			}
			if echoed {
				t.Errorf("the answer echoes the request's Authorization: %s", bodies[0])
			}
			if !strings.Contains(msg, tc.names) {
				t.Errorf("message %q does not name the problem (%q)", msg, tc.names)
			}
		})
	}
	// The connection's error is logged when its goroutine ends, after the answer.
	p.client.CloseIdleConnections()
	if l := logs.String(); strings.Contains(l, "sk-secret") {
		t.Errorf("the logs hold the request's Authorization:\n%s", l)
	}
}

func trimTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// TestHardeningSniffUnderReadTimeout: a connection that sends nothing is closed once
// server.read_timeout has passed, not after a fixed 30 s of protocol sniffing.
func TestHardeningSniffUnderReadTimeout(t *testing.T) {
	for _, readTimeout := range []time.Duration{2 * time.Second, 10 * time.Second} {
		t.Run(readTimeout.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ln := fasthttputil.NewInmemoryListener()
				sl := newSniffListener(ln, slog.New(slog.DiscardHandler), readTimeout)
				defer sl.Close()
				c, err := ln.Dial()
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				start := time.Now()
				n, err := c.Read(make([]byte, 1)) // returns when the proxy closes the connection
				held := time.Since(start)         // synctest's clock: exact
				faultRow(t, "proxy", fmt.Sprintf("silent connection, read_timeout %v", readTimeout),
					fmt.Sprintf("closed after %v (read %d bytes, %v)", held, n, err), "-")
				if n != 0 || !errors.Is(err, io.EOF) {
					t.Errorf("read %d bytes, %v; want the connection closed", n, err)
				}
				if held > readTimeout {
					t.Errorf("a silent connection was held %v; read_timeout is %v", held, readTimeout)
				}
			})
		})
	}
}

// TestHardeningBodyMemory measures what a call with a body near server.max_body_bytes
// costs the proxy, as multiples of the body: the bytes allocated for the call (pools
// warm), and the live heap while its spliced body is upstream (pools empty). Both legs
// are loopback TCP: an in-memory pipe would copy every byte written. The proxy keeps
// the spliced copy; the received body is dropped once spliced.
func TestHardeningBodyMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 30 MB bodies")
	}
	const maxBody = 32 << 20
	var live []uint64 // the process's live heap, sampled by the upstream while it holds the call
	var mu sync.Mutex
	upstream := func(fc *fasthttp.RequestCtx) {
		_, _ = io.Copy(io.Discard, fc.RequestBodyStream())
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mu.Lock()
		live = append(live, ms.HeapAlloc)
		mu.Unlock()
		answerCompletion(fc)
	}
	var upSrv *fasthttp.Server
	var up *Upstream
	p := newInmemProxy(t, upstream, true, func(o *Options, us *fasthttp.Server) {
		o.MaxBodyBytes = maxBody
		us.StreamRequestBody = true // the fake upstream holds none of the body
		us.MaxRequestBodySize = maxBody
		upSrv, up = us, o.Upstreams["openai"]
	})
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = upSrv.Serve(upLn) }()
	up.hostClient(up.Base.Scheme, up.Base.Host).Dial = func(string) (net.Conn, error) { return net.Dial("tcp", upLn.Addr().String()) }
	agent := &fasthttp.HostClient{Addr: serveTCP(t, p), ReadTimeout: 30 * time.Second, MaxResponseBodySize: 1 << 20}
	defer agent.CloseIdleConnections()

	// A body of 30 MB: one huge tool result in an otherwise ordinary task.
	big := strings.Repeat("0123456789abcdef", (30<<20)/16)
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"system","content":"You are an airline agent."},` +
		`{"role":"user","content":"Change my flight to Friday."},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"` + big + `"}],"temperature":0}`)
	big = ""
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	call := func(i int, emptyPools bool) (allocated, held float64) {
		// A new task each call: a new episode, its context spliced in.
		b := bytes.Replace(body, []byte("Friday."), []byte("Friday"+strconv.Itoa(i)+"."), 1)
		req.Reset()
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("http://camproxy.test/v1/chat/completions")
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(b)
		var before, after runtime.MemStats
		runtime.GC()
		if emptyPools {
			runtime.GC() // a pool's buffers survive one collection
		}
		runtime.ReadMemStats(&before)
		if err := agent.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != 200 {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode(), resp.Body())
		}
		runtime.ReadMemStats(&after)
		mu.Lock()
		defer mu.Unlock()
		size := float64(len(b))
		return float64(after.TotalAlloc-before.TotalAlloc) / size, float64(live[len(live)-1]-min(before.HeapAlloc, live[len(live)-1])) / size
	}
	// Two calls: the first has empty pools by nature (the live heap), and it warms
	// the pools and caches for the second (the bytes allocated). More calls of 30 MB
	// gave the same figures, each costing seconds of CPU under -race.
	_, liveX := call(0, true)
	allocX, _ := call(1, false)
	size := float64(len(body))
	t.Logf("body %.1f MiB: allocated per call %.2f× the body, live heap while upstream %.2f×", size/(1<<20), allocX, liveX)
	faultRow(t, "proxy", fmt.Sprintf("one %.0f MiB body (max_body_bytes 32 MiB)", size/(1<<20)),
		fmt.Sprintf("allocated %.2f× the body per call; live %.2f× while upstream", allocX, liveX), "-")
	// The spliced copy, and the parse's own copy of the messages (package protocol,
	// kept for the recorded turn); 0.3 for what else is live in the process.
	if liveX > 2.3 {
		t.Errorf("the proxy holds %.2f× the body while the call is upstream; want the spliced copy and the parsed messages only", liveX)
	}
}

// FuzzFramingProblem: framingProblem reads untrusted bytes. Whatever they are, a head
// with a folded line, or with both framing headers, or a Transfer-Encoding other than
// chunked, is refused; one with none of these passes.
func FuzzFramingProblem(f *testing.F) {
	for _, seed := range []string{
		"Host: a\r\nContent-Length: 5\r\n\r\n",
		"Host: a\r\nTransfer-Encoding: chunked\r\n\r\n",
		"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
		"transfer-encoding: CHUNKED\r\ncontent-length: 0\r\n\r\n",
		"Transfer-Encoding: identity\r\n\r\n",
		"Transfer-Encoding:\r\n chunked\r\n\r\n",
		"X-A: b\n\tc\n\n",
		"Transfer-Encoding: chunked , gzip\r\n\r\n",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got := framingProblem(raw)
		var folded, cl, te, other bool
		for _, line := range strings.Split(string(raw), "\n") {
			line = strings.TrimSuffix(line, "\r")
			if line == "" {
				break
			}
			if line[0] == ' ' || line[0] == '\t' {
				folded = true
				break
			}
			k, v, _ := strings.Cut(line, ":")
			switch strings.ToLower(k) {
			case "content-length":
				cl = true
			case "transfer-encoding":
				te = true
				other = other || !strings.EqualFold(strings.Trim(v, " \t"), "chunked")
			}
		}
		if want := folded || cl && te || other; want != (got != "") {
			t.Errorf("framingProblem(%q) = %q; folded %v, Content-Length %v, Transfer-Encoding %v (not chunked %v)", raw, got, folded, cl, te, other)
		}
	})
}
