package app

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
)

// TestCAMFailsOpen: whatever the CAM does wrong (hangs included), the agent's call
// succeeds unaugmented, and repeated failures open the breaker. No wall-clock bound
// is asserted: a hanging CAM would hang the call (and the test) if the deadline did
// not cut it; the deadline's own timing is augment.Guard's unit test. The modes run at
// once, each on its own camproxy, CAM and upstream: each spends its time waiting for
// open_for to pass, not computing.
func TestCAMFailsOpen(t *testing.T) {
	modes := []string{testkit.CAMHang, testkit.CAM500, testkit.CAMGarbage, testkit.CAMEmpty, testkit.CAMHuge}
	testkit.Concurrently(t, modes, func(m string) string { return m }, func(t *testing.T, mode string) {
		// A short deadline, so a hanging CAM costs little; an open_for no machine is
		// slow enough to outlast, so the breaker is open for every call that checks it.
		// Half-open and recovery after open_for are augment.Guard's tests (synctest):
		// waited for here they made the test as flaky as the machine was loaded.
		e := newEnv(t, func(c *config.Config) {
			ac := c.Augmenters["cam"]
			ac.Timeout, ac.Breaker.OpenFor = 400*time.Millisecond, time.Hour
			c.Augmenters["cam"] = ac
		})
		e.cam.SetMode(mode)
		for i := range 3 { // Failures: 3 in testConfig
			a := newAgent(fmt.Sprintf("Task %d: refund order #%d", i, i), false)
			body := a.body("")
			resp, out := e.post(body, nil)
			if resp.StatusCode != 200 || !gjson.GetBytes(out, "choices.0.message").Exists() {
				t.Fatalf("call %d failed: %d %s", i, resp.StatusCode, out)
			}
			if got := resp.Header.Get("X-CAM-Context"); got != "fail-open" {
				t.Fatalf("X-CAM-Context %q, want fail-open", got)
			}
			if !bytes.Equal(e.up.Last().Body, body) {
				t.Fatal("a failed augmentation must forward the body untouched")
			}
		}
		// A timed-out call counts against the breaker when it ends, just after the
		// agent's call went on without it.
		if !waitFor(t, func() bool {
			return strings.Contains(e.metric("camproxy_breaker_state"), `camproxy_breaker_state{augmenter="cam"} 2`)
		}) {
			t.Fatalf("breaker not open after 3 failures: %s", e.metric("camproxy_breaker_state"))
		}
		// Open: no more CAM calls.
		for i := range 3 {
			resp, _ := e.post(newAgent(fmt.Sprintf("Open task %d", i), false).body(""), nil)
			if resp.Header.Get("X-CAM-Context") != "fail-open" {
				t.Fatalf("with the breaker open: %s", resp.Header.Get("X-CAM-Context"))
			}
		}
		// At most one CAM call per failure (a call the deadline cut before it reached
		// the CAM is a failure the CAM never saw), none once the breaker is open.
		if e.cam.Calls() > 3 {
			t.Fatalf("breaker open but CAM still called (%d calls for 3 failures)", e.cam.Calls())
		}
		if !strings.Contains(e.metric("camproxy_breaker_state"), `camproxy_breaker_state{augmenter="cam"} 2`) {
			t.Fatalf("breaker_state metric: %s", e.metric("camproxy_breaker_state"))
		}
		if !strings.Contains(e.metric("camproxy_context_total"), `result="fail-open"`) {
			t.Fatal("fail-open not counted in context_total")
		}
		faultRow(t, "cam", mode, "200 unaugmented (fail-open); breaker open after 3, no CAM call while open",
			"episode recorded with context_source fail-open")
	})
}

// TestThinkStripped: a reasoning CAM's <think> block never reaches the agent.
func TestThinkStripped(t *testing.T) {
	e := newEnv(t, nil)
	e.cam.SetMode(testkit.CAMThink)
	e.post(newAgent("Find my baggage allowance", false).body(""), nil)
	got := splicedTask(e.up.Last().Body)
	if strings.Contains(got, "think") || !strings.Contains(got, "Guidance for: Find my baggage allowance") {
		t.Fatalf("spliced: %q", got)
	}
}

// streamRequest opens a streamed chat call on a raw connection and returns a reader
// positioned at the body.
func streamRequest(t *testing.T, addr string, body []byte) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return conn, bufio.NewReader(resp.Body)
}

// readEvent reads one SSE event's data line.
func readEvent(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended early: %v", err)
		}
		if strings.HasPrefix(line, "data: ") {
			return strings.TrimSpace(line[6:])
		}
	}
}

// TestStreamNotBuffered: the upstream sends chunk 1 and waits until the client has it
// before sending the rest. A proxy that buffers or coalesces deadlocks here.
func TestStreamNotBuffered(t *testing.T) {
	e := newEnv(t, nil)
	got1 := make(chan struct{})
	failed := make(chan string, 1)
	e.up.BeforeChunk = func(i int) {
		if i != 1 {
			return
		}
		select {
		case <-got1:
		case <-time.After(testkit.Patience(t)):
			failed <- "chunk 1 did not reach the client before chunk 2 was due"
		}
	}
	a := newAgent("Stream me a status", false)
	conn, r := streamRequest(t, e.app.Addr(), a.body(`,"stream":true`))
	defer conn.Close()
	first := readEvent(t, r)
	if !strings.Contains(first, `"role":"assistant"`) {
		t.Fatalf("first event %s", first)
	}
	close(got1)
	var last string
	for last != "[DONE]" {
		last = readEvent(t, r)
	}
	select {
	case msg := <-failed:
		t.Fatal(msg)
	default:
	}
}

// TestClientDisconnectCancelsUpstream: a client that leaves mid-stream cancels the
// upstream call, even while the upstream is silent.
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	e := newEnv(t, nil)
	e.up.HangAfter = 2
	conn, r := streamRequest(t, e.app.Addr(), newAgent("A long answer please", false).body(`,"stream":true`))
	readEvent(t, r)
	left := time.Now()
	_ = conn.Close()
	// How soon is measured for the fault table, not asserted: a loaded machine
	// stretches any bound (the peer watch polls every 250 ms).
	testkit.Await(t, e.up.Cancelled, "upstream request not cancelled after the client left")
	took := time.Since(left)
	if !waitFor(t, func() bool { return strings.Contains(e.metric("camproxy_requests_total"), `code="499"`) }) {
		t.Fatalf("departed client not counted as 499: %s", e.metric("camproxy_requests_total"))
	}
	faultRow(t, "client", "disconnect mid-stream (upstream silent)", fmt.Sprintf("upstream request cancelled %v after the client left", took.Round(time.Millisecond)),
		"step recorded as 499 (client went away)")
}

// waitFor polls cond until it holds, bounded only by go test's -timeout: the
// caller reports what never happened.
func waitFor(t *testing.T, cond func() bool) bool {
	t.Helper()
	return testkit.Poll(t, cond)
}

// TestUpstreamIdleTimeout: an upstream that stalls mid-stream is cut after the idle
// timeout and the client sees a broken stream, not a clean end.
func TestUpstreamIdleTimeout(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Upstreams["openai"].IdleTimeout = 300 * time.Millisecond })
	e.up.HangAfter = 2
	conn, r := streamRequest(t, e.app.Addr(), newAgent("stall", false).body(`,"stream":true`))
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(testkit.Patience(t))) // a hang fails, however slow the machine
	readEvent(t, r)
	_, err := io.ReadAll(r)
	if err == nil {
		t.Fatal("a stream cut by the idle timeout ended cleanly; the client would take it for a complete answer")
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("camproxy did not cut the stalled stream")
	}
	testkit.Await(t, e.up.Cancelled, "stalled upstream request not cancelled")
}

// TestPassthroughAndHeaders: other routes are forwarded untouched; auth and OpenAI
// headers go up, upstream headers come back, camproxy's own headers stay home.
func TestPassthroughAndHeaders(t *testing.T) {
	e := newEnv(t, nil)
	req, _ := http.NewRequest(http.MethodGet, e.base+"/v1/models?limit=5", nil)
	req.Header.Set("Authorization", "Bearer sk-client-key")
	req.Header.Set("OpenAI-Organization", "org-1")
	req.Header.Set("X-CAM-Arm", "cam")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || gjson.GetBytes(body, "data.0.id").String() != "gpt-4o" || resp.Header.Get("X-Request-Id") != "req_models_1" {
		t.Fatalf("models: %d %s %v", resp.StatusCode, body, resp.Header)
	}
	up := e.up.Last()
	if up.Path != "/v1/models?limit=5" || up.Header.Get("Openai-Organization") != "org-1" || up.Header.Get("Authorization") != "Bearer sk-client-key" || up.Header.Get("X-Cam-Arm") != "" {
		t.Fatalf("upstream saw %s %v", up.Path, up.Header)
	}
	emb := []byte(`{"input":"hello",  "model":"text-embedding-3-small","x_unknown":[1,{"a":null}]}`)
	resp2, err := http.Post(e.base+"/v1/embeddings", "application/json", bytes.NewReader(emb))
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if !bytes.Equal(e.up.Last().Body, emb) {
		t.Fatalf("passthrough body changed: %s", e.up.Last().Body)
	}
	if e.cam.Calls() != 0 {
		t.Fatal("passthrough route asked the CAM")
	}
}

// TestConfiguredKeyReplacesClientAuth: with upstreams.openai.api_key set, the client's
// key never reaches the upstream.
func TestConfiguredKeyReplacesClientAuth(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Upstreams["openai"].APIKey = "sk-upstream-secret" })
	e.post(newAgent("hello", false).body(""), nil)
	if got := e.up.Last().Header.Get("Authorization"); got != "Bearer sk-upstream-secret" {
		t.Fatalf("upstream Authorization %q", got)
	}
}

// TestSkipHeader: X-CAM-Skip: 1 forwards untouched and asks nothing.
func TestSkipHeader(t *testing.T) {
	e := newEnv(t, nil)
	body := newAgent("skip me", false).body("")
	resp, _ := e.post(body, map[string]string{"X-CAM-Skip": "1"})
	if resp.Header.Get("X-CAM-Context") != "skip" || !bytes.Equal(e.up.Last().Body, body) || e.cam.Calls() != 0 {
		t.Fatalf("skip: context %q, CAM calls %d", resp.Header.Get("X-CAM-Context"), e.cam.Calls())
	}
}

// TestUpstreamErrorsRelayed: an upstream error comes back with its status, body and
// headers; an upstream that is down is a 502 that says so.
func TestUpstreamErrorsRelayed(t *testing.T) {
	e := newEnv(t, nil)
	e.up.Reply = func(gjson.Result) testkit.Reply {
		return testkit.Reply{Status: 429, ErrorMsg: "Rate limit reached for gpt-4o", Header: http.Header{"Retry-After": {"7"}}}
	}
	resp, body := e.post(newAgent("rate limited", false).body(""), nil)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "7" || gjson.GetBytes(body, "error.message").String() != "Rate limit reached for gpt-4o" {
		t.Fatalf("429 not relayed: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	e.up.Close()
	resp, body = e.post(newAgent("upstream down", false).body(""), nil)
	if resp.StatusCode != 502 || !strings.Contains(gjson.GetBytes(body, "error.message").String(), "unreachable") {
		t.Fatalf("upstream down: %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get("X-CAM-Episode-Id") == "" {
		t.Fatal("a failed call still names its episode")
	}
}

// TestBadInput: bad requests get a 4xx in the OpenAI envelope that names the problem,
// and camproxy keeps serving.
func TestBadInput(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Server.MaxBodyBytes = 4096 })
	cases := []struct {
		name, method, body string
		headers            map[string]string
		status             int
		msg                string
	}{
		{"invalid json", "POST", `{"model":"x","messages":[`, nil, 400, "not valid JSON"},
		{"no messages", "POST", `{"model":"x"}`, nil, 400, `"messages"`},
		{"messages not array", "POST", `{"model":"x","messages":{}}`, nil, 400, `"messages"`},
		{"get", "GET", "", nil, 405, "use POST"},
		{"too large", "POST", `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, nil, 413, "max_body_bytes"},
		{"bad episode id", "POST", `{"messages":[{"role":"user","content":"hi"}]}`, map[string]string{"X-CAM-Episode-Id": "a b/c"}, 400, "X-CAM-Episode-Id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, e.base+"/v1/chat/completions", strings.NewReader(c.body))
			for k, v := range c.headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, body)
			}
			msg := gjson.GetBytes(body, "error.message").String()
			if !strings.Contains(msg, c.msg) || gjson.GetBytes(body, "error.type").String() == "" {
				t.Fatalf("error %s does not say %q", body, c.msg)
			}
		})
	}
	resp, _ := e.post(newAgent("still serving", false).body(""), nil)
	if resp.StatusCode != 200 {
		t.Fatal("camproxy stopped serving after bad input")
	}
}

// TestShutdownDrainsStreams: shutdown stops accepting but lets a stream in flight finish.
// The upstream holds the stream after its first chunk until the test has seen the
// listener closed, so "during shutdown" is an event, not a guess at how long
// shutdown takes to begin.
func TestShutdownDrainsStreams(t *testing.T) {
	e := newEnv(t, nil)
	checked := make(chan struct{})
	e.up.BeforeChunk = func(i int) {
		if i == 1 {
			select {
			case <-checked:
			case <-time.After(testkit.Patience(t)):
			}
		}
	}
	conn, r := streamRequest(t, e.app.Addr(), newAgent("Explain the refund policy in detail please now", false).body(`,"stream":true`))
	defer conn.Close()
	readEvent(t, r)
	done := make(chan error, 1)
	go func() { done <- e.app.Shutdown(context.Background()) }()
	if !waitFor(t, func() bool {
		c, err := net.DialTimeout("tcp", e.app.Addr(), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}) {
		t.Fatal("still accepting connections during shutdown")
	}
	close(checked)
	var last string
	for last != "[DONE]" {
		last = readEvent(t, r)
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// TestAbsoluteFormCannotRedirect: a request line in absolute form naming another host
// still goes to the configured upstream (with the configured key) or nowhere.
func TestAbsoluteFormCannotRedirect(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Upstreams["openai"].APIKey = "sk-upstream-secret" })
	for _, target := range []string{"x.evil.com://h/v1/chat/completions", "http://evil.example/v1/models"} {
		conn, err := net.Dial("tcp", e.app.Addr())
		if err != nil {
			t.Fatal(err)
		}
		body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", target, len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 && resp.StatusCode != 502 && resp.StatusCode != 400 {
			t.Fatalf("%s: status %d", target, resp.StatusCode)
		}
	}
	for _, r := range e.up.Requests() {
		if r.Header.Get("Authorization") != "Bearer sk-upstream-secret" {
			t.Fatalf("unexpected upstream request %v", r)
		}
	}
}
