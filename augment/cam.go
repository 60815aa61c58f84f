package augment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// taskPlaceholder is replaced by the task text in CAMOptions.UserTemplate.
const taskPlaceholder = "{{task}}"

// MaxAnswerBytes bounds a CAM's HTTP answer: a runaway or hostile server must not
// fill memory or splice megabytes into every agent call. A compliant answer of
// max_tokens tokens is far below it.
const MaxAnswerBytes = 1 << 20

// ErrAnswerTooLarge is the failure of a CAM answer over MaxAnswerBytes (fail-open).
var ErrAnswerTooLarge = errors.New("answer over the size limit")

// limitTransport fails the read of a response body past max bytes.
type limitTransport struct {
	base http.RoundTripper
	max  int64
}

func (t limitTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > t.max {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: Content-Length %d > %d", ErrAnswerTooLarge, resp.ContentLength, t.max)
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.max}
	return resp, nil
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the limit from a longer one.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n > 0 {
			return 0, ErrAnswerTooLarge
		}
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// placeholderKey stands in for an empty API key: vLLM ignores the key, but the
// client would otherwise send an empty bearer token.
const placeholderKey = "none"

// CAMOptions configures a CAM augmenter (mapped from config.Augmenter).
type CAMOptions struct {
	Name         string // augmenter name, used in errors
	BaseURL      string // OpenAI-compatible base URL, e.g. http://vllm:8000/v1
	Model        string
	APIKey       string // "" = a placeholder (vLLM ignores it)
	SystemPrompt string // "" = no system message
	UserTemplate string // must contain {{task}}; "" = "{{task}}"
	MaxTokens    int    // 0 = let the server decide
	Temperature  float64
	ExtraBody    map[string]any // merged into the request body, top-level keys
}

// CAM asks a Context Augmentation Model, served behind an OpenAI-compatible chat
// completions API (vLLM), for task-specific context.
type CAM struct {
	o       CAMOptions
	chat    openai.ChatCompletionService
	extra   []option.RequestOption
	version string
}

// NewCAM builds a CAM client. hc carries the transport (nil = a plain
// http.Client); the time budget belongs to the Guard, not to hc.
func NewCAM(o CAMOptions, hc *http.Client) (*CAM, error) {
	if o.BaseURL == "" {
		return nil, fmt.Errorf("augment: cam %q: base_url is empty", o.Name)
	}
	if o.Model == "" {
		return nil, fmt.Errorf("augment: cam %q: model is empty", o.Name)
	}
	if o.UserTemplate == "" {
		o.UserTemplate = taskPlaceholder
	}
	if !strings.Contains(o.UserTemplate, taskPlaceholder) {
		// A template without the task would give every task the same context.
		return nil, fmt.Errorf("augment: cam %q: user_template has no %s", o.Name, taskPlaceholder)
	}
	version, err := camVersion(o)
	if err != nil {
		return nil, fmt.Errorf("augment: cam %q: extra_body: %w", o.Name, err)
	}
	if hc == nil {
		hc = &http.Client{}
	}
	limited := *hc
	limited.Transport = limitTransport{base: hc.Transport, max: MaxAnswerBytes}
	hc = &limited
	key := o.APIKey
	if key == "" {
		key = placeholderKey
	}
	// NewChatCompletionService, unlike openai.NewClient, does not read OPENAI_*
	// from the environment: the agent's OpenAI settings must not leak into the CAM.
	chat := openai.NewChatCompletionService(
		option.WithBaseURL(o.BaseURL),
		option.WithAPIKey(key),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0), // the Guard owns the time budget; a retry would blow it
	)
	return &CAM{o: o, chat: chat, extra: extraBodyOptions(o.ExtraBody), version: version}, nil
}

// extraBodyOptions turns each ExtraBody key into a body override. Keys are
// literal top-level names: sjson path characters are escaped.
func extraBodyOptions(extra map[string]any) []option.RequestOption {
	opts := make([]option.RequestOption, 0, len(extra))
	for k, v := range extra {
		opts = append(opts, option.WithJSONSet(sjsonEscape(k), v))
	}
	return opts
}

// sjsonEscape escapes the characters that sjson reads as path syntax.
func sjsonEscape(key string) string {
	var b strings.Builder
	for i, r := range key {
		if strings.ContainsRune(`\.*?|#@`, r) || (i == 0 && r == ':') {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Prompt renders the system and user messages for task. Training builds its
// prompts with it too, so that the CAM is trained on exactly what it is served.
func (c *CAM) Prompt(task string) (system, user string) {
	return c.o.SystemPrompt, strings.ReplaceAll(c.o.UserTemplate, taskPlaceholder, task)
}

// Version is a short hash of everything that changes the CAM's answer. It goes
// into the cache key, so a new prompt or model never serves stale contexts.
func (c *CAM) Version() string { return c.version }

// camVersion hashes the answer-relevant options. encoding/json sorts map keys
// at every level, which makes the ExtraBody encoding canonical.
func camVersion(o CAMOptions) (string, error) {
	b, err := json.Marshal(struct {
		Model        string         `json:"model"`
		SystemPrompt string         `json:"system_prompt"`
		UserTemplate string         `json:"user_template"`
		MaxTokens    int            `json:"max_tokens"`
		Temperature  float64        `json:"temperature"`
		ExtraBody    map[string]any `json:"extra_body"`
	}{o.Model, o.SystemPrompt, o.UserTemplate, o.MaxTokens, o.Temperature, o.ExtraBody})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6]), nil
}

// Augment asks the CAM for context about req.Task.
func (c *CAM) Augment(ctx context.Context, req Request) (string, error) {
	res, err := c.chat.New(ctx, c.params(req.Task), c.extra...)
	if err != nil {
		// The SDK's error strings carry the status only, never the prompt or key.
		return "", fmt.Errorf("augment: cam %q: %w", c.o.Name, err)
	}
	if len(res.Choices) == 0 {
		return "", fmt.Errorf("augment: cam %q: no choices: %w", c.o.Name, ErrEmpty)
	}
	text := answerText(res.Choices[0].Message.Content)
	if text == "" {
		return "", fmt.Errorf("augment: cam %q: %w", c.o.Name, ErrEmpty)
	}
	return text, nil
}

// params builds the chat completion request for task.
func (c *CAM) params(task string) openai.ChatCompletionNewParams {
	system, user := c.Prompt(task)
	msgs := make([]openai.ChatCompletionMessageParamUnion, 0, 2)
	if system != "" {
		msgs = append(msgs, openai.SystemMessage(system))
	}
	msgs = append(msgs, openai.UserMessage(user))
	p := openai.ChatCompletionNewParams{
		Model:    c.o.Model,
		Messages: msgs,
		// Temperature 0 is meaningful (greedy), so it is always sent.
		Temperature: openai.Float(c.o.Temperature),
	}
	if c.o.MaxTokens > 0 {
		// max_tokens, not max_completion_tokens: vLLM and older servers know it.
		p.MaxTokens = openai.Int(int64(c.o.MaxTokens))
	}
	return p
}

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// answerText strips reasoning from a model answer: every <think>…</think>
// block, an unclosed <think> and everything after it (reasoning cut off by
// max_tokens), and everything up to a stray </think> (chat templates that open
// the think block in the prompt, so the answer holds only the closing tag).
func answerText(content string) string {
	var b strings.Builder
	for s := content; ; {
		open := strings.Index(s, thinkOpen)
		if open < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:open])
		end := strings.Index(s[open:], thinkClose)
		if end < 0 {
			break
		}
		s = s[open+end+len(thinkClose):]
	}
	out := b.String()
	if i := strings.LastIndex(out, thinkClose); i >= 0 {
		out = out[i+len(thinkClose):]
	}
	return strings.TrimSpace(out)
}
