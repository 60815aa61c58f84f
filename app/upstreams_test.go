package app

import (
	"slices"
	"testing"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/protocol/registry"
	"github.com/camproxy/camproxy/proxy"
)

// TestNewProviderNeedsNoConfigOrAppEdit: a provider added to the registry alone
// gets a config block with its defaults, its keys accepted (and others refused),
// redaction, and an upstream with its key placed as its Auth says: config and app
// read the registry, they name no provider.
func TestNewProviderNeedsNoConfigOrAppEdit(t *testing.T) {
	acme := &registry.Provider{Name: "acme", BaseURL: "https://api.acme.example",
		Auth: registry.Auth{Kind: registry.AuthHeader, Name: "X-Acme-Key"}, Keys: registry.HTTPKeys}
	saved := registry.Providers
	registry.Providers = append(slices.Clone(saved), acme)
	t.Cleanup(func() { registry.Providers = saved })

	if b := config.Default().Upstreams["acme"]; b == nil || b.BaseURL != acme.BaseURL {
		t.Fatalf("Default() block for the new provider: %+v", b)
	}
	if _, err := config.Parse([]byte("upstreams: {acme: {websocket: auto}}"), nil); err == nil {
		t.Error("a key the provider does not list was accepted")
	}
	cfg, err := config.Parse([]byte("upstreams: {acme: {api_key: acme-secret, base_url: 'http://127.0.0.1:1/v1'}}"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Redacted().Upstreams["acme"].APIKey; got != "****" {
		t.Errorf("redacted api_key = %q", got)
	}
	ups, err := buildUpstreams(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	u := ups["acme"]
	if u == nil || u.Base.String() != "http://127.0.0.1:1/v1" || u.FirstByteTimeout <= 0 {
		t.Fatalf("upstream = %+v", u)
	}
	if k, ok := u.Auth.(proxy.HeaderKey); !ok || k.Name != "X-Acme-Key" || k.Value != "acme-secret" {
		t.Errorf("auth = %#v", u.Auth)
	}
	// Azure (no default base) has no upstream until one is configured.
	if ups["azure"] != nil {
		t.Error("an azure upstream without upstreams.azure.base_url")
	}
	if ups["bedrock"] == nil || ups["bedrock"].Base.Host != "bedrock-runtime.us-east-1.amazonaws.com" {
		t.Errorf("bedrock base = %v", ups["bedrock"])
	}
}
