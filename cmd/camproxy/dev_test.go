package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestDevAnswer(t *testing.T) {
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
			if got := devAnswer(gjson.Parse(tc.body)); got != tc.want {
				t.Errorf("devAnswer = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDevUpstreamHTTP(t *testing.T) {
	srv := httptest.NewServer(devUpstream())
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

// TestDevUpstreamCommand runs `camproxy dev upstream` as the CLI does: it says where
// it listens, answers there, and stops when the context ends.
func TestDevUpstreamCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"dev", "upstream", "--listen", "127.0.0.1:0"}, pw, io.Discard, func(string) (string, bool) { return "", false })
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	addr := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(line)
	if addr == "" {
		t.Fatalf("no address in %q", line)
	}
	resp, err := http.Post(addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(b, []byte("I see 0 characters of task context.")) {
		t.Errorf("answer %s", b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("dev upstream after cancel: %v", err)
	}
}

func TestDevUsage(t *testing.T) {
	noenv := func(string) (string, bool) { return "", false }
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"dev"}, "want a command: upstream"},
		{[]string{"dev", "downstream"}, `unknown command "downstream": want upstream`},
		{[]string{"dev", "upstrem"}, `did you mean "upstream"?`},
		{[]string{"dev", "upstream", "extra"}, `unexpected argument "extra"`},
		{[]string{"dev", "upstream", "--port", "1"}, "unknown flag --port"},
		{[]string{"dev", "upstream", "--lisen", "1"}, "unknown flag --lisen; did you mean --listen?"},
		{[]string{"dev", "upstream", "--listen", "256.0.0.1:1"}, "dev upstream:"},
		{[]string{"dev", "--help"}, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout bytes.Buffer
			err := run(context.Background(), tc.args, &stdout, io.Discard, noenv)
			if tc.wantErr == "" {
				if err != nil || !strings.Contains(stdout.String(), "camproxy dev upstream") {
					t.Errorf("err %v, help %q", err, stdout.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}
