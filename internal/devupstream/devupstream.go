// Package devupstream is a fake OpenAI-compatible model for trying camproxy without
// one (camproxy dev upstream): POST /v1/chat/completions answers, as JSON or SSE,
// one deterministic sentence saying how many characters of task context camproxy
// spliced into the first user message; GET /v1/models lists one model.
package devupstream

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// Serve answers on ln until ctx ends.
func Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: Handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return nil
	}
}

// Handler is the fake model. It is not internal/testkit's scripted upstream on
// purpose: that one keeps every request it sees (a long-running process would grow
// without bound) and would link the test kit (testing, fake S3 and Redis) into the
// shipped binary; this one needs a fixed address and one fixed answer.
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"dev-model","object":"model","created":1700000000,"owned_by":"camproxy-dev"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", chat)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": "camproxy dev upstream answers POST /v1/chat/completions and GET /v1/models, not " + r.Method + " " + r.URL.Path, "type": "invalid_request_error"}})
		_, _ = w.Write(b)
	})
	return mux
}

// Answer is the fake model's sentence: how much text follows the first blank line of
// the first user message. camproxy's default placement (append_to_task) splices the
// context there, so a baseline call sees 0 and an augmented one the context's length.
func Answer(body gjson.Result) string {
	var task string
	for _, m := range body.Get("messages").Array() {
		if m.Get("role").String() != "user" {
			continue
		}
		c := m.Get("content")
		if c.IsArray() { // content parts: the text parts, joined
			var parts []string
			for _, p := range c.Array() {
				if p.Get("type").String() == "text" {
					parts = append(parts, p.Get("text").String())
				}
			}
			task = strings.Join(parts, "\n")
		} else {
			task = c.String()
		}
		break
	}
	n := 0
	if _, ctx, ok := strings.Cut(task, "\n\n"); ok {
		n = len([]rune(ctx))
	}
	return fmt.Sprintf("I see %d characters of task context.", n)
}

func chat(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<20))
	if err != nil || !gjson.ValidBytes(raw) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"message":"the body is not JSON","type":"invalid_request_error"}}`)
		return
	}
	body := gjson.ParseBytes(raw)
	model := body.Get("model").String()
	answer := Answer(body)
	words := strings.Count(answer, " ") + 1
	usage := map[string]any{"prompt_tokens": len(raw) / 4, "completion_tokens": words, "total_tokens": len(raw)/4 + words}
	const id = "chatcmpl-dev"
	if !body.Get("stream").Bool() {
		w.Header().Set("Content-Type", "application/json")
		b, _ := json.Marshal(map[string]any{
			"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": answer}, "finish_reason": "stop"}},
			"usage":   usage,
		})
		_, _ = w.Write(b)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl, _ := w.(http.Flusher)
	created := time.Now().Unix()
	send := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		if fl != nil {
			fl.Flush()
		}
	}
	send(map[string]any{"role": "assistant", "content": ""}, nil)
	for _, word := range strings.SplitAfter(answer, " ") {
		send(map[string]any{"content": word}, nil)
	}
	send(map[string]any{}, "stop")
	if body.Get("stream_options.include_usage").Bool() {
		b, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": []any{}, "usage": usage})
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}
