package testkit

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// CAM modes.
const (
	CAMOK      = "ok"
	CAMHang    = "hang"    // never answers (until the caller leaves)
	CAM500     = "500"     // answers an OpenAI error
	CAMGarbage = "garbage" // answers 200 with a body that is not JSON
	CAMEmpty   = "empty"   // answers 200 with empty content
	CAMThink   = "think"   // wraps the context in a <think> block first
	CAMHuge    = "huge"    // answers 200 with a 10 MB context
)

// CAM is a scripted context augmentation model: an OpenAI-compatible chat server.
type CAM struct {
	*httptest.Server
	calls atomic.Int64

	mu      sync.Mutex
	mode    string
	context func(task string) string
	delay   time.Duration
	bodies  [][]byte
	keep    int // 0 = every body
}

// NewCAM starts a CAM that answers "Guidance for: <task>" unless told otherwise.
func NewCAM() *CAM {
	c := &CAM{mode: CAMOK, context: func(task string) string { return "Guidance for: " + task + "\n- check the policy first." }}
	c.Server = httptest.NewServer(http.HandlerFunc(c.serve))
	return c
}

// Calls is how many chat calls the CAM received.
func (c *CAM) Calls() int64 { return c.calls.Load() }

// SetMode switches how the CAM answers.
func (c *CAM) SetMode(m string) { c.mu.Lock(); c.mode = m; c.mu.Unlock() }

// SetDelay makes every answer wait d first.
func (c *CAM) SetDelay(d time.Duration) { c.mu.Lock(); c.delay = d; c.mu.Unlock() }

// SetContext scripts the context for a task.
func (c *CAM) SetContext(f func(task string) string) { c.mu.Lock(); c.context = f; c.mu.Unlock() }

// KeepLast bounds the kept request bodies to about the last n (0 = all).
func (c *CAM) KeepLast(n int) { c.mu.Lock(); c.keep = n; c.mu.Unlock() }

// Bodies returns the request bodies received so far.
func (c *CAM) Bodies() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.bodies...)
}

func (c *CAM) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	c.calls.Add(1)
	c.mu.Lock()
	mode, ctxf, delay := c.mode, c.context, c.delay
	c.bodies = append(c.bodies, body)
	if c.keep > 0 && len(c.bodies) > 2*c.keep {
		c.bodies = append(c.bodies[:0:0], c.bodies[len(c.bodies)-c.keep:]...)
	}
	c.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	task := ""
	if n := len(req.Messages); n > 0 {
		task = req.Messages[n-1].Content
	}
	switch mode {
	case CAMHang:
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
		return
	case CAM500:
		writeOpenAIError(w, http.StatusInternalServerError, "CAM exploded")
		return
	case CAMGarbage:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "<html>502 bad gateway</html>")
		return
	}
	content := ctxf(task)
	switch mode {
	case CAMEmpty:
		content = "  "
	case CAMHuge:
		content = strings.Repeat("guidance ", 10<<20/9) // a 10 MB answer
	case CAMThink:
		content = "<think>let me reason about " + task + "</think>\n" + content
	}
	out, _ := json.Marshal(map[string]any{
		"id": "cmpl-cam", "object": "chat.completion", "created": 1700000000, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": content}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
	})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}
