package app

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
)

// TestOverloadRetriedByOpenAIGo (issue 32): past server.max_in_flight, openai-go
// sees camproxy's 503 with Retry-After as retryable: it waits and sends the call
// again, which succeeds once the call holding the only slot ended.
func TestOverloadRetriedByOpenAIGo(t *testing.T) {
	e := newEnv(t, func(c *config.Config) { c.Server.MaxInFlight, c.Server.QueueTimeout = 1, 0 })
	streaming, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free) // before the env's: the upstream's handler must not stay blocked
	e.up.Configure(func(u *testkit.Upstream) {
		u.BeforeChunk = func(i int) {
			if i == 1 {
				once.Do(func() { close(streaming); <-release })
			}
		}
	})
	held := make(chan error, 1)
	go func() { // a stream holds the only slot until release
		resp, err := http.Post(e.base+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hold the slot"}]}`))
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		held <- err
	}()
	<-streaming

	var refused atomic.Int32
	var retryAfter atomic.Value
	client := openai.NewClient(option.WithBaseURL(e.base+"/v1"), option.WithAPIKey("sk-client-key"), option.WithMaxRetries(3),
		option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			resp, err := next(r)
			if err == nil && resp.StatusCode == http.StatusServiceUnavailable && refused.Add(1) == 1 {
				retryAfter.Store(resp.Header.Get("Retry-After"))
				free() // the slot frees up while the SDK waits
			}
			return resp, err
		}))
	resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "gpt-4o", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Change my flight to tomorrow.")}})
	if err != nil {
		t.Fatalf("after the refusal: %v", err)
	}
	if len(resp.Choices) == 0 || refused.Load() != 1 || retryAfter.Load() != "1" {
		t.Fatalf("choices %d, refusals seen %d, Retry-After %v", len(resp.Choices), refused.Load(), retryAfter.Load())
	}
	if err := <-held; err != nil {
		t.Fatalf("the call holding the slot: %v", err)
	}
}
