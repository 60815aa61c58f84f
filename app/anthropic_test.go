package app

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/protocol"
)

func newAnthropicEnv(t *testing.T, mutate func(*config.Config)) (*env, *testkit.Anthropic) {
	an := testkit.NewAnthropic()
	t.Cleanup(an.Close)
	e := newEnv(t, func(c *config.Config) {
		c.Upstreams["anthropic"].BaseURL = an.URL
		if mutate != nil {
			mutate(c)
		}
	})
	return e, an
}

func postAnthropic(t *testing.T, base string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sk-ant-client")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

// TestAnthropicMessages: a Messages conversation with a tool, non-streaming then
// streaming; the context sits after the task, the episode continues, and it is
// recorded in the OpenAI shape.
func TestAnthropicMessages(t *testing.T) {
	e, an := newAnthropicEnv(t, nil)
	const task = "Refund order #881 for Ana (she paid €40)."
	msgs := []any{map[string]any{"role": "user", "content": task}}
	mk := func(stream bool) []byte {
		b, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 512, "system": "You are a support agent.",
			"messages": msgs, "stream": stream, "tools": []any{map[string]any{"name": "lookup", "input_schema": map[string]any{"type": "object"}}},
			"metadata": map[string]any{"user_id": "u-1"}})
		return b
	}
	body := mk(false)
	resp, out := postAnthropic(t, e.base, body)
	if resp.StatusCode != 200 || resp.Header.Get("X-Cam-Context") != "miss" {
		t.Fatalf("turn 1: %d %s %v", resp.StatusCode, out, resp.Header)
	}
	up := an.Last()
	if up.Header.Get("X-Api-Key") != "sk-ant-client" || up.Header.Get("Anthropic-Version") != "2023-06-01" {
		t.Fatalf("auth headers not passed through: %v", up.Header)
	}
	want := bytes.Replace(body, []byte(jsonText(task)), []byte(jsonText(task+"\n\nGuidance for: "+task+"\n- check the policy first.")), 1)
	if !bytes.Equal(up.Body, want) {
		t.Fatalf("upstream body\n got %s\nwant %s", up.Body, want)
	}
	content := gjson.GetBytes(out, "content").Array()
	var use gjson.Result
	for _, c := range content {
		if c.Get("type").String() == "tool_use" {
			use = c
		}
	}
	if !use.Exists() {
		t.Fatalf("no tool_use in %s", out)
	}
	msgs = append(msgs, map[string]any{"role": "assistant", "content": json.RawMessage(gjson.GetBytes(out, "content").Raw)},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": use.Get("id").String(), "content": "refund allowed"}}})

	// Turn 2, streamed: SSE events relayed in order.
	resp2, stream := postAnthropic(t, e.base, mk(true))
	if resp2.StatusCode != 200 || resp2.Header.Get("X-Cam-Context") != "episode" || resp2.Header.Get("X-Cam-Episode-Id") != resp.Header.Get("X-Cam-Episode-Id") {
		t.Fatalf("turn 2: %d %v", resp2.StatusCode, resp2.Header)
	}
	var events []string
	var text strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(stream))
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, ev)
		}
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && gjson.Get(d, "delta.type").String() == "text_delta" {
			text.WriteString(gjson.Get(d, "delta.text").String())
		}
	}
	if k := strings.Join(events, ","); !strings.HasPrefix(k, "message_start,ping,content_block_start") || !strings.HasSuffix(k, "message_delta,message_stop") {
		t.Fatalf("events %s", k)
	}
	ep := readEpisode(t, e, resp.Header.Get("X-Cam-Episode-Id"))
	assertMessages(t, ep.Messages, []protocol.Message{
		{Role: "system", Content: "You are a support agent."},
		{Role: "user", Content: task},
		{Role: "assistant", Content: gjson.GetBytes(out, `content.#(type=="text").text`).String(), ToolCalls: []protocol.ToolCall{{ID: use.Get("id").String(), Name: "lookup", Arguments: use.Get("input").Raw}}},
		{Role: "tool", ToolCallID: use.Get("id").String(), Content: "refund allowed"},
		{Role: "assistant", Content: text.String()},
	})
	if ep.Protocol != "anthropic" || e.cam.Calls() != 1 {
		t.Fatalf("protocol %q, CAM calls %d", ep.Protocol, e.cam.Calls())
	}
}

// TestAnthropicErrorsAndKey: camproxy's own errors use Anthropic's shape; a configured
// key replaces the client's.
func TestAnthropicErrorsAndKey(t *testing.T) {
	e, an := newAnthropicEnv(t, func(c *config.Config) { c.Upstreams["anthropic"].APIKey = "sk-ant-configured" })
	an.APIKey = "sk-ant-configured"
	resp, out := postAnthropic(t, e.base, []byte(`{"model":"claude","messages":`))
	if resp.StatusCode != 400 || gjson.GetBytes(out, "type").String() != "error" || gjson.GetBytes(out, "error.type").String() != "invalid_request_error" {
		t.Fatalf("bad JSON: %d %s", resp.StatusCode, out)
	}
	resp, out = postAnthropic(t, e.base, []byte(`{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
	if resp.StatusCode != 200 || an.Last().Header.Get("X-Api-Key") != "sk-ant-configured" {
		t.Fatalf("configured key: %d %s, upstream key %q", resp.StatusCode, out, an.Last().Header.Get("X-Api-Key"))
	}
	// Other Anthropic paths pass through to Anthropic, not OpenAI.
	req, _ := http.NewRequest(http.MethodPost, e.base+"/v1/messages/count_tokens", strings.NewReader(`{"model":"claude","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Api-Key", "sk-ant-client")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r2.Body)
	r2.Body.Close()
	if r2.StatusCode != 200 || !gjson.GetBytes(b, "input_tokens").Exists() {
		t.Fatalf("count_tokens passthrough: %d %s", r2.StatusCode, b)
	}
}
