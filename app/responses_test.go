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
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/protocol"
)

// The OpenAI Responses API (POST /v1/responses) through camproxy, driven by openai-go's
// Responses client against testkit's faithful fake (which stores responses by id).

const responsesTask = "Is flight UA12 on time? Passenger: Mia Li (économie, \"no fees\") <seat 12A>."

// responsesClient is an openai-go client on camproxy that keeps the bodies it sent and
// the X-CAM-* headers of each answer.
type responsesClient struct {
	openai.Client
	mu       sync.Mutex
	sent     [][]byte
	contexts []string
	episodes []string
}

func newResponsesClient(e *env) *responsesClient {
	c := &responsesClient{}
	capture := func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		resp, err := next(r)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.sent = append(c.sent, b)
		if err == nil {
			c.contexts = append(c.contexts, resp.Header.Get("X-CAM-Context"))
			c.episodes = append(c.episodes, resp.Header.Get("X-CAM-Episode-Id"))
		}
		return resp, err
	}
	c.Client = openai.NewClient(option.WithBaseURL(e.base+"/v1"), option.WithAPIKey("sk-client-key"),
		option.WithMiddleware(capture), option.WithMaxRetries(0))
	return c
}

func responsesParams(input responses.ResponseInputParam) responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model:        "gpt-4.1",
		Instructions: openai.String("You are an airline agent. Follow the policy."),
		Input:        responses.ResponseNewParamsInputUnion{OfInputItemList: input},
		Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "lookup",
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}}}}},
	}
}

func callOutput(callID, output string) responses.ResponseInputItemUnionParam {
	item := responses.ResponseInputItemParamOfFunctionCallOutput(output)
	item.OfFunctionCallOutput.CallID = param.NewOpt(callID)
	return item
}

// TestResponsesGoClient: four turns of one episode.
//  1. The task as an input list, not streamed: the model calls a tool; the context is
//     spliced right after the task, every other byte as the client sent it.
//  2. The whole conversation re-sent (task, function_call, function_call_output): the
//     episode is found by stitching and gets the same context again, byte for byte.
//  3. previous_response_id and a new user message: the same episode (by the response
//     id), X-CAM-Context episode, and no context injected — the upstream sees exactly
//     the client's bytes; the fake answers knowing the stored conversation.
//  4. previous_response_id and the tool output, streamed: relayed event by event and
//     recorded. The replay buffer holds one episode, one context, the whole trajectory.
func TestResponsesGoClient(t *testing.T) {
	e := newEnv(t, nil)
	c := newResponsesClient(e)
	ctx := context.Background()
	wantCtx := "Guidance for: " + responsesTask + "\n- check the policy first."

	// Turn 1.
	task := responses.ResponseInputItemParamOfMessage(responsesTask, responses.EasyInputMessageRoleUser)
	r1, err := c.Responses.New(ctx, responsesParams(responses.ResponseInputParam{task}))
	if err != nil {
		t.Fatal(err)
	}
	if len(r1.Output) != 1 || r1.Output[0].Type != "function_call" || r1.Output[0].Name != "lookup" {
		t.Fatalf("turn 1 output: %s", r1.RawJSON())
	}
	call := r1.Output[0]
	assertSpliced(t, c.sent[0], e.up.Requests()[0].Body, responsesTask, wantCtx)

	// Turn 2: the whole conversation again.
	in2 := responses.ResponseInputParam{task,
		responses.ResponseInputItemParamOfFunctionCall(call.Arguments.OfString, call.CallID, call.Name),
		callOutput(call.CallID, `{"status":"on time"}`)}
	r2, err := c.Responses.New(ctx, responsesParams(in2))
	if err != nil {
		t.Fatal(err)
	}
	if r2.OutputText() != "Done after 3 items." {
		t.Fatalf("turn 2: %s", r2.RawJSON())
	}
	assertSpliced(t, c.sent[1], e.up.Requests()[1].Body, responsesTask, wantCtx)

	// Turn 3: the provider keeps the conversation.
	p3 := responsesParams(responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("And the gate?", responses.EasyInputMessageRoleUser)})
	p3.PreviousResponseID = openai.String(r2.ID)
	r3, err := c.Responses.New(ctx, p3)
	if err != nil {
		t.Fatal(err)
	}
	if len(r3.Output) != 1 || r3.Output[0].Type != "function_call" {
		t.Fatalf("turn 3: %s", r3.RawJSON())
	}
	if up := e.up.Requests()[2].Body; !bytes.Equal(up, c.sent[2]) {
		t.Fatalf("turn 3: the upstream body differs from the client's:\n got %s\nwant %s", up, c.sent[2])
	}

	// Turn 4: streamed.
	p4 := responsesParams(responses.ResponseInputParam{callOutput(r3.Output[0].CallID, `{"gate":"B12"}`)})
	p4.PreviousResponseID = openai.String(r3.ID)
	stream := c.Responses.NewStreaming(ctx, p4)
	var (
		types     []string
		deltas    []string
		completed responses.Response
		seq       int64 = -1
	)
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != seq+1 {
			t.Fatalf("event %s: sequence_number %d after %d", ev.Type, ev.SequenceNumber, seq)
		}
		seq = ev.SequenceNumber
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			deltas = append(deltas, ev.Delta)
		case "response.completed":
			completed = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	// The fake answers with the length of the stored conversation: turn 2's three
	// items and its message, turn 3's user message and call, and this tool output.
	const answer = "Done after 7 items."
	if strings.Join(deltas, "") != answer || len(deltas) != 4 || completed.OutputText() != answer || completed.Usage.InputTokens != 42 {
		t.Fatalf("streamed deltas %q, completed %s", deltas, completed.RawJSON())
	}
	if types[0] != "response.created" || types[len(types)-1] != "response.completed" {
		t.Fatalf("event types %v", types)
	}
	if up := e.up.Requests()[3].Body; !bytes.Equal(up, c.sent[3]) {
		t.Fatalf("turn 4: the upstream body differs from the client's:\n got %s\nwant %s", up, c.sent[3])
	}

	if got := strings.Join(c.contexts, ","); got != "miss,episode,episode,episode" {
		t.Fatalf("X-CAM-Context per turn: %s", got)
	}
	for i, id := range c.episodes {
		if id == "" || id != c.episodes[0] {
			t.Fatalf("turn %d: episode %q, turn 1's %q", i+1, id, c.episodes[0])
		}
	}
	if n := e.cam.Calls(); n != 1 {
		t.Fatalf("CAM calls %d", n)
	}

	buf, steps := recordedBuffer(t, e)
	if len(buf.Episodes) != 1 || len(steps) != 4 {
		t.Fatalf("%d episodes, %d steps recorded", len(buf.Episodes), len(steps))
	}
	ep := buf.Episodes[0]
	if ep.ID != c.episodes[0] || ep.Context != wantCtx || ep.Task != responsesTask || ep.Protocol != "openai" || ep.Steps != 4 {
		t.Fatalf("episode %s task %q context %q protocol %q steps %d", ep.ID, ep.Task, ep.Context, ep.Protocol, ep.Steps)
	}
	var roles []string
	for _, m := range ep.Messages {
		r := m.Role
		if len(m.ToolCalls) > 0 {
			r += "+call"
		}
		roles = append(roles, r)
	}
	const wantRoles = "system,user,assistant+call,tool,assistant,user,assistant+call,tool,assistant"
	if got := strings.Join(roles, ","); got != wantRoles {
		t.Fatalf("recorded trajectory %s, want %s", got, wantRoles)
	}
	if ep.Messages[5].Content != "And the gate?" || ep.Messages[8].Content != answer {
		t.Fatalf("recorded messages %+v", ep.Messages)
	}
	last := steps[len(steps)-1]
	for _, s := range steps {
		if s.Turn == 3 {
			last = s
		}
	}
	if last.Response == nil || last.Response.Content != answer || last.Usage != (protocol.Usage{InputTokens: 42, OutputTokens: 7}) || last.Status != 200 || last.Error != "" {
		t.Fatalf("streamed step: %+v response %+v", last, last.Response)
	}
	for _, s := range steps {
		if s.Turn == 2 && (s.Response == nil || len(s.Response.ToolCalls) != 1 || s.Response.ToolCalls[0].ID != r3.Output[0].CallID) {
			t.Fatalf("turn 3 step: %+v", s.Response)
		}
	}
}

// TestResponsesUnknownPreviousResponse: a call continuing a response camproxy never
// saw (made elsewhere, or its episode expired) is forwarded untouched as a new episode
// without context (X-CAM-Context none, the CAM not asked); an id the provider does not
// know either comes back as the provider's 400.
func TestResponsesUnknownPreviousResponse(t *testing.T) {
	e := newEnv(t, nil)
	// A response made without camproxy.
	direct, err := http.Post(e.up.URL+"/v1/responses", "application/json",
		strings.NewReader(`{"model":"gpt-4.1","input":"`+jsonText(responsesTask)+`","tools":[{"type":"function","name":"lookup"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(direct.Body)
	direct.Body.Close()
	first := gjson.GetBytes(b, "id").String()
	callID := gjson.GetBytes(b, "output.0.call_id").String()

	body := []byte(`{"model":"gpt-4.1","previous_response_id":"` + first + `","input":[{"type":"function_call_output","call_id":"` + callID +
		`","output":"ok"},{"role":"user","content":"` + jsonText(responsesTask) + `"}]}`)
	resp, out := e.postTo("/v1/responses", body, nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-CAM-Context") != "none" || resp.Header.Get("X-CAM-Episode-Id") == "" {
		t.Fatalf("status %d context %q episode %q: %s", resp.StatusCode, resp.Header.Get("X-CAM-Context"), resp.Header.Get("X-CAM-Episode-Id"), out)
	}
	if !bytes.Equal(e.up.Last().Body, body) {
		t.Fatalf("forwarded body changed:\n got %s\nwant %s", e.up.Last().Body, body)
	}
	if e.cam.Calls() != 0 {
		t.Fatalf("CAM asked %d times", e.cam.Calls())
	}
	// Its answer continues the new episode, which has no context.
	next := []byte(`{"model":"gpt-4.1","previous_response_id":"` + gjson.GetBytes(out, "id").String() + `","input":"thanks"}`)
	resp2, _ := e.postTo("/v1/responses", next, nil)
	if resp2.Header.Get("X-CAM-Episode-Id") != resp.Header.Get("X-CAM-Episode-Id") || resp2.Header.Get("X-CAM-Context") != "none" {
		t.Fatalf("follow-up: episode %q context %q", resp2.Header.Get("X-CAM-Episode-Id"), resp2.Header.Get("X-CAM-Context"))
	}

	resp, out = e.postTo("/v1/responses", []byte(`{"model":"gpt-4.1","previous_response_id":"resp_nowhere","input":"hi"}`), nil)
	if resp.StatusCode != 400 || gjson.GetBytes(out, "error.code").String() != "previous_response_not_found" {
		t.Fatalf("unknown everywhere: %d %s", resp.StatusCode, out)
	}
}

// TestResponsesSystemPlacement: with placement system the context goes into
// instructions — also on a previous_response_id call, since the provider does not
// carry instructions over from the previous response.
func TestResponsesSystemPlacement(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Placement.Mode = "system" })
	wantCtx := "Guidance for: " + responsesTask + "\n- check the policy first."
	body := []byte(`{"model":"gpt-4.1","instructions":"Be brief.","input":"` + jsonText(responsesTask) + `"}`)
	resp, out := e.postTo("/v1/responses", body, nil)
	want := bytes.Replace(body, []byte(`"Be brief."`), []byte(`"Be brief.`+jsonText("\n\n"+wantCtx)+`"`), 1)
	if resp.StatusCode != 200 || !bytes.Equal(e.up.Last().Body, want) {
		t.Fatalf("turn 1: %d\n got %s\nwant %s", resp.StatusCode, e.up.Last().Body, want)
	}
	id := gjson.GetBytes(out, "id").String()
	callID := gjson.GetBytes(out, "output.0.call_id").String()
	body2 := []byte(`{"model":"gpt-4.1","instructions":"Be brief.","previous_response_id":"` + id +
		`","input":[{"type":"function_call_output","call_id":"` + callID + `","output":"ok"}]}`)
	resp2, _ := e.postTo("/v1/responses", body2, nil)
	want2 := bytes.Replace(body2, []byte(`"Be brief."`), []byte(`"Be brief.`+jsonText("\n\n"+wantCtx)+`"`), 1)
	if resp2.Header.Get("X-CAM-Context") != "episode" || resp2.Header.Get("X-CAM-Episode-Id") != resp.Header.Get("X-CAM-Episode-Id") ||
		!bytes.Equal(e.up.Last().Body, want2) {
		t.Fatalf("turn 2: context %q\n got %s\nwant %s", resp2.Header.Get("X-CAM-Context"), e.up.Last().Body, want2)
	}
}

// TestResponsesStreamNotBuffered: the upstream sends response.created and waits until
// the client has it before sending the rest. A proxy that buffers deadlocks here.
func TestResponsesStreamNotBuffered(t *testing.T) {
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
			failed <- "event 0 did not reach the client before event 1 was due"
		}
	}
	body := []byte(`{"model":"gpt-4.1","stream":true,"input":"Stream me a status","tools":[{"type":"function","name":"lookup"}]}`)
	conn, r := streamRequestTo(t, e.app.Addr(), "/v1/responses", body)
	defer conn.Close()
	if first := readEvent(t, r); !strings.Contains(first, `"type":"response.created"`) {
		t.Fatalf("first event %s", first)
	}
	close(got1)
	for last := ""; !strings.Contains(last, `"type":"response.completed"`); {
		last = readEvent(t, r)
	}
	select {
	case msg := <-failed:
		t.Fatal(msg)
	default:
	}
}

// postTo is env.post on another path.
func (e *env) postTo(path string, body []byte, headers map[string]string) (*http.Response, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.base+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-client-key")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("read: %v", err)
	}
	return resp, b
}

// streamRequestTo is streamRequest on another path.
func streamRequestTo(t *testing.T, addr, path string, body []byte) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
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
