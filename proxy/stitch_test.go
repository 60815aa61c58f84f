package proxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
)

// An answer longer than replay.max_answer_bytes is recorded cut; the agent gets it
// whole and sends it whole with its next call, which must still continue the
// episode (issue 27 item 3): by the cut answer's sketch. Through the whole data
// plane, for a streamed chat completion and a streamed Anthropic message.

// stitchLimit is the proxy's max_answer_bytes here: less than the reasoning an answer
// starts with, far less than its text or its tool call's arguments.
const stitchLimit = 512

var (
	stitchReasoning = strings.Repeat("Let me think about the file. ", 40)
	stitchStory     = "Here is the whole story.  " + strings.Repeat("Once upon a time there was a proxy. ", 120)
	// stitchFile is a file a coding agent writes through a tool call, as a JSON
	// string's content: escapes that an SDK re-spells ("\u00e9" sent back as "é").
	stitchFile = strings.Repeat(`# R\u00e9port\nline of the report\n`, 200)
)

// stitchProto is one protocol's side of the test: the calls an agent makes, the
// answers its upstream streams.
type stitchProto struct {
	name, path string
	protocol   string // the route's adapter, as episodes name it
	task       string // turn 1's body
	// answer is the streamed answer to a call whose X-Test-Answer is kind: "text" (a
	// long text), "tool:ID" (reasoning, a short text and a tool call ID with a big
	// file as its arguments), or "short".
	answer func(kind string) []byte
	// next is the body of the call after answer(kind): the history, that answer
	// whole as the agent's SDK sends it back, and a user message or a tool result.
	next func(kind string) string
}

// toolID is the tool-call id of an answer kind, "" for a text answer.
func toolID(kind string) string {
	id, _ := strings.CutPrefix(kind, "tool:")
	if id == kind {
		return ""
	}
	return id
}

// jsonText is s as a JSON string literal.
func jsonText(s string) string { return string(protocol.AppendString(nil, s)) }

// chunks cuts s in pieces of n bytes, never inside an escape sequence (the pieces are
// JSON string contents).
func chunks(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		k := min(n, len(s))
		for k < len(s) && strings.LastIndexByte(s[max(0, k-6):k], '\\') >= 0 {
			k++ // an escape may be cut: move past it
		}
		out = append(out, s[:k])
		s = s[k:]
	}
	return out
}

const chatTask = `{"model":"gpt-4o","stream":true,"messages":[{"role":"system","content":"You are a coding agent."},` +
	`{"role":"user","content":"Write the report to a.md."}]}`

var chatStitch = stitchProto{
	name: "chat completions", path: "/v1/chat/completions", protocol: "openai", task: chatTask,
	answer: func(kind string) []byte {
		ev := func(delta string) string {
			return `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}` + "\n\n"
		}
		var b strings.Builder
		finish := "stop"
		switch id := toolID(kind); {
		case kind == "short":
			b.WriteString(ev(`{"role":"assistant","content":"Which file?"}`))
		case id == "":
			for _, p := range chunks(stitchStory, 100) {
				b.WriteString(ev(`{"content":"` + p + `"}`))
			}
		default:
			b.WriteString(ev(`{"role":"assistant","reasoning_content":"` + stitchReasoning + `"}`))
			b.WriteString(ev(`{"content":"I'll write it."}`))
			b.WriteString(ev(`{"tool_calls":[{"index":0,"id":"` + id + `","type":"function","function":{"name":"write_file","arguments":""}}]}`))
			for _, p := range chunks(jsonText(chatArgs)[1:len(jsonText(chatArgs))-1], 300) {
				b.WriteString(ev(`{"tool_calls":[{"index":0,"function":{"arguments":"` + p + `"}}]}`))
			}
			finish = "tool_calls"
		}
		b.WriteString(`data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"` + finish + `"}]}` + "\n\ndata: [DONE]\n\n")
		return []byte(b.String())
	},
	next: func(kind string) string {
		history := strings.TrimSuffix(chatTask, "]}")
		switch id := toolID(kind); {
		case kind == "short":
			return history + `,{"role":"assistant","content":"Which file?"},{"role":"user","content":"a.md"}]}`
		case id == "":
			return history + `,{"role":"assistant","content":"` + stitchStory + `"},{"role":"user","content":"Thanks."}]}`
		default:
			// The openai SDK sends the arguments string back as it got it.
			return history + `,{"role":"assistant","content":"I'll write it.","tool_calls":[{"id":"` + id + `","type":"function",` +
				`"function":{"name":"write_file","arguments":` + jsonText(chatArgs) + `}}]},` +
				`{"role":"tool","tool_call_id":"` + id + `","content":"written"}]}`
		}
	},
}

// chatArgs are the arguments of the chat tool call.
var chatArgs = `{"path": "a.md", "content": "` + stitchFile + `"}`

const anthropicTask = `{"model":"claude-sonnet-4-5","max_tokens":8192,"stream":true,"system":[{"type":"text","text":"You are Claude Code."}],` +
	`"messages":[{"role":"user","content":[{"type":"text","text":"Write the report to a.md."}]}]}`

var anthropicStitch = stitchProto{
	name: "anthropic messages", path: "/v1/messages", protocol: "anthropic", task: anthropicTask,
	answer: func(kind string) []byte {
		var b strings.Builder
		ev := func(typ, data string) { b.WriteString("event: " + typ + "\ndata: " + data + "\n\n") }
		ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":9,"output_tokens":1}}}`)
		switch id := toolID(kind); {
		case kind == "short":
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Which file?"}}`)
		case id == "":
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
			for _, p := range chunks(stitchStory, 100) {
				ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+p+`"}}`)
			}
		default:
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`)
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"`+stitchReasoning+`"}}`)
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2ln"}}`)
			ev("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`)
			ev("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"I'll write it."}}`)
			ev("content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"`+id+`","name":"Write","input":{}}}`)
			input := `{"file_path": "/w/a.md", "content": "` + stitchFile + `"}`
			for _, p := range chunks(jsonText(input)[1:len(jsonText(input))-1], 300) {
				ev("content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"`+p+`"}}`)
			}
		}
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":99}}`)
		ev("message_stop", `{"type":"message_stop"}`)
		return []byte(b.String())
	},
	next: func(kind string) string {
		history := strings.TrimSuffix(anthropicTask, "]}")
		switch id := toolID(kind); {
		case kind == "short":
			return history + `,{"role":"assistant","content":[{"type":"text","text":"Which file?"}]},{"role":"user","content":"a.md"}]}`
		case id == "":
			return history + `,{"role":"assistant","content":[{"type":"text","text":"` + stitchStory + `"}]},{"role":"user","content":"Thanks."}]}`
		default:
			// The SDK sends the input back as an object: its keys in another order,
			// "\u00e9" as "é".
			file := strings.ReplaceAll(stitchFile, `\u00e9`, "é")
			return history + `,{"role":"assistant","content":[{"type":"thinking","thinking":"` + stitchReasoning + `","signature":"c2ln"},` +
				`{"type":"text","text":"I'll write it."},` +
				`{"type":"tool_use","id":"` + id + `","name":"Write","input":{"content":"` + file + `","file_path":"/w/a.md"}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + id + `","content":"File created."}]}]}`
		}
	},
}

// stitchStores are the episode stores the tests run on, by name: the tips of cut
// answers go through each one's Claim.
var stitchStores = []string{"memory", "redis"}

// stitchProxy is a proxy for these tests, and what its store needs of them.
type stitchProxy struct {
	*inmemProxy
	// run tells this run's tasks from earlier runs' in a store that outlives it
	// (Redis): their histories, and so their tips, differ.
	run string
}

// newStitchProxy is an in-memory proxy whose upstreams (OpenAI and Anthropic) stream
// the answer each call's X-Test-Answer names, recording stitchLimit bytes of it, and
// whose episode store is store.
func newStitchProxy(t *testing.T, store string) *stitchProxy {
	sp := &stitchProxy{}
	var eps episode.Store
	if store == "redis" {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			t.Skipf("redis at 127.0.0.1:6379 not reachable (%v); make test starts one", err)
		}
		t.Cleanup(func() { _ = rdb.Close() })
		eps, sp.run = episode.NewRedis(rdb, time.Minute), episode.NewID()
	}
	p := newInmemProxy(t, func(fc *fasthttp.RequestCtx) {
		pr := &chatStitch
		if strings.HasSuffix(string(fc.Path()), anthropicStitch.path) {
			pr = &anthropicStitch
		}
		fc.SetContentType("text/event-stream")
		fc.SetBody(pr.answer(string(fc.Request.Header.Peek("X-Test-Answer"))))
	}, false, func(o *Options, _ *fasthttp.Server) {
		if eps != nil {
			o.Episodes = eps
		}
		o.MaxAnswerBytes = stitchLimit
		oa := o.Upstreams["openai"]
		o.Upstreams["anthropic"] = &Upstream{Name: "anthropic", Base: oa.Base, FirstByteTimeout: oa.FirstByteTimeout, IdleTimeout: oa.IdleTimeout}
	})
	sp.inmemProxy = p
	return sp
}

// stitchCall is one call of the agent: the episode and context source it was answered
// with, and the turn recorded.
// header holds extra header name, value pairs.
func stitchCall(t *testing.T, p *stitchProxy, pr *stitchProto, body, kind string, header ...string) (ep, source string, turn *episode.Turn) {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("http://camproxy.test" + pr.path)
	req.Header.SetContentType("application/json")
	req.Header.Set("X-Test-Answer", kind)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	req.SetBodyString(strings.ReplaceAll(body, "a.md.", "a.md. "+p.run))
	if err := p.client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
		t.Fatalf("%s call: %v (status %d: %s)", pr.name, err, resp.StatusCode(), resp.Body())
	}
	if want := pr.answer(kind); string(resp.Body()) != string(want) {
		t.Fatalf("%s call: the agent did not get the answer whole (%d bytes of %d)", pr.name, len(resp.Body()), len(want))
	}
	turn = nextTurn(t, p.inmemProxy)
	if turn.Error != "" || turn.Episode.Protocol != pr.protocol {
		t.Fatalf("%s call recorded error %q, protocol %q", pr.name, turn.Error, turn.Episode.Protocol)
	}
	return string(resp.Header.Peek(hdrEpisode)), string(resp.Header.Peek(hdrContext)), turn
}

func roles(msgs []protocol.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Role)
	}
	return out
}

// TestStitchTruncatedAnswer: a turn whose answer was recorded cut (a long text; a
// tool call with a big file, after reasoning that took the whole budget) is continued
// by the agent's next call, which sends the answer back whole — re-serialised as its
// SDK does — with a tool result or a user message: same episode, turn 1, its context
// from the episode, and only the new message recorded.
func TestStitchTruncatedAnswer(t *testing.T) {
	forStores(t, func(t *testing.T, p *stitchProxy) {
		for _, pr := range []*stitchProto{&chatStitch, &anthropicStitch} {
			for _, kind := range []string{"text", "tool:call_solo"} {
				t.Run(pr.name+"/"+kind, func(t *testing.T) {
					ep1, source1, turn1 := stitchCall(t, p, pr, pr.task, kind)
					if !turn1.NewEpisode || turn1.AnswerTruncated == 0 || source1 == "episode" {
						t.Fatalf("turn 1: new %v, truncated %d, context %q: the test needs a new episode whose answer is cut",
							turn1.NewEpisode, turn1.AnswerTruncated, source1)
					}
					ep2, source2, turn2 := stitchCall(t, p, pr, pr.next(kind), "short")
					if ep2 != ep1 || source2 != "episode" {
						t.Fatalf("turn 2: episode %q (turn 1's %q), context %q: the call after a cut answer started a new episode", ep2, ep1, source2)
					}
					if turn2.Index != 1 || turn2.NewEpisode || turn2.Episode.ID != ep1 {
						t.Fatalf("turn 2 recorded as index %d of %q (new %v)", turn2.Index, turn2.Episode.ID, turn2.NewEpisode)
					}
					if len(turn2.Messages) != 1 || turn2.Messages[0].Role == "assistant" {
						t.Fatalf("turn 2 recorded messages of roles %v; want only the one after the answer", roles(turn2.Messages))
					}
				})
			}
		}
	})
}

// forStores runs test on a stitch proxy of each episode store.
func forStores(t *testing.T, test func(t *testing.T, p *stitchProxy)) {
	for _, store := range stitchStores {
		t.Run(store, func(t *testing.T) { test(t, newStitchProxy(t, store)) })
	}
}

// TestStitchTruncatedAnswerMidEpisode: an answer cut after a turn that stitched by its
// chain tip: the call after it continues from the cut answer's sketch, not from the
// older tip before it, so the step holds only the tool result, not the answer again.
func TestStitchTruncatedAnswerMidEpisode(t *testing.T) {
	forStores(t, testStitchMidEpisode)
}

func testStitchMidEpisode(t *testing.T, p *stitchProxy) {
	pr := &chatStitch
	ep1, _, _ := stitchCall(t, p, pr, pr.task, "short")
	turn2Body := pr.next("short")
	ep2, _, turn2 := stitchCall(t, p, pr, turn2Body, "tool:call_mid")
	if ep2 != ep1 || turn2.AnswerTruncated == 0 {
		t.Fatalf("turn 2: episode %q (turn 1's %q), truncated %d", ep2, ep1, turn2.AnswerTruncated)
	}
	history := strings.TrimSuffix(turn2Body, "]}")
	whole := strings.TrimPrefix(pr.next("tool:call_mid"), strings.TrimSuffix(chatTask, "]}"))
	ep3, source3, turn3 := stitchCall(t, p, pr, history+whole, "short")
	if ep3 != ep1 || source3 != "episode" || turn3.Index != 2 {
		t.Fatalf("turn 3: episode %q (want %q), context %q, index %d", ep3, ep1, source3, turn3.Index)
	}
	if len(turn3.Messages) != 1 || turn3.Messages[0].Role != "tool" {
		t.Fatalf("turn 3 recorded messages of roles %v; want only the tool result", roles(turn3.Messages))
	}
}

// TestStitchTruncatedParallelRuns: two runs of one task, each with a cut turn 1 of
// the same text and the same file (only the tool-call ids differ, as between runs),
// stay two episodes, each turn 2 in its own run's, whichever comes first.
func TestStitchTruncatedParallelRuns(t *testing.T) {
	forStores(t, testStitchParallelRuns)
}

func testStitchParallelRuns(t *testing.T, p *stitchProxy) {
	for _, pr := range []*stitchProto{&chatStitch, &anthropicStitch} {
		t.Run(pr.name, func(t *testing.T) {
			a, _, _ := stitchCall(t, p, pr, pr.task, "tool:call_run_a")
			b, _, _ := stitchCall(t, p, pr, pr.task, "tool:call_run_b")
			if a == b {
				t.Fatal("two first turns share an episode")
			}
			b2, _, _ := stitchCall(t, p, pr, pr.next("tool:call_run_b"), "short")
			a2, _, _ := stitchCall(t, p, pr, pr.next("tool:call_run_a"), "short")
			if a2 != a || b2 != b {
				t.Fatalf("turn 2 of run a in %q (its turn 1 in %q), of run b in %q (%q)", a2, a, b2, b)
			}
		})
	}
}

// TestStitchDeclaredTasks: runs of two tasks (X-CAM-Task-Id) that open alike — the
// same system prompt, user message and answer, as two tau-bench airline tasks do —
// each continue their own episode, whichever sends its next call first: by the chain
// tip of a whole answer and by the sketch of a cut one (the same tool-call id, so only
// the task tells them apart).
func TestStitchDeclaredTasks(t *testing.T) {
	forStores(t, func(t *testing.T, p *stitchProxy) {
		for _, pr := range []*stitchProto{&chatStitch, &anthropicStitch} {
			for _, kind := range []string{"short", "tool:call_same"} {
				for _, bFirst := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/%s/b-first=%v", pr.name, kind, bFirst), func(t *testing.T) {
						run := episode.NewID() // this case's tasks: no tip of another case matches
						taskA, taskB := "task-a-"+run, "task-b-"+run
						a, _, _ := stitchCall(t, p, pr, pr.task, kind, hdrTask, taskA)
						b, _, _ := stitchCall(t, p, pr, pr.task, kind, hdrTask, taskB)
						if a == b {
							t.Fatal("two first turns share an episode")
						}
						var a2, b2 string
						if bFirst {
							b2, _, _ = stitchCall(t, p, pr, pr.next(kind), "short", hdrTask, taskB)
							a2, _, _ = stitchCall(t, p, pr, pr.next(kind), "short", hdrTask, taskA)
						} else {
							a2, _, _ = stitchCall(t, p, pr, pr.next(kind), "short", hdrTask, taskA)
							b2, _, _ = stitchCall(t, p, pr, pr.next(kind), "short", hdrTask, taskB)
						}
						if a2 != a || b2 != b {
							t.Fatalf("turn 2 of task a in %q (its turn 1 in %q), of task b in %q (%q)", a2, a, b2, b)
						}
					})
				}
			}
		}
	})
}
