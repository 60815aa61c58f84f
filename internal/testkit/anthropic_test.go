package testkit

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

func anthropicPost(t *testing.T, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

var anthropicHeaders = map[string]string{"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}

const anthropicBody = `{"model":"claude-sonnet-4-5","max_tokens":512,"messages":[{"role":"user","content":"Rebook Mia Li."}],"tools":[{"name":"lookup_flight","input_schema":{"type":"object"}}]}`

func TestAnthropicAuth(t *testing.T) {
	a := NewAnthropic()
	defer a.Close()
	a.APIKey = "sk-ant-test"
	for _, c := range []struct {
		name   string
		hdr    map[string]string
		status int
		typ    string
	}{
		{"no key", map[string]string{"anthropic-version": "2023-06-01"}, 401, "authentication_error"},
		{"wrong key", map[string]string{"x-api-key": "sk-other", "anthropic-version": "2023-06-01"}, 401, "authentication_error"},
		{"no version", map[string]string{"x-api-key": "sk-ant-test"}, 400, "invalid_request_error"},
		{"bearer", map[string]string{"authorization": "Bearer sk-ant-test", "anthropic-version": "2023-06-01"}, 200, ""},
		{"ok", anthropicHeaders, 200, ""},
	} {
		resp := anthropicPost(t, a.URL+"/v1/messages", anthropicBody, c.hdr)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Fatalf("%s: %d %s", c.name, resp.StatusCode, b)
		}
		if c.typ != "" && (gjson.GetBytes(b, "type").String() != "error" || gjson.GetBytes(b, "error.type").String() != c.typ || gjson.GetBytes(b, "error.message").String() == "") {
			t.Fatalf("%s: %s", c.name, b)
		}
	}
	if len(a.Requests()) != 5 {
		t.Fatalf("%d requests", len(a.Requests()))
	}
}

func TestAnthropicMessages(t *testing.T) {
	a := NewAnthropic()
	defer a.Close()
	resp := anthropicPost(t, a.URL+"/v1/messages", anthropicBody, anthropicHeaders)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	o := gjson.ParseBytes(b)
	if resp.StatusCode != 200 || o.Get("type").String() != "message" || o.Get("role").String() != "assistant" ||
		o.Get("stop_reason").String() != "tool_use" || o.Get("content.0.type").String() != "tool_use" ||
		o.Get("content.0.name").String() != "lookup_flight" || o.Get("content.0.input.query").String() != "flight status" ||
		o.Get("model").String() != "claude-sonnet-4-5" || o.Get("usage.output_tokens").Int() != 7 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	body2 := `{"model":"claude-sonnet-4-5","max_tokens":512,"messages":[{"role":"user","content":"Rebook."},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_00","name":"lookup_flight","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_00","content":"on time"}]}]}`
	resp = anthropicPost(t, a.URL+"/v1/messages", body2, anthropicHeaders)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if gjson.GetBytes(b, "content.0.text").String() != "Done after 3 messages." || gjson.GetBytes(b, "stop_reason").String() != "end_turn" {
		t.Fatalf("%s", b)
	}
	if a.Last().Header.Get("X-Api-Key") != "sk-ant-test" || string(a.Last().Body) != body2 {
		t.Fatalf("captured %+v", a.Last())
	}

	a.ReplyFn = func(gjson.Result) Reply { return Reply{Status: 529, ErrorMsg: "Overloaded"} }
	resp = anthropicPost(t, a.URL+"/v1/messages", anthropicBody, anthropicHeaders)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 529 || gjson.GetBytes(b, "error.type").String() != "overloaded_error" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

type sseEvent struct{ name, data string }

// readSSE parses an SSE body strictly: every event is "event: X\ndata: {...}\n\n".
func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	sc := bufio.NewScanner(r)
	var cur sseEvent
	state := 0
	for sc.Scan() {
		line := sc.Text()
		switch state {
		case 0:
			name, ok := strings.CutPrefix(line, "event: ")
			if !ok {
				t.Fatalf("want an event line, got %q", line)
			}
			cur = sseEvent{name: name}
			state = 1
		case 1:
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok || !gjson.Valid(data) {
				t.Fatalf("want a JSON data line, got %q", line)
			}
			cur.data = data
			state = 2
		case 2:
			if line != "" {
				t.Fatalf("want a blank line, got %q", line)
			}
			out = append(out, cur)
			state = 0
		}
	}
	if state != 0 {
		t.Fatalf("stream ended inside an event")
	}
	return out
}

func TestAnthropicStream(t *testing.T) {
	a := NewAnthropic()
	defer a.Close()
	a.ReplyFn = func(gjson.Result) Reply {
		return Reply{Content: "Let me check.", ToolCalls: []ToolCall{{ID: "toolu_01", Name: "lookup_flight", Arguments: `{"flight":"UA12","date":"2024-05-01"}`}}}
	}
	resp := anthropicPost(t, a.URL+"/v1/messages", strings.Replace(anthropicBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1), anthropicHeaders)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	evs := readSSE(t, resp.Body)
	var names []string
	var text, input string
	for _, e := range evs {
		names = append(names, e.name)
		d := gjson.Parse(e.data)
		if d.Get("type").String() != e.name {
			t.Fatalf("event %s carries type %s", e.name, d.Get("type"))
		}
		text += d.Get("delta.text").String()
		input += d.Get("delta.partial_json").String()
		switch e.name {
		case "message_start":
			if d.Get("message.usage.input_tokens").Int() == 0 || d.Get("message.model").String() != "claude-sonnet-4-5" {
				t.Fatalf("%s", e.data)
			}
		case "message_delta":
			if d.Get("delta.stop_reason").String() != "tool_use" || d.Get("usage.output_tokens").Int() != 7 {
				t.Fatalf("%s", e.data)
			}
		}
	}
	want := "message_start,ping,content_block_start," + strings.Repeat("content_block_delta,", 3) + "content_block_stop," +
		"content_block_start," + strings.Repeat("content_block_delta,", 7) + "content_block_stop,message_delta,message_stop"
	if got := strings.Join(names, ","); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	if text != "Let me check." || input != `{"flight":"UA12","date":"2024-05-01"}` {
		t.Fatalf("text %q input %q", text, input)
	}
}

func TestAnthropicStreamErrorAndCancel(t *testing.T) {
	a := NewAnthropic()
	defer a.Close()
	a.ErrorAfter = 3
	body := strings.Replace(anthropicBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
	resp := anthropicPost(t, a.URL+"/v1/messages", body, anthropicHeaders)
	evs := readSSE(t, resp.Body)
	resp.Body.Close()
	if len(evs) != 4 || evs[3].name != "error" || gjson.Get(evs[3].data, "error.type").String() != "overloaded_error" {
		t.Fatalf("%+v", evs)
	}

	a.ErrorAfter, a.HangAfter = 0, 2
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.URL+"/v1/messages", strings.NewReader(body))
	for k, v := range anthropicHeaders {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resp.Body.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-a.Cancelled:
	case <-time.After(Patience(t)):
		t.Fatal("cancellation not noticed")
	}
}

// TestAnthropicNodeSDK: the official @anthropic-ai/sdk reads the fake's JSON and SSE.
func TestAnthropicNodeSDK(t *testing.T) {
	a := NewAnthropic()
	defer a.Close()
	a.Configure(func(a *Anthropic) { a.APIKey = "sk-ant-node" })
	out := runNode(t, "anthropic-messages.mjs", "CAMPROXY_BASE_URL="+a.URL, "ANTHROPIC_API_KEY=sk-ant-node", "CAMPROXY_TASK=Rebook Mia Li onto the earliest flight to Boston.")
	if out.Get("toolUse.name").String() != "lookup_flight" || out.Get("toolUse.input.limit").Int() != 3 || out.Get("first.stopReason").String() != "tool_use" {
		t.Fatalf("first: %s", out.Raw)
	}
	// The SDK hides ping events.
	want := `["message_start","content_block_start","content_block_delta","content_block_delta","content_block_delta","content_block_delta","content_block_stop","message_delta","message_stop"]`
	if out.Get("stream.events").Raw != want || out.Get("stream.content").String() != "Done after 3 messages." ||
		out.Get("stream.stopReason").String() != "end_turn" || out.Get("stream.usage.output_tokens").Int() != 7 || out.Get("stream.error").Type != gjson.Null {
		t.Fatalf("stream: %s", out.Get("stream").Raw)
	}
	reqs := a.Requests()
	if len(reqs) != 2 || out.Get("sent.1").String() != string(reqs[1].Body) || reqs[0].Header.Get("Anthropic-Version") == "" {
		t.Fatalf("%d requests; sent %s", len(reqs), out.Get("sent").Raw)
	}
	if out.Get("first.requestId").String() == "" {
		t.Fatalf("request id: %s", out.Get("first").Raw)
	}
}
