package app

import (
	"context"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/replay"
)

// The compatibility suite's agent frameworks (issue 11): each runs a real tool-calling
// agent, unmodified but for its base URL, through camproxy's OpenAI chat-completions
// route against the scripted upstream (testkit.DefaultReply: call the request's first
// tool, then answer once the tool result is in). Each script makes the same
// conversation: request 1 (the task) as model → tool → model without streaming,
// request 2 (a follow-up in the same history) the same loop streamed. That is four
// upstream calls and one episode.

const (
	frameworkTask     = "Is flight UA12 on time? Passenger: Mia Li (économie, \"no fees\")."
	frameworkFollowup = "Check it once more and tell me the gate."
)

// frameworkCalls is what each framework script must make, in order.
var frameworkCalls = []struct{ stream bool }{{false}, {false}, {true}, {true}}

// TestFrameworkLangChain: @langchain/openai's ChatOpenAI bound to one tool, driven by
// a model → tool → model loop for two requests; the second request uses .stream().
func TestFrameworkLangChain(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	e := newEnv(t, nil)
	out := gjson.ParseBytes(nodeScript(t, "langchain-agent.mjs", "CAMPROXY_BASE_URL="+e.base+"/v1",
		"CAMPROXY_TASK="+frameworkTask, "CAMPROXY_FOLLOWUP="+frameworkFollowup, "OPENAI_API_KEY=sk-langchain-client"))
	captureSent(t, "langchain", out)
	checkFrameworkRun(t, e, out)

	if out.Get("modelCalls").Int() != 4 || out.Get("stream.calls").Int() != 2 {
		t.Fatalf("model calls %d, streamed %d: %s", out.Get("modelCalls").Int(), out.Get("stream.calls").Int(), out.Raw)
	}
	// Streamed: the answer's four words arrive as four deltas, the tool call as its
	// header plus five argument fragments, then the include_usage chunk, which
	// LangChain asks for on its own (streamUsage defaults to true).
	if n := out.Get("stream.textDeltas").Int(); n != 4 {
		t.Fatalf("streamed text deltas %d, want 4 (one per upstream chunk)", n)
	}
	if n := out.Get("stream.toolCallChunks").Int(); n != 6 {
		t.Fatalf("streamed tool-call chunks %d, want 6", n)
	}
	if u := out.Get("stream.usage"); u.Get("input_tokens").Int() != 42 || u.Get("output_tokens").Int() != 7 {
		t.Fatalf("streamed usage_metadata %s", u.Raw)
	}
	if ua := out.Get("userAgent").String(); !strings.HasPrefix(ua, "langchainjs-openai/") {
		t.Fatalf("user agent %q", ua)
	}
	for i, r := range e.up.Requests() {
		b := gjson.ParseBytes(r.Body)
		// LangChain states "stream": false outright, sends no tool_choice and no
		// parallel_tool_calls unless asked, and names the tool on each tool message.
		if !b.Get("stream").Exists() || b.Get("tool_choice").Exists() || b.Get("parallel_tool_calls").Exists() {
			t.Fatalf("upstream call %d: stream %s tool_choice %s parallel_tool_calls %s", i, b.Get("stream").Raw, b.Get("tool_choice").Raw, b.Get("parallel_tool_calls").Raw)
		}
		if ua := r.Header.Get("User-Agent"); !strings.HasPrefix(ua, "langchainjs-openai/") || r.Header.Get("Authorization") != "Bearer sk-langchain-client" {
			t.Fatalf("upstream call %d: user agent %q, auth %q", i, ua, r.Header.Get("Authorization"))
		}
	}
	checkFrameworkEpisode(t, e)
}

// TestFrameworkAISDK: the Vercel AI SDK (`ai` with @ai-sdk/openai's chat model):
// generateText, then streamText with the first's response messages as history, each
// looping with stopWhen: stepCountIs(5).
func TestFrameworkAISDK(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	e := newEnv(t, nil)
	out := gjson.ParseBytes(nodeScript(t, "ai-sdk-agent.mjs", "CAMPROXY_BASE_URL="+e.base+"/v1",
		"CAMPROXY_TASK="+frameworkTask, "CAMPROXY_FOLLOWUP="+frameworkFollowup, "OPENAI_API_KEY=sk-ai-sdk-client"))
	captureSent(t, "ai-sdk", out)
	checkFrameworkRun(t, e, out)

	for _, run := range []string{"generate", "stream"} {
		steps := out.Get(run + ".steps").Array()
		if len(steps) != 2 || steps[0].Get("finishReason").String() != "tool-calls" || steps[0].Get("toolCalls.0").String() != "lookup_flight" ||
			steps[1].Get("finishReason").String() != "stop" {
			t.Fatalf("%s steps: %s", run, out.Get(run+".steps").Raw)
		}
	}
	if errs := out.Get("stream.errors").Array(); len(errs) > 0 {
		t.Fatalf("stream errors: %s", out.Get("stream.errors").Raw)
	}
	// Streamed: four text deltas, the tool input in five fragments, and the usage of
	// both streamed steps from their include_usage chunks (42 + 42 prompt tokens).
	if n := out.Get("stream.textDeltas").Int(); n != 4 {
		t.Fatalf("streamed text deltas %d, want 4 (one per upstream chunk)", n)
	}
	if n := out.Get("stream.parts.tool-input-delta").Int(); n != 5 {
		t.Fatalf("streamed tool-input deltas %d, want 5: %s", n, out.Get("stream.parts").Raw)
	}
	if u := out.Get("stream.usage"); u.Get("inputTokens").Int() != 84 || u.Get("outputTokens").Int() != 14 {
		t.Fatalf("streamed total usage %s", u.Raw)
	}
	for i, r := range e.up.Requests() {
		b := gjson.ParseBytes(r.Body)
		// The AI SDK always sends tool_choice "auto" and never parallel_tool_calls.
		if b.Get("tool_choice").String() != "auto" || b.Get("parallel_tool_calls").Exists() {
			t.Fatalf("upstream call %d: tool_choice %s parallel_tool_calls %s", i, b.Get("tool_choice").Raw, b.Get("parallel_tool_calls").Raw)
		}
		if r.Header.Get("Authorization") != "Bearer sk-ai-sdk-client" || !strings.Contains(r.Header.Get("User-Agent"), "ai-sdk/provider-utils/") {
			t.Fatalf("upstream call %d: user agent %q, auth %q", i, r.Header.Get("User-Agent"), r.Header.Get("Authorization"))
		}
	}
	checkFrameworkEpisode(t, e)
}

// TestFrameworkOpenAINodeUsage: the official `openai` npm client streams with
// stream_options.include_usage; the usage chunk (no choices) arrives through camproxy
// as the last chunk, and each recorded step carries its call's token counts.
func TestFrameworkOpenAINodeUsage(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	e := newEnv(t, nil)
	const task = "Rebook passenger Mia Li onto the earliest flight to Boston."
	out := gjson.ParseBytes(nodeScript(t, "openai-chat.mjs", "CAMPROXY_BASE_URL="+e.base+"/v1", "CAMPROXY_TASK="+task))
	reqs := e.up.Requests()
	if len(reqs) != 2 || !gjson.GetBytes(reqs[1].Body, "stream_options.include_usage").Bool() {
		t.Fatalf("%d upstream calls; streamed call's stream_options %s", len(reqs), gjson.GetBytes(reqs[len(reqs)-1].Body, "stream_options").Raw)
	}
	uc := out.Get("usageChunk")
	if !uc.Exists() || uc.Get("index").Int() != out.Get("chunks").Int()-1 || uc.Get("choices").Int() != 0 {
		t.Fatalf("usage chunk %s of %d chunks", uc.Raw, out.Get("chunks").Int())
	}
	if u := out.Get("usage"); u.Get("prompt_tokens").Int() != 42 || u.Get("completion_tokens").Int() != 7 || u.Get("total_tokens").Int() != 49 {
		t.Fatalf("streamed usage %s", u.Raw)
	}
	firstPrompt := out.Get("firstUsage.prompt_tokens").Int()
	if firstPrompt != int64(len(reqs[0].Body)/4) { // what the scripted upstream counts
		t.Fatalf("first call's usage %s, upstream body %d bytes", out.Get("firstUsage").Raw, len(reqs[0].Body))
	}

	buf, steps := recordedBuffer(t, e)
	if len(buf.Episodes) != 1 || len(steps) != 2 {
		t.Fatalf("%d episodes, %d steps recorded", len(buf.Episodes), len(steps))
	}
	want := map[int][2]int64{0: {firstPrompt, 7}, 1: {42, 7}}
	for _, s := range steps {
		w := want[s.Turn]
		if s.Usage.InputTokens != w[0] || s.Usage.OutputTokens != w[1] || s.Status != 200 {
			t.Fatalf("step %d: usage %+v status %d, want %v", s.Turn, s.Usage, s.Status, w)
		}
	}
	if ep := buf.Episodes[0]; ep.Usage.InputTokens != firstPrompt+42 || ep.Usage.OutputTokens != 14 || ep.Steps != 2 {
		t.Fatalf("episode usage %+v over %d steps", ep.Usage, ep.Steps)
	}
}

// checkFrameworkRun checks what every framework's conversation must look like from
// both ends: the client's four calls, answered 200, each reaching the upstream as the
// client's exact bytes plus the context right after the task; the task message
// byte-identical on every call (one context for the episode, one CAM call); camproxy
// answering miss then episode with one episode id; the tool run twice; the
// follow-up's calls streamed.
func checkFrameworkRun(t *testing.T, e *env, out gjson.Result) {
	t.Helper()
	reqs := e.up.Requests()
	sent := out.Get("sent").Array()
	if len(reqs) != len(frameworkCalls) || len(sent) != len(frameworkCalls) {
		t.Fatalf("%d upstream calls, %d client calls, want %d: %s", len(reqs), len(sent), len(frameworkCalls), out.Raw)
	}
	wantCtx := "Guidance for: " + frameworkTask + "\n- check the policy first."
	var taskMsg string
	for i, r := range reqs {
		if p := out.Get("paths").Array()[i].String(); p != "/v1/chat/completions" || r.Path != "/v1/chat/completions" {
			t.Fatalf("call %d went to %s (upstream %s): chat completions only", i, p, r.Path)
		}
		if s := out.Get("status").Array()[i].Int(); s != 200 {
			t.Fatalf("call %d: status %d", i, s)
		}
		assertSpliced(t, []byte(sent[i].String()), r.Body, frameworkTask, wantCtx)
		body := gjson.ParseBytes(r.Body)
		var firstUser gjson.Result
		for _, m := range body.Get("messages").Array() {
			if m.Get("role").String() == "user" {
				firstUser = m
				break
			}
		}
		if i == 0 {
			taskMsg = firstUser.Raw
			if firstUser.Get("content").String() != frameworkTask+"\n\n"+wantCtx {
				t.Fatalf("task message %s", firstUser.Raw)
			}
		} else if firstUser.Raw != taskMsg {
			t.Fatalf("call %d: task message changed:\n%s\nwas\n%s", i, firstUser.Raw, taskMsg)
		}
		if body.Get("stream").Bool() != frameworkCalls[i].stream {
			t.Fatalf("call %d: stream %v, want %v", i, body.Get("stream").Bool(), frameworkCalls[i].stream)
		}
		if frameworkCalls[i].stream && !body.Get("stream_options.include_usage").Bool() {
			t.Fatalf("call %d: streamed without include_usage: %s", i, body.Get("stream_options").Raw)
		}
	}
	if n := e.cam.Calls(); n != 1 {
		t.Fatalf("CAM calls %d, want 1 for one episode", n)
	}

	h := out.Get("headers").Array()
	eps := out.Get("episodes").Array()
	for i := range frameworkCalls {
		want := "episode"
		if i == 0 {
			want = "miss"
		}
		if h[i].String() != want || eps[i].String() == "" || eps[i].String() != eps[0].String() {
			t.Fatalf("call %d: X-CAM-Context %q episode %q (headers %s, episodes %s)", i, h[i].String(), eps[i].String(), out.Get("headers").Raw, out.Get("episodes").Raw)
		}
	}

	// The tool ran once per request, on the arguments the model streamed or sent, and
	// each result went back to the model under the id of its call.
	if out.Get("toolCalls").Int() != 2 {
		t.Fatalf("tool calls %d: %s", out.Get("toolCalls").Int(), out.Raw)
	}
	for _, in := range out.Get("toolInputs").Array() {
		if in.Get("query").String() != "flight status" || in.Get("limit").Int() != 3 {
			t.Fatalf("tool input %s", in.Raw)
		}
	}
	last := gjson.ParseBytes(reqs[len(reqs)-1].Body).Get("messages").Array()
	var callIDs, resultIDs []string
	for _, m := range last {
		for _, c := range m.Get("tool_calls").Array() {
			callIDs = append(callIDs, c.Get("id").String())
		}
		if m.Get("role").String() == "tool" {
			resultIDs = append(resultIDs, m.Get("tool_call_id").String())
		}
	}
	if len(callIDs) != 2 || strings.Join(callIDs, ",") != strings.Join(resultIDs, ",") {
		t.Fatalf("tool calls %v, results %v", callIDs, resultIDs)
	}
	if a := out.Get("answers").Array(); len(a) != 2 || a[0].String() != "Done after 4 messages." || a[1].String() != "Done after 8 messages." {
		t.Fatalf("answers %s", out.Get("answers").Raw)
	}
}

// checkFrameworkEpisode shuts camproxy down and reads the replay buffer: the whole
// conversation is one episode with the one context, all four steps (200, turns 0..3)
// and the trajectory both requests made; the usage of the two plain calls (the
// scripted upstream's len(body)/4) and of the two streamed ones (their include_usage
// chunks, 42) is summed.
func checkFrameworkEpisode(t *testing.T, e *env) {
	t.Helper()
	reqs := e.up.Requests()
	buf, steps := recordedBuffer(t, e)
	if len(buf.Episodes) != 1 {
		t.Fatalf("%d episodes recorded, want 1", len(buf.Episodes))
	}
	ep := buf.Episodes[0]
	if ep.Steps != len(frameworkCalls) || len(steps) != len(frameworkCalls) {
		t.Fatalf("episode has %d steps (%d step events), want %d", ep.Steps, len(steps), len(frameworkCalls))
	}
	for _, s := range steps {
		if s.Status != 200 || s.EpisodeID != ep.ID {
			t.Fatalf("step %d: status %d episode %s (want %s)", s.Turn, s.Status, s.EpisodeID, ep.ID)
		}
	}
	if ep.Context != "Guidance for: "+frameworkTask+"\n- check the policy first." || ep.Task != frameworkTask || ep.Protocol != "openai" || ep.Arm != "cam" {
		t.Fatalf("episode task %q context %q protocol %q arm %q", ep.Task, ep.Context, ep.Protocol, ep.Arm)
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
	if ep.Messages[1].Content != frameworkTask || ep.Messages[5].Content != frameworkFollowup || ep.Messages[8].Content != "Done after 8 messages." {
		t.Fatalf("recorded messages %+v", ep.Messages)
	}
	wantIn := int64(len(reqs[0].Body)/4 + len(reqs[1].Body)/4 + 42 + 42)
	if ep.Usage.InputTokens != wantIn || ep.Usage.OutputTokens != 7*4 {
		t.Fatalf("episode usage %+v, want %d in, 28 out", ep.Usage, wantIn)
	}
}

// recordedBuffer shuts camproxy down (flushing the recorder) and reads its file sink
// both as episodes and as raw step events.
func recordedBuffer(t *testing.T, e *env) (*replay.Buffer, []*replay.StepEvent) {
	t.Helper()
	steps := recordedSteps(t, e)
	src, err := replay.OpenSource(context.Background(), e.cfg.Replay.Sinks[0])
	if err != nil {
		t.Fatal(err)
	}
	buf, err := replay.Read(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	return buf, steps
}
