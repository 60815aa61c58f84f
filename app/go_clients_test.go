package app

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/tidwall/gjson"
	"github.com/tmc/langchaingo/llms"
	lcopenai "github.com/tmc/langchaingo/llms/openai"

	"github.com/camproxy/camproxy/replay/lake"
)

// The Go clients of the compatibility suite (issue 16): anthropic-sdk-go on the
// Messages route and langchaingo on the chat-completions route, each a real
// tool-calling loop (model → tool → model, then a streamed follow-up that loops the
// same way) unmodified but for its base URL. Each conversation is one episode with one
// CAM call, its task is the user's request, and the export holds the whole trajectory
// with tool calls in the OpenAI chat shape.

// exportedRows reads the replay buffer and exports it as JSONL (what `camproxy replay
// export` writes), parsed back: the trajectory as a training tool would see it.
func exportedRows(t *testing.T, e *env) []gjson.Result {
	t.Helper()
	buf, _ := recordedBuffer(t, e)
	var out bytes.Buffer
	if err := lake.ExportJSONL(&out, buf); err != nil {
		t.Fatal(err)
	}
	var rows []gjson.Result
	for _, line := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
		if len(line) > 0 {
			rows = append(rows, gjson.ParseBytes(line))
		}
	}
	return rows
}

// exportedRoles is an exported row's messages as role (+call for a tool call), with
// every tool call checked for the OpenAI chat shape: {id, type: "function", function:
// {name, arguments}} (or type "custom" with custom: {name, input}).
func exportedRoles(t *testing.T, row gjson.Result) string {
	t.Helper()
	var roles []string
	for i, m := range row.Get("messages").Array() {
		r := m.Get("role").String()
		for _, c := range m.Get("tool_calls").Array() {
			typ := c.Get("type").String()
			if c.Get("id").String() == "" || c.Get(typ+".name").String() == "" || (typ != "function" && typ != "custom") {
				t.Errorf("message %d: tool call not in the OpenAI chat shape: %s", i, c.Raw)
			}
			r += "+call"
		}
		roles = append(roles, r)
	}
	return strings.Join(roles, ",")
}

// toolCallNamed finds, in an exported row, the tool call named name and returns it
// and the tool message that answers it.
func toolCallNamed(row gjson.Result, name string) (call, result gjson.Result) {
	for _, m := range row.Get("messages").Array() {
		for _, c := range m.Get("tool_calls").Array() {
			if c.Get("function.name").String() == name || c.Get("custom.name").String() == name {
				call = c
			}
		}
		if call.Exists() && m.Get("role").String() == "tool" && m.Get("tool_call_id").String() == call.Get("id").String() {
			result = m
		}
	}
	return call, result
}

// TestAnthropicSDKGo: anthropic-sdk-go's Messages.New in a tool loop, then
// Messages.NewStreaming (accumulated) for a follow-up in the same history.
func TestAnthropicSDKGo(t *testing.T) {
	e, an := newAnthropicEnv(t, nil)
	client := anthropic.NewClient(option.WithBaseURL(e.base), option.WithAPIKey("sk-ant-go-client"), option.WithMaxRetries(0))
	ctx := context.Background()
	const task, followup = "Is flight UA12 on time? Passenger: Mia Li (économie, \"no fees\").", "Check it once more and tell me the gate."
	tools := []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "lookup_flight", Description: anthropic.String("Look up a flight."),
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"query": map[string]any{"type": "string"}}}}}}
	params := func(msgs []anthropic.MessageParam) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 512, Tools: tools, Messages: msgs,
			System: []anthropic.TextBlockParam{{Text: "You are an airline agent. Use lookup_flight before answering."}}}
	}
	msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(task))}
	toolRuns := 0
	// step answers one model message: a tool_use gets its tool_result appended.
	step := func(m *anthropic.Message) bool {
		msgs = append(msgs, m.ToParam())
		var results []anthropic.ContentBlockParamUnion
		for _, b := range m.Content {
			if u, ok := b.AsAny().(anthropic.ToolUseBlock); ok {
				toolRuns++
				if u.Name != "lookup_flight" || !strings.Contains(string(u.Input), "flight status") {
					t.Fatalf("tool_use %s %s", u.Name, u.Input)
				}
				results = append(results, anthropic.NewToolResultBlock(u.ID, `{"flight":"UA12","status":"on time","gate":"B12"}`, false))
			}
		}
		if len(results) == 0 {
			return false
		}
		msgs = append(msgs, anthropic.NewUserMessage(results...))
		return true
	}
	for i := 0; ; i++ {
		m, err := client.Messages.New(ctx, params(msgs))
		if err != nil {
			t.Fatalf("Messages.New: %v", err)
		}
		if !step(m) {
			if !strings.HasPrefix(m.Content[0].Text, "Done") {
				t.Fatalf("answer %+v", m.Content)
			}
			break
		}
		if i > 3 {
			t.Fatal("the tool loop does not end")
		}
	}
	msgs = append(msgs, anthropic.NewUserMessage(anthropic.NewTextBlock(followup)))
	for i := 0; ; i++ {
		stream := client.Messages.NewStreaming(ctx, params(msgs))
		var m anthropic.Message
		for stream.Next() {
			if err := m.Accumulate(stream.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		if !step(&m) {
			break
		}
		if i > 3 {
			t.Fatal("the streamed tool loop does not end")
		}
	}
	if toolRuns != 2 || len(an.Requests()) != 4 {
		t.Fatalf("%d tool runs, %d upstream calls; want 2 and 4", toolRuns, len(an.Requests()))
	}
	for i, r := range an.Requests() {
		if r.Header.Get("X-Api-Key") != "sk-ant-go-client" || !strings.Contains(r.Header.Get("User-Agent"), "Anthropic/Go") {
			t.Fatalf("call %d: key %q user agent %q", i, r.Header.Get("X-Api-Key"), r.Header.Get("User-Agent"))
		}
		if n := strings.Count(string(r.Body), "Guidance for: "); n != 1 {
			t.Fatalf("call %d: the context appears %d times: %s", i, n, r.Body)
		}
	}
	checkGoClientEpisode(t, e, task, "anthropic")
}

// TestLangChainGo: langchaingo's OpenAI model (llms.Model.GenerateContent with tools),
// a tool loop, then a streamed follow-up (WithStreamingFunc).
func TestLangChainGo(t *testing.T) {
	e := newEnv(t, nil)
	llm, err := lcopenai.New(lcopenai.WithBaseURL(e.base+"/v1"), lcopenai.WithToken("sk-langchaingo-client"), lcopenai.WithModel("gpt-4o"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const task, followup = "Is flight UA12 on time? Passenger: Mia Li (économie, \"no fees\").", "Check it once more and tell me the gate."
	tools := []llms.Tool{{Type: "function", Function: &llms.FunctionDefinition{Name: "lookup_flight", Description: "Look up a flight.",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}}}}}
	msgs := []llms.MessageContent{
		llms.TextParts(llms.ChatMessageTypeSystem, "You are an airline agent. Use lookup_flight before answering."),
		llms.TextParts(llms.ChatMessageTypeHuman, task),
	}
	toolRuns, streamed := 0, 0
	loop := func(opts ...llms.CallOption) string {
		for i := 0; i < 4; i++ {
			resp, err := llm.GenerateContent(ctx, msgs, append(opts, llms.WithTools(tools))...)
			if err != nil {
				t.Fatalf("GenerateContent: %v", err)
			}
			ch := resp.Choices[0]
			if len(ch.ToolCalls) == 0 {
				msgs = append(msgs, llms.TextParts(llms.ChatMessageTypeAI, ch.Content))
				return ch.Content
			}
			ai := llms.MessageContent{Role: llms.ChatMessageTypeAI}
			for _, tc := range ch.ToolCalls {
				ai.Parts = append(ai.Parts, tc)
			}
			msgs = append(msgs, ai)
			for _, tc := range ch.ToolCalls {
				toolRuns++
				if tc.FunctionCall.Name != "lookup_flight" || !json.Valid([]byte(tc.FunctionCall.Arguments)) {
					t.Fatalf("tool call %+v", tc.FunctionCall)
				}
				msgs = append(msgs, llms.MessageContent{Role: llms.ChatMessageTypeTool, Parts: []llms.ContentPart{
					llms.ToolCallResponse{ToolCallID: tc.ID, Name: tc.FunctionCall.Name, Content: `{"flight":"UA12","status":"on time","gate":"B12"}`}}})
			}
		}
		t.Fatal("the tool loop does not end")
		return ""
	}
	if a := loop(); !strings.HasPrefix(a, "Done after") {
		t.Fatalf("answer %q", a)
	}
	msgs = append(msgs, llms.TextParts(llms.ChatMessageTypeHuman, followup))
	a := loop(llms.WithStreamingFunc(func(_ context.Context, chunk []byte) error { streamed++; return nil }))
	if !strings.HasPrefix(a, "Done after") || streamed == 0 {
		t.Fatalf("streamed answer %q in %d chunks", a, streamed)
	}
	reqs := e.up.Requests()
	if toolRuns != 2 || len(reqs) != 4 {
		t.Fatalf("%d tool runs, %d upstream calls; want 2 and 4", toolRuns, len(reqs))
	}
	for i, r := range reqs {
		if r.Header.Get("Authorization") != "Bearer sk-langchaingo-client" || gjson.GetBytes(r.Body, "stream").Bool() != (i >= 2) {
			t.Fatalf("call %d: auth %q stream %v", i, r.Header.Get("Authorization"), gjson.GetBytes(r.Body, "stream").Bool())
		}
		if n := strings.Count(string(r.Body), "Guidance for: "); n != 1 {
			t.Fatalf("call %d: the context appears %d times: %s", i, n, r.Body)
		}
	}
	checkGoClientEpisode(t, e, task, "openai")
}

// checkGoClientEpisode: one episode of four steps whose task is the user's request,
// with the CAM's one context, and an export holding system, task, both tool loops and
// the follow-up, tool calls in the OpenAI shape.
func checkGoClientEpisode(t *testing.T, e *env, task, proto string) {
	t.Helper()
	if n := e.cam.Calls(); n != 1 {
		t.Fatalf("CAM calls %d, want 1", n)
	}
	buf, steps := recordedBuffer(t, e)
	if len(buf.Episodes) != 1 || len(steps) != 4 {
		t.Fatalf("%d episodes, %d steps; want 1 and 4", len(buf.Episodes), len(steps))
	}
	ep := buf.Episodes[0]
	wantCtx := "Guidance for: " + task + "\n- check the policy first."
	if ep.Task != task || ep.Context != wantCtx || ep.Protocol != proto || ep.Steps != 4 {
		t.Fatalf("episode task %q context %q protocol %q steps %d", ep.Task, ep.Context, ep.Protocol, ep.Steps)
	}
	for _, s := range steps {
		if s.Status != 200 || s.Error != "" || s.Response == nil {
			t.Fatalf("step %d: status %d error %q response %v", s.Turn, s.Status, s.Error, s.Response != nil)
		}
	}
	rows := exportedRows(t, e)
	if len(rows) != 1 || rows[0].Get("task").String() != task || rows[0].Get("turns").Int() != 4 {
		t.Fatalf("export: %d rows, task %q turns %d", len(rows), rows[0].Get("task").String(), rows[0].Get("turns").Int())
	}
	const want = "system,user,assistant+call,tool,assistant,user,assistant+call,tool,assistant"
	if got := exportedRoles(t, rows[0]); got != want {
		t.Fatalf("exported trajectory %s, want %s", got, want)
	}
	call, result := toolCallNamed(rows[0], "lookup_flight")
	if !call.Exists() || !strings.Contains(result.Get("content").String(), "on time") {
		t.Fatalf("the tool call and its result are not in the export: %s", rows[0].Get("messages").Raw)
	}
}
