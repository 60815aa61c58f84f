package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// Call is a tool call the model made; Args is its JSON arguments.
type Call struct {
	ID, Name, Args string
}

// Result answers one Call.
type Result struct {
	CallID, Name, Content string
}

// Message is one turn of the reflection conversation, whatever the API.
type Message struct {
	Role    string   // "user" or "assistant"
	Text    string   // may be empty when Calls or Results are not
	Calls   []Call   // assistant: the tools it called
	Results []Result // user: the results of the previous assistant turn's calls, before Text
}

// Request is one model call.
type Request struct {
	System      string
	Messages    []Message
	Tools       []ToolSpec
	NoTools     bool // ask for a text answer (OpenAI: tool_choice "none"; Bedrock has no such choice)
	MaxTokens   int  // 0 = the server's default
	Temperature *float64
}

// Usage counts tokens.
type Usage struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
}

func (u *Usage) add(v Usage) { u.Input += v.Input; u.Output += v.Output }

// Reply is what the model answered.
type Reply struct {
	Text  string
	Calls []Call
	Usage Usage
}

// Model is a chat model with tool calling.
type Model interface {
	Chat(ctx context.Context, req *Request) (*Reply, error)
}

// ModelOptions configure NewModel.
type ModelOptions struct {
	// BaseURL: OpenAI — the API base ("" = https://api.openai.com/v1; vLLM:
	// http://host:8000/v1); Bedrock — the endpoint ("" = the regional one).
	BaseURL string
	APIKey  string       // OpenAI; "" = a placeholder (vLLM ignores it)
	Region  string       // Bedrock; "" = the AWS config's, else us-east-1
	HTTP    *http.Client // nil = a plain client
	// AWSCredentials overrides the AWS default credential chain (tests).
	AWSCredentials aws.CredentialsProvider
}

// ErrBadModel is wrapped by NewModel's errors about the model spec.
var ErrBadModel = errors.New("bad model")

// ParseModel splits "openai/NAME" or "bedrock/MODEL_ID" (NAME may hold slashes).
func ParseModel(spec string) (provider, name string, err error) {
	provider, name, ok := strings.Cut(spec, "/")
	if !ok || name == "" || (provider != "openai" && provider != "bedrock") {
		return "", "", fmt.Errorf("%w %q: want openai/NAME or bedrock/MODEL_ID", ErrBadModel, spec)
	}
	return provider, name, nil
}

// NewModel makes the client that --model names. It makes no network call.
func NewModel(ctx context.Context, spec string, o ModelOptions) (Model, error) {
	provider, name, err := ParseModel(spec)
	if err != nil {
		return nil, err
	}
	hc := o.HTTP
	if hc == nil {
		hc = &http.Client{}
	}
	if provider == "openai" {
		base := o.BaseURL
		if base == "" {
			base = "https://api.openai.com/v1"
		}
		key := o.APIKey
		if key == "" {
			key = "none"
		}
		// NewChatCompletionService does not read OPENAI_* from the environment, and
		// retries are ours (they count, and honour retry-after the same way for both APIs).
		chat := openai.NewChatCompletionService(option.WithBaseURL(base), option.WithAPIKey(key),
			option.WithHTTPClient(hc), option.WithMaxRetries(0))
		return &openAIModel{chat: chat, model: name}, nil
	}
	var loadOpts []func(*awsconfig.LoadOptions) error
	if o.Region != "" {
		loadOpts = append(loadOpts, awsconfig.WithRegion(o.Region))
	}
	if o.AWSCredentials != nil {
		loadOpts = append(loadOpts, awsconfig.WithCredentialsProvider(o.AWSCredentials))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("bedrock: AWS config: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	client := bedrockruntime.NewFromConfig(cfg, func(bo *bedrockruntime.Options) {
		if o.BaseURL != "" {
			bo.BaseEndpoint = aws.String(o.BaseURL)
		}
		bo.HTTPClient = hc
		bo.Retryer = aws.NopRetryer{}
	})
	return &bedrockModel{client: client, model: name}, nil
}

// openAIModel calls an OpenAI-compatible chat completions API.
type openAIModel struct {
	chat  openai.ChatCompletionService
	model string
}

func (m *openAIModel) Chat(ctx context.Context, req *Request) (*Reply, error) {
	p := openai.ChatCompletionNewParams{Model: m.model}
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	for _, msg := range req.Messages {
		if msg.Role == "assistant" {
			a := openai.ChatCompletionAssistantMessageParam{}
			if msg.Text != "" {
				a.Content.OfString = openai.String(msg.Text)
			}
			for _, c := range msg.Calls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: c.Args},
					},
				})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
			continue
		}
		for _, r := range msg.Results {
			p.Messages = append(p.Messages, openai.ToolMessage(r.Content, r.CallID))
		}
		if msg.Text != "" {
			p.Messages = append(p.Messages, openai.UserMessage(msg.Text))
		}
	}
	for _, t := range req.Tools {
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: t.Name, Description: openai.String(t.Description), Parameters: shared.FunctionParameters(t.Schema),
		}))
	}
	if req.NoTools && len(req.Tools) > 0 {
		p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
	}
	if req.MaxTokens > 0 {
		p.MaxCompletionTokens = openai.Int(int64(req.MaxTokens))
	}
	if req.Temperature != nil {
		p.Temperature = openai.Float(*req.Temperature)
	}
	res, err := m.chat.New(ctx, p)
	if err != nil {
		return nil, err
	}
	if len(res.Choices) == 0 {
		return nil, errors.New("openai: the answer has no choices")
	}
	msg := res.Choices[0].Message
	rep := &Reply{Text: msg.Content, Usage: Usage{Input: res.Usage.PromptTokens, Output: res.Usage.CompletionTokens}}
	for i, tc := range msg.ToolCalls {
		id := tc.ID
		if id == "" {
			id = "call_" + strconv.Itoa(i)
		}
		rep.Calls = append(rep.Calls, Call{ID: id, Name: tc.Function.Name, Args: tc.Function.Arguments})
	}
	return rep, nil
}

// bedrockModel calls Bedrock Converse with tool use.
type bedrockModel struct {
	client *bedrockruntime.Client
	model  string
}

func (m *bedrockModel) Chat(ctx context.Context, req *Request) (*Reply, error) {
	in := &bedrockruntime.ConverseInput{ModelId: aws.String(m.model)}
	if req.System != "" {
		in.System = []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: req.System}}
	}
	for _, msg := range req.Messages {
		var blocks []types.ContentBlock
		role := types.ConversationRoleUser
		if msg.Role == "assistant" {
			role = types.ConversationRoleAssistant
		}
		// Tool results first: Bedrock wants them to open the user turn.
		for _, r := range msg.Results {
			blocks = append(blocks, &types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{
				ToolUseId: aws.String(r.CallID),
				Content:   []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: r.Content}},
			}})
		}
		if strings.TrimSpace(msg.Text) != "" { // Bedrock refuses blank text blocks
			blocks = append(blocks, &types.ContentBlockMemberText{Value: msg.Text})
		}
		for _, c := range msg.Calls {
			var input any = map[string]any{}
			if strings.TrimSpace(c.Args) != "" {
				if err := json.Unmarshal([]byte(c.Args), &input); err != nil {
					input = map[string]any{}
				}
			}
			blocks = append(blocks, &types.ContentBlockMemberToolUse{Value: types.ToolUseBlock{
				ToolUseId: aws.String(c.ID), Name: aws.String(c.Name), Input: document.NewLazyDocument(input),
			}})
		}
		in.Messages = append(in.Messages, types.Message{Role: role, Content: blocks})
	}
	if len(req.Tools) > 0 {
		// Converse needs the tool config whenever the conversation holds tool use,
		// so it stays on the last turn too; the prompt asks for text there.
		tc := &types.ToolConfiguration{}
		for _, t := range req.Tools {
			tc.Tools = append(tc.Tools, &types.ToolMemberToolSpec{Value: types.ToolSpecification{
				Name: aws.String(t.Name), Description: aws.String(t.Description),
				InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(t.Schema)},
			}})
		}
		in.ToolConfig = tc
	}
	if req.MaxTokens > 0 || req.Temperature != nil {
		in.InferenceConfig = &types.InferenceConfiguration{}
		if req.MaxTokens > 0 {
			in.InferenceConfig.MaxTokens = aws.Int32(int32(min(req.MaxTokens, 1<<30)))
		}
		if req.Temperature != nil {
			in.InferenceConfig.Temperature = aws.Float32(float32(*req.Temperature))
		}
	}
	out, err := m.client.Converse(ctx, in)
	if err != nil {
		return nil, err
	}
	rep := &Reply{}
	if out.Usage != nil {
		rep.Usage = Usage{Input: int64(aws.ToInt32(out.Usage.InputTokens)), Output: int64(aws.ToInt32(out.Usage.OutputTokens))}
	}
	msg, ok := out.Output.(*types.ConverseOutputMemberMessage)
	if !ok {
		return nil, errors.New("bedrock: the answer holds no message")
	}
	var text []string
	for i, blk := range msg.Value.Content {
		switch b := blk.(type) {
		case *types.ContentBlockMemberText:
			text = append(text, b.Value)
		case *types.ContentBlockMemberToolUse:
			args := "{}"
			if b.Value.Input != nil {
				// The document's own JSON keeps numbers as numbers.
				if j, err := b.Value.Input.MarshalSmithyDocument(); err == nil && json.Valid(j) {
					args = string(j)
				}
			}
			id := aws.ToString(b.Value.ToolUseId)
			if id == "" {
				id = "tooluse_" + strconv.Itoa(i)
			}
			rep.Calls = append(rep.Calls, Call{ID: id, Name: aws.ToString(b.Value.Name), Args: args})
		}
	}
	rep.Text = strings.Join(text, "\n")
	return rep, nil
}

// RetryPolicy is how model calls are retried on 408/409/429/5xx, timeouts and
// connection errors.
type RetryPolicy struct {
	Retries int           // retries after the first attempt; default 5, < 0 = none
	Base    time.Duration // first backoff, doubled each retry (with jitter); default 1s
	Max     time.Duration // longest wait, retry-after included; default 1m
	Timeout time.Duration // one attempt's deadline; default 5m
}

func (p *RetryPolicy) defaults() {
	if p.Retries == 0 {
		p.Retries = 5
	}
	if p.Retries < 0 {
		p.Retries = 0
	}
	if p.Base <= 0 {
		p.Base = time.Second
	}
	if p.Max <= 0 {
		p.Max = time.Minute
	}
	if p.Timeout <= 0 {
		p.Timeout = 5 * time.Minute
	}
}

// httpStatus is the HTTP status and headers of an API error, if err is one.
func httpStatus(err error) (int, http.Header) {
	if oe, ok := errors.AsType[*openai.Error](err); ok {
		var h http.Header
		if oe.Response != nil {
			h = oe.Response.Header
		}
		return oe.StatusCode, h
	}
	if re, ok := errors.AsType[*awshttp.ResponseError](err); ok {
		var h http.Header
		if re.Response != nil && re.Response.Response != nil {
			h = re.Response.Header
		}
		return re.HTTPStatusCode(), h
	}
	return 0, nil
}

// retryable: throttling, server errors, and the network failing under us.
func retryable(err error, attemptTimedOut bool) bool {
	if attemptTimedOut {
		return true
	}
	if status, _ := httpStatus(err); status != 0 {
		return status == 408 || status == 409 || status == 429 || status >= 500
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "connection reset") || strings.Contains(s, "unexpected EOF") ||
		strings.Contains(s, "connection refused") || strings.Contains(s, "broken pipe")
}

// retryAfter reads retry-after-ms (OpenAI) or Retry-After (seconds or an HTTP date).
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
			return time.Duration(s * float64(time.Second)), true
		}
		if t, err := http.ParseTime(v); err == nil {
			return max(0, t.Sub(now)), true
		}
	}
	return 0, false
}

// backoff is the wait before retry n (from 1): Base·2^(n-1) with jitter in [½, 1],
// at most Max; a retry-after from the server wins (capped at Max).
func (p *RetryPolicy) backoff(n int, err error, rng func() float64) time.Duration {
	_, h := httpStatus(err)
	if d, ok := retryAfter(h, time.Now()); ok {
		return min(d, p.Max)
	}
	d := p.Base << min(n-1, 30)
	if d <= 0 || d > p.Max {
		d = p.Max
	}
	return time.Duration(float64(d) * (0.5 + 0.5*rng()))
}

// chatWithRetry calls the model, retrying what is worth retrying. onRetry is told
// about each retry before its wait.
func chatWithRetry(ctx context.Context, m Model, req *Request, p RetryPolicy, onRetry func(n int, wait time.Duration, err error)) (*Reply, error) {
	for n := 0; ; n++ {
		actx, cancel := context.WithTimeout(ctx, p.Timeout)
		rep, err := m.Chat(actx, req)
		timedOut := err != nil && actx.Err() == context.DeadlineExceeded && ctx.Err() == nil
		cancel()
		if err == nil {
			return rep, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if timedOut {
			err = fmt.Errorf("model call timed out after %s: %w", p.Timeout, err)
		}
		if n >= p.Retries || !retryable(err, timedOut) {
			if n > 0 {
				return nil, fmt.Errorf("after %d retries: %w", n, err)
			}
			return nil, err
		}
		wait := p.backoff(n+1, err, rand.Float64)
		if onRetry != nil {
			onRetry(n+1, wait, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
