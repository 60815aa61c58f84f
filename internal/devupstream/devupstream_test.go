package devupstream

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestAnswer(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"baseline: no context", `{"messages":[{"role":"user","content":"Cancel my reservation."}]}`, "I see 0 characters of task context."},
		{"context appended after a blank line", `{"messages":[{"role":"system","content":"be brief\n\nreally"},{"role":"user","content":"Cancel it.\n\n- check the rules"}]}`, "I see 17 characters of task context."},
		{"runes, not bytes", `{"messages":[{"role":"user","content":"Task\n\nétape"}]}`, "I see 5 characters of task context."},
		{"content parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"Task"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"\nctx"}]}]}`, "I see 3 characters of task context."},
		{"only the first user message", `{"messages":[{"role":"user","content":"Task"},{"role":"assistant","content":"ok"},{"role":"user","content":"more\n\nnot context"}]}`, "I see 0 characters of task context."},
		{"no messages", `{}`, "I see 0 characters of task context."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Answer(gjson.Parse(tc.body)); got != tc.want {
				t.Errorf("Answer = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	const ask = `{"model":"m1","messages":[{"role":"user","content":"Task\n\nabcd"}]`
	post := func(body string) *http.Response {
		t.Helper()
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}

	t.Run("json", func(t *testing.T) {
		resp := post(ask + `}`)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("status %d, type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		r := gjson.ParseBytes(b)
		if got := r.Get("choices.0.message.content").String(); got != "I see 4 characters of task context." {
			t.Errorf("content = %q", got)
		}
		if r.Get("model").String() != "m1" || r.Get("object").String() != "chat.completion" || r.Get("choices.0.finish_reason").String() != "stop" || r.Get("usage.total_tokens").Int() == 0 {
			t.Errorf("not a chat completion: %s", b)
		}
	})

	t.Run("sse", func(t *testing.T) {
		resp := post(ask + `,"stream":true,"stream_options":{"include_usage":true}}`)
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("Content-Type %q", ct)
		}
		var text strings.Builder
		var events []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			events = append(events, data)
			if data == "[DONE]" {
				continue
			}
			if !gjson.Valid(data) {
				t.Fatalf("event is not JSON: %q", data)
			}
			text.WriteString(gjson.Get(data, "choices.0.delta.content").String())
		}
		if text.String() != "I see 4 characters of task context." {
			t.Errorf("streamed text = %q", text.String())
		}
		if n := len(events); n < 4 || events[n-1] != "[DONE]" || gjson.Get(events[n-2], "usage.total_tokens").Int() == 0 || gjson.Get(events[n-3], "choices.0.finish_reason").String() != "stop" {
			t.Errorf("stream does not end finish, usage, [DONE]: %q", events)
		}
	})

	t.Run("models", func(t *testing.T) {
		resp, err := http.Get(srv.URL + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || gjson.GetBytes(b, "data.0.id").String() == "" {
			t.Errorf("status %d: %s", resp.StatusCode, b)
		}
	})

	t.Run("errors", func(t *testing.T) {
		if resp := post(`{"messages":`); resp.StatusCode != 400 {
			t.Errorf("a body that is not JSON: status %d, want 400", resp.StatusCode)
		}
		resp, err := http.Get(srv.URL + "/v1/embeddings")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 404 || !strings.Contains(gjson.GetBytes(b, "error.message").String(), "/v1/chat/completions") {
			t.Errorf("unknown path: status %d: %s", resp.StatusCode, b)
		}
	})
}
