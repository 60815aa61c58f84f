package proxy

import (
	"net/url"
	"testing"
)

func TestTarget(t *testing.T) {
	cases := []struct{ base, uri, want string }{
		{"https://api.openai.com", "/v1/chat/completions", "https://api.openai.com/v1/chat/completions"},
		{"https://api.openai.com/", "/v1/models?limit=2", "https://api.openai.com/v1/models?limit=2"},
		{"http://vllm:8000/v1", "/v1/chat/completions", "http://vllm:8000/v1/chat/completions"},
		{"http://vllm:8000/v1/", "/v1/models", "http://vllm:8000/v1/models"},
		{"http://gw:8000/openai", "/v1/chat/completions", "http://gw:8000/openai/v1/chat/completions"},
		// The request can never change the host: an absolute-form or odd path stays a path.
		{"http://up:1", "//evil.example/v1/x", "http://up:1//evil.example/v1/x"},
	}
	for _, c := range cases {
		u, _ := url.Parse(c.base)
		if got := (&Upstream{Base: u}).target([]byte(c.uri)); got != c.want {
			t.Errorf("target(%s, %s) = %s, want %s", c.base, c.uri, got, c.want)
		}
	}
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"ep_123": true, "run-4.task:7": true, "": false, "a b": false, "a\r\nX-Evil: 1": false,
		"ü": false, string(make([]byte, 129)): false,
	} {
		if validID(id) != want {
			t.Errorf("validID(%q) = %v", id, !want)
		}
	}
}
