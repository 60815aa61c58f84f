package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"golang.org/x/sync/errgroup"
)

// AgentModel is the model name the harness asks for; the scripted upstream ignores it.
const AgentModel = "demo-agent"

// systemPrompt is the agent's instructions: the task and its context come in the
// user message.
const systemPrompt = "You are an airline support agent. Complete the customer's request with the submit tool, " +
	"using the code the policy requires for that kind of request."

// Harness runs episodes of the environment through camproxy: the agent's calls go
// to camproxy's data plane with the real openai-go client, the environment answers
// the agent's tool call, and the reward goes to camproxy's admin plane.
type Harness struct {
	env    *Env
	data   string
	client openai.Client
	admin  string
	http   *http.Client
}

// HarnessOptions say where camproxy is.
type HarnessOptions struct {
	DataURL  string       // camproxy's data plane, e.g. http://127.0.0.1:8080
	AdminURL string       // camproxy's admin plane, e.g. http://127.0.0.1:9090
	Token    string       // admin.token, if set
	HTTP     *http.Client // nil = a plain client
}

// NewHarness makes a harness for env.
func NewHarness(env *Env, o HarnessOptions) *Harness {
	hc := o.HTTP
	if hc == nil {
		hc = &http.Client{}
	}
	h := &Harness{env: env, data: o.DataURL, admin: o.AdminURL, http: hc}
	opts := []option.RequestOption{option.WithBaseURL(o.DataURL + "/v1"), option.WithAPIKey("sk-demo"),
		option.WithHTTPClient(hc), option.WithMaxRetries(0)}
	h.client = openai.NewClient(opts...)
	if o.Token != "" {
		h.http = &http.Client{Transport: bearer{token: o.Token, next: transport(hc)}, Timeout: hc.Timeout}
	}
	return h
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func transport(hc *http.Client) http.RoundTripper {
	if hc.Transport != nil {
		return hc.Transport
	}
	return http.DefaultTransport
}

// Camproxy is the data plane this harness drives.
func (h *Harness) Camproxy() string { return h.data }

// Result is one finished episode.
type Result struct {
	Camproxy  string  // the data plane the episode ran through
	Task      string  // task id
	Episode   string  // camproxy's episode id (X-CAM-Episode-Id)
	Arm       string  // the arm camproxy chose (X-CAM-Arm)
	Context   string  // X-CAM-Context of the first turn: miss, hit, none, fail-open…
	Code      string  // what the agent submitted
	Reward    float64 // 1 when the environment accepted the submit, else 0
	ToolReply string  // the environment's answer to the agent's tool call
}

var submitTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name:        ToolSubmit,
	Description: openai.String("Submit the customer's request with the code the policy requires."),
	Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{
		"code": map[string]any{"type": "string", "description": "the policy code for this kind of request"},
	}, "required": []string{"code"}},
})

// Episode runs task t once: the task goes to the agent through camproxy, the
// environment executes the agent's tool call, the tool result goes back in the same
// episode for the agent's final answer, and the reward is posted to camproxy.
func (h *Harness) Episode(ctx context.Context, t Task) (Result, error) {
	res := Result{Camproxy: h.data, Task: t.ID}
	params := openai.ChatCompletionNewParams{
		Model:    AgentModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(systemPrompt), openai.UserMessage(t.Text)},
		Tools:    []openai.ChatCompletionToolUnionParam{submitTool},
	}
	var raw *http.Response
	first, err := h.client.Chat.Completions.New(ctx, params, option.WithHeader("X-CAM-Task-Id", t.ID), option.WithResponseInto(&raw))
	if err != nil {
		return res, fmt.Errorf("demo: task %s, turn 1: %w", t.ID, err)
	}
	res.Episode, res.Arm, res.Context = raw.Header.Get("X-CAM-Episode-Id"), raw.Header.Get("X-CAM-Arm"), raw.Header.Get("X-CAM-Context")
	if res.Episode == "" {
		return res, fmt.Errorf("demo: task %s: camproxy sent no X-CAM-Episode-Id", t.ID)
	}
	if len(first.Choices) == 0 || len(first.Choices[0].Message.ToolCalls) == 0 {
		return res, fmt.Errorf("demo: task %s: the agent made no tool call", t.ID)
	}
	msg := first.Choices[0].Message
	tc := msg.ToolCalls[0]
	if m := codeArg.FindStringSubmatch(tc.Function.Arguments); m != nil {
		res.Code = m[1]
	}
	result, ok := h.env.Execute(t, tc.Function.Name, tc.Function.Arguments)
	res.ToolReply = result
	if ok {
		res.Reward = 1
	}
	params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage(result, tc.ID))
	if _, err := h.client.Chat.Completions.New(ctx, params, option.WithHeader("X-CAM-Task-Id", t.ID),
		option.WithHeader("X-CAM-Episode-Id", res.Episode)); err != nil {
		return res, fmt.Errorf("demo: task %s, turn 2: %w", t.ID, err)
	}
	return res, h.feedback(ctx, res.Episode, res.Reward, ok, t.ID)
}

// feedback posts the reward to camproxy's admin plane.
func (h *Harness) feedback(ctx context.Context, episode string, reward float64, success bool, task string) error {
	body, _ := json.Marshal(map[string]any{"episode_id": episode, "reward": reward, "success": success,
		"metadata": map[string]string{"task": task}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.admin+"/v1/feedback", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("demo: feedback: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.http.Do(req)
	if err != nil {
		return fmt.Errorf("demo: feedback for episode %s: %w", episode, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("demo: feedback for episode %s: %s: %s", episode, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// Round runs every task of tasks once, concurrency at a time, and returns the
// results in the order of tasks. The first error stops the round.
func (h *Harness) Round(ctx context.Context, tasks []Task, concurrency int) ([]Result, error) {
	if concurrency < 1 {
		concurrency = 1
	}
	out := make([]Result, len(tasks))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for i, t := range tasks {
		g.Go(func() error {
			r, err := h.Episode(gctx, t)
			out[i] = r
			return err
		})
	}
	return out, g.Wait()
}
