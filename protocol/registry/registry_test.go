package registry_test

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/gemini"
	"github.com/camproxy/camproxy/protocol/registry"
)

// TestEveryProtocolComplete: each protocol in the table is reachable (its example
// path matches it, augmented), has an error shape that carries the message, a
// task-explain name that finds it, a body parser, and a provider in Providers.
func TestEveryProtocolComplete(t *testing.T) {
	explain := map[string]bool{}
	for _, p := range registry.All {
		t.Run(p.Explain, func(t *testing.T) {
			i, augmented := registry.Match(registry.All, registry.PathCall(p.Example))
			if registry.All[i] != p || !augmented {
				t.Errorf("%s: its example %s matches %s (augmented %v)", p.Explain, p.Example, registry.All[i].Explain, augmented)
			}
			if p.Errors == nil || p.Errors.Body == nil {
				t.Fatalf("%s has no error shape", p.Explain)
			}
			if b := p.Errors.Body(http.StatusBadGateway, "upstream_error", `upstream "x" broke`); !gjson.ValidBytes(b) ||
				!strings.Contains(string(b), `upstream \"x\" broke`) {
				t.Errorf("%s: error body %s does not carry the message", p.Explain, b)
			}
			if registry.ByExplain(p.Explain) != p || explain[p.Explain] {
				t.Errorf("task explain's name %q is not unique to %s", p.Explain, p.Explain)
			}
			explain[p.Explain] = true
			if p.Parse == nil || p.ParseBody == nil || p.Augments == nil {
				t.Errorf("%s lacks a parser or its path match", p.Explain)
			}
			if p.Provider == nil || !slices.Contains(registry.Providers, p.Provider) {
				t.Errorf("%s: its provider is not in Providers", p.Explain)
			}
		})
	}
	if last := registry.All[len(registry.All)-1]; last != registry.Fallback || last.Owns == nil {
		t.Errorf("the last protocol (%s) must be Fallback and own every call", last.Explain)
	}
	if !slices.Equal(registry.ExplainNames(), slices.Collect(func(yield func(string) bool) {
		for _, p := range registry.All {
			if !yield(p.Explain) {
				return
			}
		}
	})) {
		t.Error("ExplainNames is not All's names")
	}
}

// TestMatchOwnsAndPasses: calls a protocol owns but does not augment go to its
// upstream untouched; a call no protocol owns falls to the last.
func TestMatchOwnsAndPasses(t *testing.T) {
	for _, tc := range []struct {
		path      string
		want      *registry.Protocol
		augmented bool
	}{
		{"/v1/messages/count_tokens", registry.Messages, false},
		{"/model/amazon.nova-pro-v1%3A0/count-tokens", registry.Bedrock, false},
		{"/model/amazon.nova-pro-v1%3A0/converse-stream", registry.Bedrock, true},
		{"/v1/embeddings", registry.Chat, false},
		{"/v1/responses", registry.Responses, true},
		{"/v1beta/models/gemini-2.5-pro:generateContent", registry.Gemini, true},
		{"/v1beta/models/gemini-2.5-pro:streamGenerateContent", registry.Gemini, true},
		{"/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:streamGenerateContent", registry.Gemini, true},
		{"/v1beta/models/gemini-2.5-pro:countTokens", registry.Gemini, false},
		{"/v1beta/models", registry.Gemini, false},
		{"/v1beta/models/gemini-2.5-pro", registry.Gemini, false},
		{"/v1beta/files", registry.Gemini, false},
		{"/v1/projects/p/locations/l/publishers/google/models/gemini-2.5-pro:countTokens", registry.Gemini, false},
		{"/v1/models", registry.Chat, false},
	} {
		i, aug := registry.Match(registry.All, registry.PathCall(tc.path))
		if registry.All[i] != tc.want || aug != tc.augmented {
			t.Errorf("%s: %s augmented %v; want %s %v", tc.path, registry.All[i].Explain, aug, tc.want.Explain, tc.augmented)
		}
	}
	// Without Bedrock's upstream its calls are the fallback's, untouched.
	ps := []*registry.Protocol{registry.Responses, registry.Messages, registry.Chat}
	if i, aug := registry.Match(ps, registry.PathCall("/model/x/converse")); ps[i] != registry.Chat || aug {
		t.Errorf("/model/ without Bedrock: %s augmented %v", ps[i].Explain, aug)
	}
}

// TestDetect: a body's protocol is told from its shape as documented in Detect.
func TestDetect(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"model":"m","input":"hi"}`, "responses"},
		{`{"messages":[{"role":"user","content":"hi"}],"input":"x"}`, "openai"},
		{`{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceConfig":{}}`, "bedrock"},
		{`{"prompt":"hi"}`, "bedrock"},
		{`{"anthropic_version":"bedrock-2023-05-31","messages":[]}`, "bedrock"},
		{`{"system":[{"text":"be brief"}],"messages":[]}`, "bedrock"},
		{`{"system":"be brief","messages":[]}`, "anthropic"},
		{`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}]}`, "anthropic"},
		{`{"messages":[{"role":"user","content":[{"toolResult":{}}]}]}`, "bedrock"},
		{`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, "openai"},
		{`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{}}]}]}`, "anthropic"},
		{`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, "gemini"},
		{`{"systemInstruction":{"parts":[{"text":"s"}]},"contents":[]}`, "gemini"},
	} {
		p, err := registry.Detect([]byte(tc.body))
		if err != nil || p.Explain != tc.want {
			t.Errorf("%s: %v %v; want %s", tc.body, p, err, tc.want)
		}
	}
	// The errors every adapter returns for the same bodies (TestParseErrorsAgree).
	for bad, want := range map[string]error{`{`: protocol.ErrInvalidJSON, `[1]`: protocol.ErrMissingMessages, `"x"`: protocol.ErrMissingMessages} {
		if _, err := registry.Detect([]byte(bad)); !errors.Is(err, want) {
			t.Errorf("%s: err %v; want %v", bad, err, want)
		}
	}
}

// FuzzDetect: Detect never panics on untrusted bytes, and what it detects is a
// protocol of the table.
func FuzzDetect(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`))
	f.Add([]byte(`{"system":[{"text":"x"}]}`))
	f.Add([]byte(`{"input":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := registry.Detect(b)
		if err == nil && !slices.Contains(registry.All, p) {
			t.Fatalf("Detect(%q) = %v, not in All", b, p)
		}
	})
}

// TestStreamedGemini: Gemini's JSON-array stream (application/json) is relayed as
// it comes on streamGenerateContent only; generateContent's JSON is one object,
// buffered, and no other protocol streams application/json.
func TestStreamedGemini(t *testing.T) {
	for _, tc := range []struct {
		p    *registry.Protocol
		path string
		ct   string
		want bool
	}{
		{registry.Gemini, "/v1beta/models/m:streamGenerateContent", "application/json; charset=UTF-8", true},
		{registry.Gemini, "/v1beta/models/m:streamGenerateContent?alt=sse", "text/event-stream", true},
		{registry.Gemini, "/v1/projects/p/locations/l/publishers/google/models/m:streamGenerateContent", "application/json", true},
		{registry.Gemini, "/v1beta/models/m:generateContent", "application/json; charset=UTF-8", false},
		{registry.Gemini, "/v1beta/models/m:countTokens", "application/json", false},
		{registry.Chat, "/v1/chat/completions", "application/json", false},
		{registry.Chat, "/v1/chat/completions", "text/event-stream", true},
	} {
		if got := tc.p.Streamed(registry.PathCall(tc.path), []byte(tc.ct)); got != tc.want {
			t.Errorf("%s %s %s: streamed %v, want %v", tc.p.Explain, tc.path, tc.ct, got, tc.want)
		}
	}
}

// TestGeminiParseFromPath: the model and the framing are the path's and its alt's.
func TestGeminiParseFromPath(t *testing.T) {
	body := []byte(`{"contents":[{"role":"user","parts":[{"text":"fix the build"}]}]}`)
	for _, tc := range []struct {
		path    string
		model   string
		stream  bool
		framing gemini.Framing
	}{
		{"/v1beta/models/gemini-2.5-pro:generateContent", "gemini-2.5-pro", false, gemini.FrameJSON},
		{"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", "gemini-2.5-flash", true, gemini.FrameSSE},
		{"/v1beta/models/gemini-2.5-flash:streamGenerateContent", "gemini-2.5-flash", true, gemini.FrameArray},
		{"/v1/projects/p/locations/l/publishers/google/models/gemini-2.0:generateContent", "gemini-2.0", false, gemini.FrameJSON},
	} {
		req, err := registry.Gemini.Parse(registry.PathCall(tc.path), body, protocol.DefaultTaskRules())
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		v := req.Parsed()
		if v.Model != tc.model || v.Stream != tc.stream || v.Task != "fix the build" || req.(*gemini.Request).Framing() != tc.framing {
			t.Errorf("%s: model %q stream %v task %q framing %v", tc.path, v.Model, v.Stream, v.Task, req.(*gemini.Request).Framing())
		}
	}
	if _, err := registry.Gemini.Parse(registry.PathCall("/v1beta/models"), body, nil); err == nil {
		t.Error("a path with no model method parsed")
	}
}
