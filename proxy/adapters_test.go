package proxy

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/protocol/registry"
)

// TestLookupReachesEveryProtocol: with every provider's upstream configured, each
// registry protocol's example path reaches that protocol's route, augmented, bound
// to its provider's upstream, and a failure before the handler on it gets its
// error shape.
func TestLookupReachesEveryProtocol(t *testing.T) {
	ups := map[string]*Upstream{}
	for _, p := range registry.Providers {
		ups[p.Name] = &Upstream{Name: p.Name, Base: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}}
	}
	s := &Server{}
	s.routes, s.protocols = buildRoutes(ups)
	for _, p := range registry.All {
		var fc fasthttp.RequestCtx
		fc.Request.SetRequestURI(p.Example)
		fc.Request.Header.SetMethod(fasthttp.MethodPost)
		rt, augmented := s.lookup(&fc)
		if rt.Protocol != p || !augmented || rt.up != ups[p.Provider.Name] {
			t.Errorf("%s: %s reaches %s (augmented %v, upstream %s)", p.Explain, p.Example, rt.Explain, augmented, rt.up.Name)
		}
		if styleFor(&fc) != p.Errors {
			t.Errorf("%s: its early errors are in the %s shape, not %s", p.Explain, styleFor(&fc).Name, p.Errors.Name)
		}
	}
}

// TestKeyAuth: a configured key replaces the client's credentials the way the
// provider's registry entry says: in its header, with its prefix, the client's
// other credential headers dropped; or in its query parameter.
func TestKeyAuth(t *testing.T) {
	ctx := context.Background()
	var req fasthttp.Request
	req.Header.SetRequestURI("/v1/chat/completions?key=client&alt=sse")
	req.Header.SetHost("up.test")
	req.Header.Set("Api-Key", "client")
	req.Header.Set("Authorization", "Bearer client")
	if err := KeyAuth(registry.OpenAI.Auth, "sk-conf").Apply(ctx, &req, nil); err != nil {
		t.Fatal(err)
	}
	if string(req.Header.Peek("Authorization")) != "Bearer sk-conf" || len(req.Header.Peek("Api-Key")) != 0 {
		t.Errorf("OpenAI: %s", req.Header.Header())
	}
	var anth fasthttp.Request
	anth.Header.Set("Authorization", "Bearer client")
	if err := KeyAuth(registry.Anthropic.Auth, "sk-ant").Apply(ctx, &anth, nil); err != nil {
		t.Fatal(err)
	}
	if string(anth.Header.Peek("X-Api-Key")) != "sk-ant" || len(anth.Header.Peek("Authorization")) != 0 {
		t.Errorf("Anthropic: %s", anth.Header.Header())
	}
	q := KeyAuth(registry.Auth{Kind: registry.AuthQuery, Name: "key"}, "conf")
	if err := q.Apply(ctx, &req, nil); err != nil {
		t.Fatal(err)
	}
	path, query, _ := strings.Cut(string(req.Header.RequestURI()), "?")
	if got, _ := url.ParseQuery(query); path != "/v1/chat/completions" || got.Get("key") != "conf" || got.Get("alt") != "sse" {
		t.Errorf("query key: %s", req.Header.RequestURI())
	}
	if KeyAuth(registry.AWSBedrock.Auth, "x") != nil {
		t.Error("SigV4 has no key auth")
	}
}

// TestGeminiKeyPlaced: Gemini's configured key replaces the client's where the
// client sent it — ?key= in place, every other byte of the query kept, and no
// header added; x-goog-api-key in the header — a call with neither gets the header,
// and a Vertex call with only a bearer token goes through untouched.
func TestGeminiKeyPlaced(t *testing.T) {
	auth := KeyAuth(registry.Google.Auth, "conf key")
	for _, tc := range []struct {
		name, uri, header, authz string
		wantURI, wantHeader      string
		wantAuthz                string
	}{
		{"query", "/v1beta/models/m:streamGenerateContent?alt=sse&key=client", "", "",
			"/v1beta/models/m:streamGenerateContent?alt=sse&key=conf+key", "", ""},
		{"header", "/v1beta/models/m:generateContent", "client", "",
			"/v1beta/models/m:generateContent", "conf key", ""},
		{"neither", "/v1beta/models?pageSize=5", "", "",
			"/v1beta/models?pageSize=5", "conf key", ""},
		{"vertex bearer", "/v1/projects/p/locations/l/publishers/google/models/m:generateContent", "", "Bearer ya29.token",
			"/v1/projects/p/locations/l/publishers/google/models/m:generateContent", "", "Bearer ya29.token"},
		{"bearer and key", "/v1beta/models/m:generateContent", "client", "Bearer x",
			"/v1beta/models/m:generateContent", "conf key", "Bearer x"},
	} {
		var req fasthttp.Request
		h := &req.Header
		h.SetRequestURI(tc.uri)
		if tc.header != "" {
			h.Set("X-Goog-Api-Key", tc.header)
		}
		if tc.authz != "" {
			h.Set("Authorization", tc.authz)
		}
		if err := auth.Apply(context.Background(), &req, nil); err != nil {
			t.Fatal(err)
		}
		if got := string(h.RequestURI()); got != tc.wantURI {
			t.Errorf("%s: sends %s, want %s", tc.name, got, tc.wantURI)
		}
		if got := string(h.Peek("X-Goog-Api-Key")); got != tc.wantHeader {
			t.Errorf("%s: x-goog-api-key %q, want %q", tc.name, got, tc.wantHeader)
		}
		if got := string(h.Peek("Authorization")); got != tc.wantAuthz {
			t.Errorf("%s: Authorization %q, want %q", tc.name, got, tc.wantAuthz)
		}
	}
}

// TestAzureKeyRewritten: Azure's configured key is set in api-key, over the
// client's key or in place of its Entra bearer (Azure would read either, so the
// bearer is dropped), and the api-version query goes on byte for byte.
func TestAzureKeyRewritten(t *testing.T) {
	auth := KeyAuth(registry.AzureOpenAI.Auth, "az-conf")
	const uri = "/openai/deployments/gpt4/chat/completions?api-version=2024-10-21&x=a%2Fb"
	for _, tc := range []struct{ name, apiKey, authz string }{
		{"api-key", "client-key", ""},
		{"entra bearer", "", "Bearer eyJ0eXAi.entra"},
		{"both", "client-key", "Bearer eyJ0eXAi.entra"},
	} {
		var req fasthttp.Request
		h := &req.Header
		h.SetRequestURI(uri)
		for name, v := range map[string]string{"Api-Key": tc.apiKey, "Authorization": tc.authz} {
			if v != "" {
				h.Set(name, v)
			}
		}
		if err := auth.Apply(context.Background(), &req, nil); err != nil {
			t.Fatal(err)
		}
		if got := string(h.Peek("Api-Key")); got != "az-conf" {
			t.Errorf("%s: api-key %q", tc.name, got)
		}
		if got := string(h.Peek("Authorization")); got != "" {
			t.Errorf("%s: Authorization %q still sent", tc.name, got)
		}
		if got := string(h.RequestURI()); got != uri {
			t.Errorf("%s: sent %s, want %s", tc.name, got, uri)
		}
	}
}
