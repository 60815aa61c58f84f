package registry_test

import (
	"strings"
	"testing"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/registry"
)

// TestMatchAzure: Azure OpenAI's chat and responses paths, in the deployments,
// resource-wide and v1 forms, are augmented by the Azure entries (so they reach the
// azure upstream); every other /openai/ call is owned by it, untouched; OpenAI's own
// paths are not Azure's. Without the azure upstream the calls are the fallback's.
func TestMatchAzure(t *testing.T) {
	for _, tc := range []struct {
		path      string
		want      *registry.Protocol
		augmented bool
	}{
		{"/openai/deployments/gpt4/chat/completions?api-version=2024-10-21", registry.AzureChat, true},
		{"/openai/deployments/my.deploy-1/chat/completions", registry.AzureChat, true},
		{"/openai/v1/chat/completions", registry.AzureChat, true},
		{"/openai/deployments/gpt4/responses?api-version=2025-04-01-preview", registry.AzureResponses, true},
		{"/openai/responses?api-version=2025-04-01-preview", registry.AzureResponses, true},
		{"/openai/v1/responses", registry.AzureResponses, true},
		{"/openai/deployments/gpt4/embeddings?api-version=2024-10-21", registry.AzureChat, false},
		{"/openai/deployments/gpt4/completions", registry.AzureChat, false},
		{"/openai/deployments/gpt4/chat/completions/extra", registry.AzureChat, false},
		{"/openai/deployments//chat/completions", registry.AzureChat, false},
		{"/openai/chat/completions", registry.AzureChat, false},
		{"/openai/v1/models", registry.AzureChat, false},
		{"/openai/responses/resp_1", registry.AzureChat, false},
		{"/openai/deployments", registry.AzureChat, false},
		{"/openai", registry.AzureChat, false},
		{"/v1/chat/completions", registry.Chat, true},
		{"/v1/responses", registry.Responses, true},
		{"/openaix/deployments/d/chat/completions", registry.Chat, false},
	} {
		i, aug := registry.Match(registry.All, registry.PathCall(tc.path))
		if registry.All[i] != tc.want || aug != tc.augmented {
			t.Errorf("%s: %s augmented %v; want %s %v", tc.path, registry.All[i].Explain, aug, tc.want.Explain, tc.augmented)
		}
	}
	ps := []*registry.Protocol{registry.Responses, registry.Messages, registry.Chat}
	if i, aug := registry.Match(ps, registry.PathCall("/openai/deployments/d/chat/completions")); ps[i] != registry.Chat || aug {
		t.Errorf("/openai/ without the azure upstream: %s augmented %v", ps[i].Explain, aug)
	}
	for _, p := range []*registry.Protocol{registry.AzureChat, registry.AzureResponses} {
		if p.Provider != registry.AzureOpenAI || p.Provider.BaseURL != "" || p.Errors != registry.OpenAIErrors || p.Name != "openai" {
			t.Errorf("%s: provider %v, errors %s, name %s", p.Explain, p.Provider, p.Errors.Name, p.Name)
		}
	}
}

// TestAzureModel: the episode's model is the body's, else the deployment's; the
// task is read as on OpenAI's routes.
func TestAzureModel(t *testing.T) {
	rules := protocol.DefaultTaskRules()
	for _, tc := range []struct {
		p          *registry.Protocol
		path, body string
		model      string
	}{
		{registry.AzureChat, "/openai/deployments/gpt4/chat/completions?api-version=2024-10-21",
			`{"messages":[{"role":"user","content":"fix the build"}]}`, "gpt4"},
		{registry.AzureChat, "/openai/deployments/gpt4/chat/completions",
			`{"model":"gpt-4o","messages":[{"role":"user","content":"fix the build"}]}`, "gpt-4o"},
		{registry.AzureChat, "/openai/v1/chat/completions",
			`{"model":"dep-a","messages":[{"role":"user","content":"fix the build"}]}`, "dep-a"},
		{registry.AzureChat, "/openai/v1/chat/completions",
			`{"messages":[{"role":"user","content":"fix the build"}]}`, ""},
		{registry.AzureResponses, "/openai/deployments/o4/responses", `{"input":"fix the build"}`, "o4"},
		{registry.AzureResponses, "/openai/responses?api-version=x", `{"model":"o4-mini","input":"fix the build"}`, "o4-mini"},
	} {
		req, err := tc.p.Parse(registry.PathCall(tc.path), []byte(tc.body), rules)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		if v := req.Parsed(); v.Model != tc.model || v.Task != "fix the build" {
			t.Errorf("%s %s: model %q task %q; want %q", tc.path, tc.body, v.Model, v.Task, tc.model)
		}
	}
	if _, err := registry.AzureChat.Parse(registry.PathCall("/openai/v1/models"), []byte(`{"messages":[]}`), rules); err == nil {
		t.Error("a path that is no chat or responses call parsed")
	}
}

// FuzzAzurePath: any path is matched without panicking; one the Azure entries
// augment is under /openai/ and ends in the API it names.
func FuzzAzurePath(f *testing.F) {
	for _, s := range []string{"/openai/deployments/d/chat/completions", "/openai/v1/responses", "/openai/responses", "/openai/deployments//responses", "/openai/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		c := registry.PathCall(path)
		for _, p := range []*registry.Protocol{registry.AzureChat, registry.AzureResponses} {
			if !p.Augments(c) {
				continue
			}
			got := string(c.Path())
			if !strings.HasPrefix(got, "/openai/") || !strings.HasSuffix(got, "/chat/completions") && !strings.HasSuffix(got, "/responses") {
				t.Fatalf("%s augments %q", p.Explain, got)
			}
			if _, err := p.Parse(c, []byte(`{"model":"m","messages":[{"role":"user","content":"t"}],"input":"t"}`), protocol.DefaultTaskRules()); err != nil {
				t.Fatalf("%s: %q: %v", p.Explain, got, err)
			}
		}
	})
}
