package app

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/replay"
)

// camproxy signs with these; the agent signs with its own, which the fake would refuse.
const (
	proxyAccessKey = "AKIDCAMPROXYSIGNER"
	proxySecretKey = "camproxy-signing-secret"
)

type bedrockEnv struct {
	*env
	br      *testkit.Bedrock
	headers *headerLog
	client  *bedrockruntime.Client
}

// headerLog keeps the response headers the SDK saw (it exposes none of camproxy's).
//
// It also sends the request body from memory. smithy-go closes the request body as
// soon as net/http's Do returns, while net/http's connection writer may still read
// it once more after sending it (a check for bytes past Content-Length; golang/go
// #51907): against a server as quick as camproxy on loopback, that read finds the
// body closed (io.EOF), and net/http closes the connection — under a ConverseStream
// still being read ("use of closed network connection", about 1 call in 30 here).
// Real Bedrock answers too slowly to lose that race; a Go agent talking to a camproxy
// sidecar can lose it, and the same in-memory body avoids it there (docs/api.md).
type headerLog struct {
	mu sync.Mutex
	h  []http.Header
}

func (l *headerLog) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		l.mu.Lock()
		l.h = append(l.h, resp.Header.Clone())
		l.mu.Unlock()
	}
	return resp, err
}

func (l *headerLog) last() http.Header {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.h[len(l.h)-1]
}

func newBedrockEnv(t *testing.T) *bedrockEnv { return newBedrockEnvWith(t, nil) }

// newBedrockEnvWith is newBedrockEnv with more of the config changed by mutate.
func newBedrockEnvWith(t *testing.T, mutate func(*config.Config)) *bedrockEnv {
	t.Setenv("AWS_ACCESS_KEY_ID", proxyAccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", proxySecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	br := testkit.NewBedrock(proxyAccessKey, proxySecretKey, "us-east-1")
	t.Cleanup(br.Close)
	e := newEnv(t, func(c *config.Config) {
		c.Upstreams["bedrock"].Endpoint = br.URL
		if mutate != nil {
			mutate(c)
		}
	})
	hl := &headerLog{}
	client := bedrockruntime.New(bedrockruntime.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(e.base),
		Credentials:      credentials.NewStaticCredentialsProvider("AKIDTHEAGENT", "the-agents-own-secret", ""),
		HTTPClient:       hl,
		RetryMaxAttempts: 1,
	})
	return &bedrockEnv{env: e, br: br, headers: hl, client: client}
}

const claudeID = "us.anthropic.claude-3-5-sonnet-20241022-v2:0"

func lookupTool() *types.ToolConfiguration {
	return &types.ToolConfiguration{Tools: []types.Tool{&types.ToolMemberToolSpec{Value: types.ToolSpecification{
		Name:        aws.String("lookup"),
		InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(map[string]any{"type": "object"})},
	}}}}
}

// TestBedrockConverseSDK: the real bedrockruntime client, Converse then ConverseStream
// with the tool result, through camproxy to a Bedrock that checks camproxy's SigV4.
func TestBedrockConverseSDK(t *testing.T) {
	b := newBedrockEnv(t)
	ctx := context.Background()
	const task = "Find the status of flight UA 12 & tell me \"when\" it lands."
	msgs := []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: task}}}}
	out, err := b.client.Converse(ctx, &bedrockruntime.ConverseInput{
		ModelId:    aws.String(claudeID),
		System:     []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: "You are an airline agent."}},
		Messages:   msgs,
		ToolConfig: lookupTool(),
	})
	if err != nil {
		t.Fatal(err)
	}
	last := b.br.Last()
	if last.AuthError != "" || last.RawPath != "/model/us.anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse" || last.Model != claudeID {
		t.Fatalf("upstream saw path %q model %q auth error %q", last.RawPath, last.Model, last.AuthError)
	}
	wantTask := task + "\n\nGuidance for: " + task + "\n- check the policy first."
	if got := gjson.GetBytes(last.Body, "messages.0.content.0.text").String(); got != wantTask {
		t.Fatalf("task at the upstream = %q", got)
	}
	h := b.headers.last()
	if h.Get("X-Cam-Context") != "miss" || h.Get("X-Cam-Episode-Id") == "" {
		t.Fatalf("camproxy headers: %v", h)
	}
	msg := out.Output.(*types.ConverseOutputMemberMessage).Value
	use, ok := msg.Content[0].(*types.ContentBlockMemberToolUse)
	if !ok || aws.ToString(use.Value.Name) != "lookup" {
		t.Fatalf("tool use not relayed: %#v", msg.Content)
	}

	// Turn 2: the tool result, streamed; every event in order, as sent.
	msgs = append(msgs, msg, types.Message{Role: types.ConversationRoleUser, Content: []types.ContentBlock{
		&types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{ToolUseId: use.Value.ToolUseId,
			Content: []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: "on time"}}}}}})
	got := make(chan string, 64)
	read := make(chan struct{}) // closed when the client stopped reading, whyever
	b.br.BeforeEvent = func(i int) {
		if i == 0 {
			return
		}
		select { // event i-1 must have reached the client before event i is sent
		case <-got:
		case <-read: // the client's error (or end) is reported by the test
		case <-time.After(testkit.Patience(t)):
			t.Errorf("event %d was not relayed before event %d was due", i-1, i)
		}
	}
	stream, err := b.client.ConverseStream(ctx, &bedrockruntime.ConverseStreamInput{
		ModelId: aws.String(claudeID), Messages: msgs, ToolConfig: lookupTool(),
		System: []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: "You are an airline agent."}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var text strings.Builder
	for ev := range stream.GetStream().Events() {
		switch v := ev.(type) {
		case *types.ConverseStreamOutputMemberMessageStart:
			kinds = append(kinds, "messageStart")
		case *types.ConverseStreamOutputMemberContentBlockDelta:
			kinds = append(kinds, "contentBlockDelta")
			if d, ok := v.Value.Delta.(*types.ContentBlockDeltaMemberText); ok {
				text.WriteString(d.Value)
			}
		case *types.ConverseStreamOutputMemberContentBlockStop:
			kinds = append(kinds, "contentBlockStop")
		case *types.ConverseStreamOutputMemberMessageStop:
			kinds = append(kinds, "messageStop")
		case *types.ConverseStreamOutputMemberMetadata:
			kinds = append(kinds, "metadata")
		}
		got <- ""
	}
	close(read)
	if err := stream.GetStream().Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != "Done after 3 messages." {
		t.Fatalf("streamed text %q", text.String())
	}
	k := strings.Join(kinds, ",")
	if !strings.HasPrefix(k, "messageStart,contentBlockDelta") || !strings.HasSuffix(k, "contentBlockStop,messageStop,metadata") {
		t.Fatalf("event order: %s", k)
	}
	if h := b.headers.last(); h.Get("X-Cam-Context") != "episode" {
		t.Fatalf("turn 2 context header %q", h.Get("X-Cam-Context"))
	}
	if got := gjson.GetBytes(b.br.Last().Body, "messages.0.content.0.text").String(); got != wantTask {
		t.Fatalf("turn 2 task = %q", got)
	}
	if b.cam.Calls() != 1 {
		t.Fatalf("CAM calls %d", b.cam.Calls())
	}

	// The episode is recorded in the OpenAI shape.
	ep := readEpisode(t, b.env, h.Get("X-Cam-Episode-Id"))
	want := []protocol.Message{
		{Role: "system", Content: "You are an airline agent."},
		{Role: "user", Content: task},
		{Role: "assistant", ToolCalls: []protocol.ToolCall{{ID: aws.ToString(use.Value.ToolUseId), Name: "lookup", Arguments: `{"query":"flight status","limit":3}`}}},
		{Role: "tool", ToolCallID: aws.ToString(use.Value.ToolUseId), Content: "on time"},
		{Role: "assistant", Content: "Done after 3 messages."},
	}
	assertMessages(t, ep.Messages, want)
	if ep.Protocol != "bedrock" || ep.Model != claudeID {
		t.Fatalf("episode protocol %q model %q", ep.Protocol, ep.Model)
	}
}

// readEpisode shuts camproxy down (flushing the recorder) and reads one episode back.
func readEpisode(t *testing.T, e *env, id string) *replay.Episode {
	t.Helper()
	ctx := context.Background() // no deadline of its own: a hang meets go test's -timeout
	if err := e.app.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	src, err := replay.OpenSource(ctx, e.cfg.Replay.Sinks[0])
	if err != nil {
		t.Fatal(err)
	}
	buf, err := replay.Read(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	ep := episodeOf(buf, id)
	if ep == nil {
		t.Fatalf("episode %s not recorded", id)
	}
	return ep
}

func assertMessages(t *testing.T, got, want []protocol.Message) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d messages recorded, want %d:\n%+v", len(got), len(want), got)
	}
	for i := range want {
		if !sameMessage(got[i], want[i]) {
			t.Fatalf("message %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// TestBedrockInvokeSDK: InvokeModel and InvokeModelWithResponseStream with a Claude
// body, addressed by a full inference-profile ARN.
func TestBedrockInvokeSDK(t *testing.T) {
	b := newBedrockEnv(t)
	ctx := context.Background()
	arn := "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-haiku-20240307-v1:0"
	body := []byte(`{"anthropic_version":"bedrock-2023-05-31","max_tokens":256,"system":"You are an airline agent.","messages":[{"role":"user","content":[{"type":"text","text":"Cancel booking ABC123"}]}],"tools":[{"name":"lookup","input_schema":{"type":"object"}}]}`)
	out, err := b.client.InvokeModel(ctx, &bedrockruntime.InvokeModelInput{ModelId: aws.String(arn), Body: body, ContentType: aws.String("application/json")})
	if err != nil {
		t.Fatal(err)
	}
	last := b.br.Last()
	if last.Model != arn || !strings.Contains(last.RawPath, "inference-profile%2Fus.anthropic") || last.AuthError != "" {
		t.Fatalf("ARN routing: raw %q model %q auth %q", last.RawPath, last.Model, last.AuthError)
	}
	if got := gjson.GetBytes(last.Body, "messages.0.content.0.text").String(); !strings.HasPrefix(got, "Cancel booking ABC123\n\nGuidance for: Cancel booking ABC123") {
		t.Fatalf("invoke task = %q", got)
	}
	if gjson.GetBytes(out.Body, "content.0.type").String() != "tool_use" {
		t.Fatalf("invoke answer %s", out.Body)
	}
	stream, err := b.client.InvokeModelWithResponseStream(ctx, &bedrockruntime.InvokeModelWithResponseStreamInput{
		ModelId: aws.String(arn), Body: body, ContentType: aws.String("application/json")})
	if err != nil {
		t.Fatal(err)
	}
	var types_ []string
	for ev := range stream.GetStream().Events() {
		if c, ok := ev.(*types.ResponseStreamMemberChunk); ok {
			types_ = append(types_, gjson.GetBytes(c.Value.Bytes, "type").String())
		}
	}
	if err := stream.GetStream().Err(); err != nil {
		t.Fatal(err)
	}
	if k := strings.Join(types_, ","); !strings.HasPrefix(k, "message_start,content_block_start") || !strings.HasSuffix(k, "message_delta,message_stop") {
		t.Fatalf("chunk events: %s", k)
	}
	if h := b.headers.last(); h.Get("X-Cam-Context") == "" {
		t.Fatal("no X-CAM-Context on the invoke stream")
	}
}

// TestBedrockErrors: the SDK surfaces camproxy's and the upstream's errors as AWS errors.
func TestBedrockErrors(t *testing.T) {
	b := newBedrockEnv(t)
	ctx := context.Background()
	// Invalid JSON on Converse: camproxy answers in the AWS shape.
	resp, err := http.Post(b.base+"/model/"+strings.ReplaceAll(claudeID, ":", "%3A")+"/converse", "application/json", strings.NewReader(`{"messages":[`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || resp.Header.Get("X-Amzn-Errortype") != "ValidationException" || !strings.Contains(gjson.GetBytes(body, "message").String(), "JSON") {
		t.Fatalf("invalid Converse JSON: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	// An InvokeModel body camproxy cannot read goes upstream untouched; Bedrock's own
	// error reaches the SDK.
	_, err = b.client.InvokeModel(ctx, &bedrockruntime.InvokeModelInput{ModelId: aws.String(claudeID), Body: []byte(`{"anthropic_version":`), ContentType: aws.String("application/json")})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "ValidationException" || string(b.br.Last().Body) != `{"anthropic_version":` {
		t.Fatalf("unreadable invoke body: %v", err)
	}
	if b.headers.last().Get("X-Cam-Context") != "skip" {
		t.Fatalf("unreadable invoke body: X-CAM-Context %q", b.headers.last().Get("X-Cam-Context"))
	}
	b.br.ReplyFn = func(string, string, gjson.Result) testkit.BedrockReply {
		return testkit.BedrockReply{Status: 429, ErrorMsg: "Too many requests, please wait before trying again."}
	}
	_, err = b.client.Converse(ctx, &bedrockruntime.ConverseInput{ModelId: aws.String(claudeID),
		Messages: []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: "hi"}}}}})
	if !errors.As(err, &ae) || ae.ErrorCode() != "ThrottlingException" {
		t.Fatalf("upstream throttling not relayed: %v", err)
	}
	b.br.ReplyFn = func(string, string, gjson.Result) testkit.BedrockReply {
		return testkit.BedrockReply{Content: "partial answer here", StreamException: "throttlingException", ErrorMsg: "slow down"}
	}
	stream, err := b.client.ConverseStream(ctx, &bedrockruntime.ConverseStreamInput{ModelId: aws.String(claudeID),
		Messages: []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: "stream please"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	for range stream.GetStream().Events() {
	}
	var te *types.ThrottlingException
	if err := stream.GetStream().Err(); !errors.As(err, &te) {
		t.Fatalf("exception frame not relayed to the SDK: %v", err)
	}
	// A model id that does not decode (net/http refuses to send one; write it raw).
	conn, err := net.Dial("tcp", b.app.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "POST /model/bad%ZZid/converse HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 || resp.Header.Get("X-Amzn-Errortype") != "ValidationException" {
		t.Fatalf("undecodable model id: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestBedrockAPIKeyPassesThrough: a Bedrock API key is the client's credential and
// reaches Bedrock untouched (no re-signing).
func TestBedrockAPIKeyPassesThrough(t *testing.T) {
	b := newBedrockEnv(t)
	b.br.APIKey = "bedrock-api-key-123"
	req, _ := http.NewRequest(http.MethodPost, b.base+"/model/"+strings.ReplaceAll(claudeID, ":", "%3A")+"/converse",
		strings.NewReader(`{"messages":[{"role":"user","content":[{"text":"hello"}]}]}`))
	req.Header.Set("Authorization", "Bearer bedrock-api-key-123")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || b.br.Last().Header.Get("Authorization") != "Bearer bedrock-api-key-123" {
		t.Fatalf("API key call: %d, upstream auth %q (%s)", resp.StatusCode, b.br.Last().Header.Get("Authorization"), b.br.Last().AuthError)
	}
}
