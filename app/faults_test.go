package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/replay"
)

// faultRow logs one row of `make faults`.
var faultRow = testkit.FaultRow

// recordedSteps shuts camproxy down (flushing the recorder) and returns the step
// events of the file sink.
func recordedSteps(t *testing.T, e *env) []*replay.StepEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.app.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	src, err := replay.OpenSource(ctx, e.cfg.Replay.Sinks[0])
	if err != nil {
		t.Fatal(err)
	}
	var steps []*replay.StepEvent
	err = src.Scan(ctx, func(line []byte) error {
		if ev, err := replay.Decode(line); err == nil {
			if s, ok := ev.(*replay.StepEvent); ok {
				steps = append(steps, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return steps
}

func describeSteps(steps []*replay.StepEvent) string {
	if len(steps) == 0 {
		return "no step recorded"
	}
	var parts []string
	for _, s := range steps {
		p := fmt.Sprintf("step status %d", s.Status)
		if s.Error != "" {
			p += " error " + fmt.Sprintf("%q", trim(s.Error, 40))
		}
		if s.Response != nil {
			p += " with response"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

func trim(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// TestUpstreamFaultMatrix: each upstream fault gives the agent the upstream's status
// or a clear 502/504 (a hang would hang the test: the timeouts are what end these
// calls; the times are printed in the fault table, not asserted), a broken stream is an error in
// the official SDK (not a truncated success), and the replay buffer records the
// call with its outcome. Gemini's streams, in both framings, have rows of their own
// (geminiFaultRows).
func TestUpstreamFaultMatrix(t *testing.T) {
	const firstByte, idle = 300 * time.Millisecond, 300 * time.Millisecond
	timeouts := func(c *config.Config) {
		c.Upstreams["openai"].FirstByteTimeout = firstByte
		c.Upstreams["openai"].IdleTimeout = idle
	}
	type outcome struct {
		status  int
		msg     string // in the error message the agent gets
		header  [2]string
		sdkErr  string // streaming: in the SDK's stream error
		stepErr bool   // the step records an error (else a status)
	}
	cases := []struct {
		name   string
		stream bool
		setup  func(e *env)
		want   outcome
	}{
		{"500", false, func(e *env) {
			e.up.Configure(func(u *testkit.Upstream) {
				u.Reply = func(gjson.Result) testkit.Reply {
					return testkit.Reply{Status: 500, ErrorMsg: "The server had an error"}
				}
			})
		}, outcome{status: 500, msg: "The server had an error"}},
		{"429 with retry-after", false, func(e *env) {
			e.up.Configure(func(u *testkit.Upstream) {
				u.Reply = func(gjson.Result) testkit.Reply {
					return testkit.Reply{Status: 429, ErrorMsg: "Rate limit reached for gpt-4o", Header: http.Header{"Retry-After": {"7"}}}
				}
			})
		}, outcome{status: 429, msg: "Rate limit reached", header: [2]string{"Retry-After", "7"}}},
		{"connection refused", false, func(e *env) { e.up.Close() },
			outcome{status: 502, msg: "unreachable", stepErr: true}},
		{"hang (no first byte)", false, func(e *env) { e.up.Configure(func(u *testkit.Upstream) { u.Delay = time.Hour }) },
			outcome{status: 504, msg: "first byte", stepErr: true}},
		{"slow drip (1 byte per 10 idle timeouts)", false, func(e *env) { e.up.Configure(func(u *testkit.Upstream) { u.Drip = 10 * idle }) },
			outcome{sdkErr: "", stepErr: true}},
		{"reset mid-stream", true, func(e *env) { e.up.Configure(func(u *testkit.Upstream) { u.ResetAfter = 2 }) },
			outcome{sdkErr: "", stepErr: true}},
		{"stall mid-stream", true, func(e *env) { e.up.Configure(func(u *testkit.Upstream) { u.HangAfter = 2 }) },
			outcome{sdkErr: "", stepErr: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, timeouts)
			c.setup(e)
			client := openai.NewClient(option.WithBaseURL(e.base+"/v1"), option.WithAPIKey("sk-client"), option.WithMaxRetries(0))
			params := openai.ChatCompletionNewParams{Model: "gpt-4o", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Task: " + c.name)}}
			start := time.Now()
			var agentSaw string
			if c.stream {
				stream := client.Chat.Completions.NewStreaming(context.Background(), params)
				chunks := 0
				for stream.Next() {
					chunks++
				}
				err := stream.Err()
				took := time.Since(start)
				if err == nil {
					t.Fatalf("a broken stream ended as a success after %d chunks", chunks)
				}
				agentSaw = fmt.Sprintf("SDK stream error after %d chunks in %v: %s", chunks, took.Round(time.Millisecond), trim(err.Error(), 60))
			} else {
				var raw *http.Response
				_, err := client.Chat.Completions.New(context.Background(), params, option.WithResponseInto(&raw))
				took := time.Since(start)
				if err == nil {
					t.Fatal("the call succeeded")
				}
				var apiErr *openai.Error
				switch {
				case c.want.status != 0:
					if !errorsAs(err, &apiErr) || apiErr.StatusCode != c.want.status || !strings.Contains(apiErr.Message, c.want.msg) {
						t.Fatalf("got %v, want status %d with %q", err, c.want.status, c.want.msg)
					}
					if h := c.want.header; h[0] != "" && raw.Header.Get(h[0]) != h[1] {
						t.Fatalf("%s: %q, want %q", h[0], raw.Header.Get(h[0]), h[1])
					}
					agentSaw = fmt.Sprintf("%d %q in %v", apiErr.StatusCode, trim(apiErr.Message, 50), took.Round(time.Millisecond))
				default: // headers were sent: the body is cut, and the SDK must say so
					agentSaw = fmt.Sprintf("SDK error in %v: %s", took.Round(time.Millisecond), trim(err.Error(), 60))
				}
			}
			steps := recordedSteps(t, e)
			if len(steps) != 1 {
				t.Fatalf("%d steps recorded, want 1: %s", len(steps), describeSteps(steps))
			}
			s := steps[0]
			switch {
			case c.want.stepErr && s.Error == "":
				t.Fatalf("the failed call is recorded without its error: %s", describeSteps(steps))
			case !c.want.stepErr && s.Status != c.want.status:
				t.Fatalf("recorded status %d, want %d", s.Status, c.want.status)
			}
			faultRow(t, "upstream", c.name, agentSaw, describeSteps(steps))
		})
	}
	geminiFaultRows(t)
}

// geminiSaw is what a Gemini client read of a streamed answer.
type geminiSaw struct {
	chunks  int    // answer chunks read
	text    string // their text
	errCode int    // the error it got (the SDK's ApiError status, an error element's code); 0 none
	errMsg  string
	broken  bool // the body broke off (the array unclosed, a read error)
}

func (s geminiSaw) String() string {
	out := fmt.Sprintf("%d chunks", s.chunks)
	if s.errCode != 0 {
		out += fmt.Sprintf(", error %d %q", s.errCode, trim(s.errMsg, 60))
	}
	if s.broken {
		out += ", then a broken body"
	}
	return out
}

// geminiFaultRows: the upstream faults of a streamed Gemini answer, in both
// framings: alt=sse read by @google/genai (generateContentStream), and the JSON
// array (no alt) read element by element as it comes, as a REST client does.
//   - truncated (the connection dropped after two chunks): over SSE camproxy ends
//     the relayed chunks with Google's error object as a bare data event, which the
//     SDK raises (ApiError 502 naming the break); an array cannot take one: the
//     client reads the two elements and a broken body, never a closed array. The
//     step records the break.
//   - an error mid-stream (the API's 503 after two chunks): relayed as it came, the
//     SDK raises it, the array's client reads it as the last element of a closed
//     array; the step records the answer as incomplete.
//   - an answer past replay.max_answer_bytes: the client gets it whole, the step
//     keeps its first bytes, says how many it lacks, and carries the whole answer's
//     usage, with no error.
//
// Each row records one step, with the upstream's status (200: the stream began).
func geminiFaultRows(t *testing.T) {
	const limit = 2 << 10
	const short = "Flight UA 100 leaves on time from gate B7."
	long := strings.Join(slices.Repeat([]string{strings.Repeat("x", 99)}, 300), " ") // 30 KB in 300 chunks
	reply := func(text string) func(*testkit.Gemini) {
		return func(g *testkit.Gemini) {
			g.ReplyFn = func(gjson.Result) testkit.Reply { return testkit.Reply{Content: text} }
		}
	}
	rows := []struct {
		name   string
		fault  func(*testkit.Gemini)
		check  func(t *testing.T, sse bool, saw geminiSaw)
		stepOK func(s *replay.StepEvent) bool
	}{
		{"truncated stream", func(g *testkit.Gemini) { reply(short)(g); g.ResetAfter = 2 },
			func(t *testing.T, sse bool, saw geminiSaw) {
				if saw.chunks != 2 || saw.text != "Flight UA" ||
					sse && (saw.errCode != 502 || !strings.Contains(saw.errMsg, "broke the stream") || !strings.Contains(saw.errMsg, "INTERNAL")) ||
					!sse && (saw.errCode != 0 || !saw.broken) {
					t.Fatalf("the client read %s", saw)
				}
			},
			func(s *replay.StepEvent) bool { return strings.Contains(s.Error, "unexpected EOF") }},
		{"error mid-stream", func(g *testkit.Gemini) { reply(short)(g); g.ErrorAfter = 2 },
			func(t *testing.T, _ bool, saw geminiSaw) {
				if saw.chunks != 2 || saw.text != "Flight UA" || saw.errCode != 503 || !strings.Contains(saw.errMsg, "overloaded") || saw.broken {
					t.Fatalf("the client read %s", saw)
				}
			},
			func(s *replay.StepEvent) bool { return strings.Contains(s.Error, "answer incomplete") }},
		{"oversized answer", reply(long),
			func(t *testing.T, _ bool, saw geminiSaw) {
				if saw.chunks != 300 || saw.text != long || saw.errCode != 0 || saw.broken {
					t.Fatalf("the client read %s, %d bytes of text of %d", saw, len(saw.text), len(long))
				}
			},
			func(s *replay.StepEvent) bool {
				kept := ""
				if s.Response != nil {
					kept = s.Response.Content
				}
				return s.Error == "" && kept != "" && len(kept) <= limit && strings.HasPrefix(long, kept) &&
					s.AnswerTruncatedBytes >= int64(len(long)-limit) && s.Usage.OutputTokens == 7
			}},
	}
	for _, sse := range []bool{true, false} {
		framing := "gemini alt=sse"
		if !sse {
			framing = "gemini JSON array"
		}
		for _, row := range rows {
			t.Run(framing+" "+row.name, func(t *testing.T) {
				e, g := newGeminiEnv(t, func(c *config.Config) { c.Replay.MaxAnswerBytes = limit })
				g.Configure(row.fault)
				task := "Task: " + framing + " " + row.name
				start := time.Now()
				var saw geminiSaw
				if sse {
					saw = genaiStream(t, e, task)
				} else {
					saw = arrayStream(t, e, task)
				}
				took := time.Since(start)
				row.check(t, sse, saw)
				steps := recordedSteps(t, e)
				if len(steps) != 1 || steps[0].Status != 200 || !row.stepOK(steps[0]) {
					t.Fatalf("recorded %s", describeSteps(steps))
				}
				faultRow(t, "upstream", framing+": "+row.name, fmt.Sprintf("%s in %v", saw, took.Round(time.Millisecond)), describeSteps(steps))
			})
		}
	}
}

// genaiStream streams task's answer through camproxy with @google/genai
// (generateContentStream: alt=sse).
func genaiStream(t *testing.T, e *env, task string) geminiSaw {
	t.Helper()
	out := gjson.ParseBytes(nodeScript(t, "genai.mjs", "GOOGLE_GEMINI_BASE_URL="+e.base, "GEMINI_API_KEY=gm-client",
		"CAMPROXY_GENAI_RUN=stream", "CAMPROXY_TASK="+task))
	if out.Get("error").Exists() && out.Get("errorName").String() != "ApiError" {
		t.Fatalf("@google/genai raised no API error: %s", out.Raw)
	}
	return geminiSaw{chunks: int(out.Get("chunks").Int()), text: out.Get("text").String(),
		errCode: int(out.Get("errorStatus").Int()), errMsg: out.Get("error").String()}
}

// arrayStream streams task's answer through camproxy as a JSON array
// (streamGenerateContent without alt) and reads its elements as a streaming JSON
// reader does, up to where the body ends or breaks.
func arrayStream(t *testing.T, e *env, task string) geminiSaw {
	t.Helper()
	body := `{"contents":[{"role":"user","parts":[{"text":"` + jsonText(task) + `"}]}]}`
	req, _ := http.NewRequest(http.MethodPost, e.base+"/v1beta/models/gemini-2.5-flash:streamGenerateContent", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Goog-Api-Key", "gm-client")
	resp, err := (&http.Client{Timeout: testkit.Patience(t)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, readErr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("%d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	saw := geminiSaw{broken: readErr != nil}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		t.Fatalf("not an array: %q", b)
	}
	for dec.More() {
		var el json.RawMessage
		if err := dec.Decode(&el); err != nil {
			saw.broken = true
			return saw
		}
		if e := gjson.GetBytes(el, "error"); e.Exists() {
			saw.errCode, saw.errMsg = int(e.Get("code").Int()), e.Get("message").String()
			continue
		}
		saw.chunks++
		saw.text += gjson.GetBytes(el, "candidates.0.content.parts.0.text").String()
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim(']') {
		saw.broken = true
	}
	return saw
}

// errorsAs is errors.As for the SDK's error type.
func errorsAs(err error, target **openai.Error) bool {
	for err != nil {
		if e, ok := err.(*openai.Error); ok {
			*target = e
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

// TestRedisOutage: Redis down at start, killed under load and restarted. Agents keep
// working on the local cache and episode store — each run stays one episode with one
// context, stitched without headers — and camproxy picks Redis up again.
func TestRedisOutage(t *testing.T) {
	rs := testkit.StartRedis(t)
	rs.Kill() // down at start
	e := newEnvWith(t, func(c *config.Config) {
		c.Cache.RedisURL = rs.URL()
		c.Episodes.Store = config.StoreRedis
	}, Options{Logger: testLogger(t), RedisCooldown: 200 * time.Millisecond})
	cfg := e.cfg

	// Phase 1, Redis down from the start: serving, degraded but ready.
	resp, err := http.Get(e.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("readyz with Redis down: %d, want 200 (degraded)", resp.StatusCode)
	}
	runAgents := func(phase string, n, turns int, midway func()) {
		t.Helper()
		agents := make([]*agent, n)
		for i := range agents {
			agents[i] = newAgent(fmt.Sprintf("%s task %d: move my flight to Friday", phase, i), false)
		}
		ctxs := make([]string, n)
		for turn := range turns {
			if turn == turns/2 && midway != nil {
				midway()
			}
			for i, ag := range agents {
				h := e.turn(ag) // fails the test on any non-200
				if c := h.Get("X-CAM-Context"); turn == 0 && c != "miss" && c != "hit" {
					t.Fatalf("%s agent %d: first turn X-CAM-Context %q", phase, i, c)
				}
				task := gjson.GetBytes(e.up.Last().Body, "messages.1.content").String()
				if turn == 0 {
					ctxs[i] = task
				} else if task != ctxs[i] {
					t.Fatalf("%s agent %d turn %d: the task message changed:\n%q\nwas\n%q", phase, i, turn, task, ctxs[i])
				}
			}
		}
	}
	runAgents("down-at-start", 3, 3, nil)
	faultRow(t, "redis", "down at start", "200s; readyz 200 degraded; each run one episode, one context", "")

	// Phase 2: Redis comes back, then dies mid-run.
	rs.Start()
	time.Sleep(250 * time.Millisecond) // the store's cooldown
	runAgents("back", 1, 1, nil)       // the first call after the cooldown finds Redis again
	if !waitFor(t, func() bool {
		return strings.Contains(e.metric("camproxy_dependency_up"), `dependency="redis",part="episodes"} 1`)
	}) {
		t.Fatalf("Redis back but dependency_up: %s", e.metric("camproxy_dependency_up"))
	}
	runAgents("killed-mid-run", 4, 4, func() { rs.Kill() })
	if !strings.Contains(e.metric("camproxy_dependency_up"), `dependency="redis",part="episodes"} 0`) {
		t.Fatalf("Redis killed but dependency_up: %s", e.metric("camproxy_dependency_up"))
	}
	faultRow(t, "redis", "killed mid-run", "200s; runs continue their episodes from the local copy", "")

	// Phase 3: restarted; new episodes land in Redis again.
	rs.Start()
	time.Sleep(250 * time.Millisecond) // the store's cooldown
	runAgents("restarted", 2, 2, nil)
	if !waitFor(t, func() bool {
		return strings.Contains(e.metric("camproxy_dependency_up"), `dependency="redis",part="episodes"} 1`)
	}) {
		t.Fatalf("Redis restarted but dependency_up: %s", e.metric("camproxy_dependency_up"))
	}
	conn, err := net.Dial("tcp", rs.Addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "*2\r\n$4\r\nKEYS\r\n$1\r\n*\r\n")
	buf := make([]byte, 4096)
	conn.SetReadDeadline(time.Now().Add(testkit.Patience(t)))
	n, _ := conn.Read(buf)
	conn.Close()
	if !strings.Contains(string(buf[:n]), "ep_") {
		t.Fatalf("no episode in the restarted Redis: %q", buf[:n])
	}

	steps := recordedSteps(t, e)
	src, _ := replay.OpenSource(context.Background(), cfg.Replay.Sinks[0])
	b, err := replay.Read(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	// 3 runs × 3 turns + 1 × 1 + 4 × 4 + 2 × 2 = 30 calls in 10 episodes.
	if len(steps) != 30 || len(b.Episodes) != 10 {
		t.Fatalf("%d steps in %d episodes, want 30 in 10 (a run split in two episodes?)", len(steps), len(b.Episodes))
	}
	faultRow(t, "redis", "restarted", "200s; dependency_up back to 1; new episodes in Redis",
		fmt.Sprintf("%d steps in %d episodes, none split", len(steps), len(b.Episodes)))
}

// tmpfs mounts a small tmpfs (root only; the test skips elsewhere) and returns it.
func tmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s): the disk-full case needs root", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fill writes a file until dir's file system is full; remove it to free the space.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			return p
		}
	}
}

// TestReplayDiskFull: the file sink's file system fills up → events spool and are
// delivered once there is room, none lost; when the spool itself cannot write, the
// loss is counted and logged loudly.
func TestReplayDiskFull(t *testing.T) {
	sinkDir := tmpfs(t, "512k")
	var logs testkit.SyncBuffer
	e := newEnvWith(t, func(c *config.Config) { c.Replay.Sinks = []string{"file://" + sinkDir + "/replay"} },
		Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	filler := fill(t, sinkDir)
	for i := range 10 {
		a := newAgent(fmt.Sprintf("Disk full task %d", i), false)
		e.turn(a)
		e.turn(a)
	}
	if !waitFor(t, func() bool { return strings.Contains(logs.String(), "replay sink failed; spooling events") }) {
		t.Fatalf("a full sink was not noticed:\n%s", logs.String())
	}
	spooled := e.metric("camproxy_replay_spooled_events")
	os.Remove(filler) // room again: the spool drains
	if !waitFor(t, func() bool { return strings.Contains(logs.String(), "replay sink is back; spool delivered") }) {
		t.Fatalf("spool not delivered after the disk was freed:\n%s", logs.String())
	}
	events := e.metric("camproxy_replay_events_total")
	steps := recordedSteps(t, e)
	if len(steps) != 20 || strings.Contains(events, `result="lost"`) {
		t.Fatalf("%d steps in the sink, want 20; %s", len(steps), events)
	}
	faultRow(t, "replay", "file sink's disk full, then freed", "200s, no added error",
		fmt.Sprintf("spooled (%s), then %d/20 steps delivered, 0 lost", strings.TrimSpace(strings.SplitN(spooled, "\n", 2)[0]), len(steps)))

	// The spool's own disk full too: counted as lost and logged loudly.
	spoolDir := tmpfs(t, "256k")
	sink2 := tmpfs(t, "256k")
	logs2 := &testkit.SyncBuffer{}
	e2 := newEnvWith(t, func(c *config.Config) {
		c.Replay.Sinks = []string{"file://" + sink2 + "/replay"}
		c.Replay.SpoolDir = spoolDir + "/spool"
	}, Options{Logger: slog.New(slog.NewTextHandler(logs2, nil))})
	fill(t, sink2)
	fill(t, spoolDir)
	a := newAgent("Nowhere to write", false)
	e2.turn(a)
	if !waitFor(t, func() bool {
		return strings.Contains(logs2.String(), "REPLAY EVENTS LOST") && strings.Contains(e2.metric("camproxy_replay_events_total"), `result="lost"`)
	}) {
		t.Fatalf("no loud loss:\n%s\n%s", logs2.String(), e2.metric("camproxy_replay_events_total"))
	}
	faultRow(t, "replay", "sink and spool disks full", "200", `level=ERROR "REPLAY EVENTS LOST…" and replay_events_total{result="lost"}`)
}
