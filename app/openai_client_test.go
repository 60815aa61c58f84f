package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"
)

// jsonText is s as it appears inside a JSON string (no quotes, no HTML escaping).
func jsonText(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	out := strings.TrimSpace(b.String())
	return out[1 : len(out)-1]
}

// TestOpenAIGoClient drives camproxy with the official openai-go client: a tool call
// (non-streaming), then the tool result and a streamed answer. The upstream must see
// the client's exact bytes with only the context inserted after the task.
func TestOpenAIGoClient(t *testing.T) {
	e := newEnv(t, nil)
	const task = "Change my flight ZFA04Y to the next day & keep \"economy\" <seat 12A>."
	wantCtx := "Guidance for: " + task + "\n- check the policy first."

	var sent [][]byte // bodies as the client put them on the wire
	client := openai.NewClient(option.WithBaseURL(e.base+"/v1"), option.WithAPIKey("sk-client-key"),
		keepSent(&sent), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model: "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are an airline agent."),
			openai.UserMessage(task),
		},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "lookup", Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}},
		})},
	}
	unknown := option.WithJSONSet("x_vendor_extension", map[string]any{"keep": []int{1, 2}, "nested": map[string]any{"z": true}})

	// Turn 1: non-streaming, the model calls a tool.
	var raw *http.Response
	resp, err := client.Chat.Completions.New(ctx, params, unknown, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	msg := resp.Choices[0].Message
	if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "lookup" || msg.ToolCalls[0].Function.Arguments != `{"query":"flight status","limit":3}` {
		t.Fatalf("tool call not relayed: %+v", msg.ToolCalls)
	}
	if got := raw.Header.Get("X-CAM-Context"); got != "miss" {
		t.Fatalf("X-CAM-Context = %q, want miss", got)
	}
	if raw.Header.Get("X-Request-Id") != "req_chat_1" || raw.Header.Get("X-Ratelimit-Remaining-Requests") != "99" {
		t.Fatalf("upstream response headers not relayed: %v", raw.Header)
	}
	episodeID := raw.Header.Get("X-CAM-Episode-Id")
	if episodeID == "" || raw.Header.Get("X-CAM-Arm") != "cam" {
		t.Fatalf("missing camproxy headers: %v", raw.Header)
	}
	assertSpliced(t, sent[0], e.up.Last().Body, task, wantCtx)
	up := e.up.Last()
	if up.Header.Get("Authorization") != "Bearer sk-client-key" {
		t.Fatalf("client auth not passed through: %q", up.Header.Get("Authorization"))
	}
	for k := range up.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-cam-") {
			t.Fatalf("camproxy header %s leaked upstream", k)
		}
	}

	// Turn 2: the tool result, streamed answer; same episode, same context.
	params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage(`{"status":"on time"}`, msg.ToolCalls[0].ID))
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, params, unknown, option.WithResponseInto(&raw))
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got := acc.Choices[0].Message.Content; got != "Done after 4 messages." {
		t.Fatalf("streamed answer = %q", got)
	}
	if acc.Usage.PromptTokens != 42 || chunks < 5 {
		t.Fatalf("usage %+v after %d chunks", acc.Usage, chunks)
	}
	if raw.Header.Get("X-CAM-Context") != "episode" || raw.Header.Get("X-CAM-Episode-Id") != episodeID {
		t.Fatalf("turn 2 headers: %v (want episode %s)", raw.Header, episodeID)
	}
	assertSpliced(t, sent[1], e.up.Last().Body, task, wantCtx)
	if e.cam.Calls() != 1 {
		t.Fatalf("CAM called %d times for one episode", e.cam.Calls())
	}
}

// TestOpenAIGoClientToolStream streams a tool call: argument fragments must reach the
// client intact and in order.
func TestOpenAIGoClientToolStream(t *testing.T) {
	e := newEnv(t, nil)
	client := openai.NewClient(option.WithBaseURL(e.base+"/v1"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Find flight status for UA 12")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "lookup", Parameters: shared.FunctionParameters{"type": "object"}})},
	})
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	calls := acc.Choices[0].Message.ToolCalls
	if len(calls) != 1 || calls[0].Function.Arguments != `{"query":"flight status","limit":3}` || calls[0].ID != "call_1" {
		t.Fatalf("streamed tool call = %+v", calls)
	}
	if acc.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("finish_reason %q", acc.Choices[0].FinishReason)
	}
	if !strings.Contains(gjson.GetBytes(e.up.Last().Body, "messages.0.content").String(), "Guidance for:") {
		t.Fatal("context not spliced into the streamed call")
	}
}

// assertSpliced checks the upstream received exactly the client's bytes, with the
// rendered context inserted right after the task text and nothing else changed.
func assertSpliced(t *testing.T, client, upstream []byte, task, ctx string) {
	t.Helper()
	anchor := jsonText(task)
	if bytes.Count(client, []byte(anchor)) != 1 {
		t.Fatalf("task text not found once in the client's body: %s", client)
	}
	want := bytes.Replace(client, []byte(anchor), []byte(anchor+jsonText("\n\n"+ctx)), 1)
	if !bytes.Equal(upstream, want) {
		t.Fatalf("upstream body differs from the client's body plus context\n got: %s\nwant: %s", upstream, want)
	}
	if !gjson.ValidBytes(upstream) {
		t.Fatal("upstream body is not valid JSON")
	}
}
