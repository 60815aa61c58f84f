package augment

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// completionJSON is a real OpenAI chat.completion body; choices is the raw JSON
// of the choices array.
func completionJSON(choices string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"cam",` +
		`"choices":` + choices + `,"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`
}

// answerJSON is a completion with one choice whose content is content.
func answerJSON(content string) string {
	c, _ := json.Marshal(content)
	return completionJSON(`[{"index":0,"message":{"role":"assistant","content":` + string(c) + `},"finish_reason":"stop"}]`)
}

// fakeCAM is an httptest OpenAI-compatible server that answers with a fixed
// status and body and records what it was sent.
type fakeCAM struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []map[string]any
	auth   []string
	paths  []string
}

func newFakeCAM(t *testing.T, status int, body string) *fakeCAM {
	t.Helper()
	f := &fakeCAM{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		f.mu.Lock()
		f.bodies = append(f.bodies, m)
		f.auth = append(f.auth, r.Header.Get("Authorization"))
		f.paths = append(f.paths, r.URL.Path)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeCAM) last(t *testing.T) (body map[string]any, auth, path string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.bodies) == 0 {
		t.Fatal("fake CAM saw no request")
	}
	n := len(f.bodies) - 1
	return f.bodies[n], f.auth[n], f.paths[n]
}

func testCAMOptions(baseURL string) CAMOptions {
	return CAMOptions{
		Name:         "cam",
		BaseURL:      baseURL + "/v1",
		Model:        "cam-model",
		SystemPrompt: "You write context.",
		UserTemplate: "Task:\n{{task}}\nContext:",
		MaxTokens:    256,
		Temperature:  0.25,
		ExtraBody: map[string]any{
			"chat_template_kwargs": map[string]any{"enable_thinking": false},
			"top_k":                20,
		},
	}
}

func newTestCAM(t *testing.T, o CAMOptions) *CAM {
	t.Helper()
	c, err := NewCAM(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCAMRequestBody(t *testing.T) {
	f := newFakeCAM(t, 200, answerJSON("use the refund policy"))
	c := newTestCAM(t, testCAMOptions(f.URL))
	got, err := c.Augment(context.Background(), Request{Task: "cancel my flight", Model: "gpt-4o"})
	if err != nil {
		t.Fatal(err)
	}
	if got != "use the refund policy" {
		t.Fatalf("answer = %q", got)
	}
	body, auth, path := f.last(t)
	if path != "/v1/chat/completions" {
		t.Errorf("path = %q", path)
	}
	if auth != "Bearer none" {
		t.Errorf("Authorization = %q, want the placeholder key", auth)
	}
	if body["model"] != "cam-model" {
		t.Errorf("model = %v", body["model"])
	}
	if body["max_tokens"] != float64(256) {
		t.Errorf("max_tokens = %v", body["max_tokens"])
	}
	if _, ok := body["max_completion_tokens"]; ok {
		t.Error("max_completion_tokens sent; vLLM wants max_tokens")
	}
	if body["temperature"] != 0.25 {
		t.Errorf("temperature = %v", body["temperature"])
	}
	if body["top_k"] != float64(20) {
		t.Errorf("top_k = %v", body["top_k"])
	}
	kw, _ := body["chat_template_kwargs"].(map[string]any)
	if v, ok := kw["enable_thinking"]; !ok || v != false {
		t.Errorf("chat_template_kwargs = %v", body["chat_template_kwargs"])
	}
	msgs, _ := body["messages"].([]any)
	if len(msgs) != 2 {
		t.Fatalf("messages = %v", body["messages"])
	}
	wantMsg(t, msgs[0], "system", "You write context.")
	wantMsg(t, msgs[1], "user", "Task:\ncancel my flight\nContext:")
}

func wantMsg(t *testing.T, m any, role, content string) {
	t.Helper()
	mm, _ := m.(map[string]any)
	if mm["role"] != role || mm["content"] != content {
		t.Errorf("message = %v, want %s %q", m, role, content)
	}
}

func TestCAMNoSystemPromptAndKey(t *testing.T) {
	f := newFakeCAM(t, 200, answerJSON("ok"))
	o := testCAMOptions(f.URL)
	o.SystemPrompt, o.APIKey, o.MaxTokens, o.Temperature, o.ExtraBody = "", "secret", 0, 0, nil
	c := newTestCAM(t, o)
	if _, err := c.Augment(context.Background(), Request{Task: "t"}); err != nil {
		t.Fatal(err)
	}
	body, auth, _ := f.last(t)
	if auth != "Bearer secret" {
		t.Errorf("Authorization = %q", auth)
	}
	msgs, _ := body["messages"].([]any)
	if len(msgs) != 1 {
		t.Fatalf("messages = %v, want the user message only", msgs)
	}
	if _, ok := body["max_tokens"]; ok {
		t.Error("max_tokens sent although 0")
	}
	if body["temperature"] != float64(0) {
		t.Errorf("temperature = %v, want an explicit 0", body["temperature"])
	}
}

func TestCAMExtraBodyLiteralKeys(t *testing.T) {
	f := newFakeCAM(t, 200, answerJSON("ok"))
	o := testCAMOptions(f.URL)
	o.ExtraBody = map[string]any{"a.b": 1, "x*?": "y"}
	c := newTestCAM(t, o)
	if _, err := c.Augment(context.Background(), Request{Task: "t"}); err != nil {
		t.Fatal(err)
	}
	body, _, _ := f.last(t)
	if body["a.b"] != float64(1) || body["x*?"] != "y" {
		t.Errorf("body = %v, want literal top-level keys", body)
	}
}

func TestAnswerText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"  padded \n", "padded"},
		{"<think>reasoning</think>answer", "answer"},
		{"<think>\nmulti\nline\n</think>\n\nanswer", "answer"},
		{"a<think>x</think>b<think>y</think>c", "abc"},
		{"<think>cut off by max_tokens", ""},
		{"answer<think>cut off", "answer"},
		{"reasoning opened by the template</think>answer", "answer"},
		{"<think>only</think>", ""},
		{"<think></think>  ", ""},
	} {
		if got := answerText(tc.in); got != tc.want {
			t.Errorf("answerText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCAMThinkStripped(t *testing.T) {
	f := newFakeCAM(t, 200, answerJSON("<think>hmm</think>\nthe context"))
	c := newTestCAM(t, testCAMOptions(f.URL))
	got, err := c.Augment(context.Background(), Request{Task: "t"})
	if err != nil || got != "the context" {
		t.Fatalf("Augment = %q, %v", got, err)
	}
}

func TestCAMEmpty(t *testing.T) {
	for name, body := range map[string]string{
		"empty":      answerJSON(""),
		"whitespace": answerJSON(" \n\t "),
		"think-only": answerJSON("<think>all reasoning</think>"),
		"unclosed":   answerJSON("<think>never finished"),
		"no choices": completionJSON(`[]`),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeCAM(t, 200, body)
			c := newTestCAM(t, testCAMOptions(f.URL))
			_, err := c.Augment(context.Background(), Request{Task: "t"})
			if !errors.Is(err, ErrEmpty) {
				t.Fatalf("err = %v, want ErrEmpty", err)
			}
		})
	}
}

func TestCAMErrors(t *testing.T) {
	for name, fc := range map[string]struct {
		status int
		body   string
	}{
		"500":     {500, `{"error":{"message":"boom","type":"server_error"}}`},
		"garbage": {200, `this is not json`},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeCAM(t, fc.status, fc.body)
			o := testCAMOptions(f.URL)
			o.APIKey = "sk-secret"
			c := newTestCAM(t, o)
			_, err := c.Augment(context.Background(), Request{Task: "secret task"})
			if err == nil || errors.Is(err, ErrEmpty) {
				t.Fatalf("err = %v, want a non-empty error", err)
			}
			if strings.Contains(err.Error(), "sk-secret") || strings.Contains(err.Error(), "secret task") {
				t.Errorf("error leaks the key or prompt: %v", err)
			}
			f.mu.Lock()
			n := len(f.bodies)
			f.mu.Unlock()
			if n != 1 {
				t.Errorf("fake saw %d requests, want 1 (no retries)", n)
			}
		})
	}
}

func TestNewCAMValidates(t *testing.T) {
	for name, mutate := range map[string]func(*CAMOptions){
		"no base url":        func(o *CAMOptions) { o.BaseURL = "" },
		"no model":           func(o *CAMOptions) { o.Model = "" },
		"template w/o task":  func(o *CAMOptions) { o.UserTemplate = "no placeholder" },
		"unmarshalable body": func(o *CAMOptions) { o.ExtraBody = map[string]any{"f": func() {}} },
	} {
		o := testCAMOptions("http://localhost")
		mutate(&o)
		if _, err := NewCAM(o, nil); err == nil {
			t.Errorf("%s: NewCAM accepted %+v", name, o)
		}
	}
}

func TestCAMPromptDefaultTemplate(t *testing.T) {
	o := testCAMOptions("http://localhost")
	o.UserTemplate = ""
	c := newTestCAM(t, o)
	if sys, user := c.Prompt("do it"); sys != o.SystemPrompt || user != "do it" {
		t.Errorf("Prompt = %q, %q", sys, user)
	}
}

func TestCAMVersion(t *testing.T) {
	base := testCAMOptions("http://localhost")
	v0 := newTestCAM(t, base).Version()
	if len(v0) != 12 {
		t.Errorf("Version = %q, want 12 hex chars", v0)
	}
	same := map[string]func(*CAMOptions){
		"base url": func(o *CAMOptions) { o.BaseURL = "http://elsewhere/v1" },
		"api key":  func(o *CAMOptions) { o.APIKey = "k" },
		"name":     func(o *CAMOptions) { o.Name = "other" },
		"extra body rebuilt": func(o *CAMOptions) {
			o.ExtraBody = map[string]any{"top_k": 20, "chat_template_kwargs": map[string]any{"enable_thinking": false}}
		},
	}
	changed := map[string]func(*CAMOptions){
		"model":         func(o *CAMOptions) { o.Model = "cam-2" },
		"system prompt": func(o *CAMOptions) { o.SystemPrompt += "!" },
		"user template": func(o *CAMOptions) { o.UserTemplate = "{{task}}" },
		"max tokens":    func(o *CAMOptions) { o.MaxTokens++ },
		"temperature":   func(o *CAMOptions) { o.Temperature = 0.7 },
		"extra body": func(o *CAMOptions) {
			o.ExtraBody = map[string]any{"top_k": 20, "chat_template_kwargs": map[string]any{"enable_thinking": true}}
		},
	}
	for name, mutate := range same {
		o := testCAMOptions("http://localhost")
		mutate(&o)
		if v := newTestCAM(t, o).Version(); v != v0 {
			t.Errorf("%s: Version changed %s → %s", name, v0, v)
		}
	}
	for name, mutate := range changed {
		o := testCAMOptions("http://localhost")
		mutate(&o)
		if v := newTestCAM(t, o).Version(); v == v0 {
			t.Errorf("%s: Version did not change", name)
		}
	}
}
