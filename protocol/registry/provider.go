package registry

import "slices"

// Provider is one upstream: the key of its block under `upstreams` in the config
// and of the proxy's upstreams, with what its calls need wherever they go.
type Provider struct {
	Name  string // the upstreams key; the passthrough metric label
	GenAI string // the GenAI semantic-conventions provider, for spans
	// BaseURL is the default upstream. "" with BaseFrom set: derived from the
	// block (Bedrock's regional endpoint); "" without it: no upstream until the
	// config gives base_url (Azure, where each resource has its own).
	BaseURL string
	Auth    Auth
	// Keys are the keys of its block under `upstreams` in the config (config.Upstream's
	// yaml keys); a key outside them is reported as unknown.
	Keys []string
	// Defaults are the block's values where the config gives none, beside BaseURL
	// and the timeouts every upstream shares: "region", "websocket".
	Defaults map[string]string
	// BaseFrom derives the base URL from the block's region and endpoint (Bedrock).
	BaseFrom func(region, endpoint string) string
}

// HTTPKeys are the keys of an HTTP provider's block.
var HTTPKeys = []string{"base_url", "api_key", "first_byte_timeout", "idle_timeout"}

// OptionalBase says whether the provider has no upstream until the config gives one.
func (p *Provider) OptionalBase() bool { return p.BaseURL == "" && p.BaseFrom == nil }

// ProviderNamed is the provider whose upstreams key is name, or nil.
func ProviderNamed(name string) *Provider {
	for _, p := range Providers {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// ProviderNames are the upstreams keys, in Providers' order.
func ProviderNames() []string {
	names := make([]string, len(Providers))
	for i, p := range Providers {
		names[i] = p.Name
	}
	return names
}

// AuthKind is how a provider's calls are authenticated.
type AuthKind int

const (
	// AuthHeader: a key in a header (Authorization: Bearer, x-api-key …).
	AuthHeader AuthKind = iota
	// AuthQuery: a key in a query parameter (Gemini's ?key=).
	AuthQuery
	// AuthSigV4: AWS Signature V4 over the exact request sent.
	AuthSigV4
)

// Auth says how a configured key replaces the client's own credentials. Without a
// configured key the client's credentials go through untouched.
type Auth struct {
	Kind AuthKind
	// Name is the header (AuthHeader) or query parameter (AuthQuery) the key is
	// set in; Prefix goes before the key ("Bearer ").
	Name   string
	Prefix string
	// Drop are the client's other credential headers, removed when the key is set
	// (an OpenAI-compatible gateway may read Api-Key before Authorization).
	Drop []string
	// Query (AuthHeader) is a query parameter clients may send the key in instead:
	// a call that did gets the configured key there, and no header.
	Query string
	// PassBearer: a call that carries Authorization: Bearer and no key where this
	// provider reads one is passed through as it is (Vertex AI's OAuth tokens, which
	// a configured API key cannot stand for).
	PassBearer bool
}

// OpenAI is the OpenAI API, or any OpenAI-compatible server.
// Its block adds websocket: whether agents' WebSocket sessions get a socket of their
// own to the upstream (auto, true or false).
var OpenAI = &Provider{Name: "openai", GenAI: "openai", BaseURL: "https://api.openai.com",
	Auth: Auth{Kind: AuthHeader, Name: "Authorization", Prefix: "Bearer ", Drop: []string{"Api-Key"}},
	Keys: append(slices.Clone(HTTPKeys), "websocket"), Defaults: map[string]string{"websocket": "auto"}}

// Anthropic is the Anthropic API.
var Anthropic = &Provider{Name: "anthropic", GenAI: "anthropic", BaseURL: "https://api.anthropic.com",
	Auth: Auth{Kind: AuthHeader, Name: "X-Api-Key", Drop: []string{"Authorization"}}, Keys: HTTPKeys}

// AWSBedrock is Bedrock's runtime API: its base is the region's endpoint, or the
// block's endpoint. Its block has no key: calls are signed with AWS credentials.
var AWSBedrock = &Provider{Name: "bedrock", GenAI: "aws.bedrock", Auth: Auth{Kind: AuthSigV4},
	Keys:     []string{"region", "endpoint", "first_byte_timeout", "idle_timeout"},
	Defaults: map[string]string{"region": "us-east-1"},
	BaseFrom: func(region, endpoint string) string {
		if endpoint != "" {
			return endpoint
		}
		return "https://bedrock-runtime." + region + ".amazonaws.com"
	}}

// Google is the Gemini API. Its clients send an API key in x-goog-api-key or in
// ?key=; a configured key replaces it where the client put it. Vertex AI's OAuth
// bearer tokens are no API key: they go through untouched.
var Google = &Provider{Name: "gemini", GenAI: "gcp.gemini", BaseURL: "https://generativelanguage.googleapis.com",
	Auth: Auth{Kind: AuthHeader, Name: "X-Goog-Api-Key", Query: "key", PassBearer: true}, Keys: HTTPKeys}

// AzureOpenAI is an Azure OpenAI resource (https://{resource}.openai.azure.com): no
// default base, as each resource has its own. Its clients send a key in api-key
// or a Microsoft Entra token in Authorization: Bearer; a configured key is set in
// api-key and the client's bearer dropped (Azure would read either).
var AzureOpenAI = &Provider{Name: "azure", GenAI: "azure.ai.openai",
	Auth: Auth{Kind: AuthHeader, Name: "Api-Key", Drop: []string{"Authorization"}}, Keys: HTTPKeys}

// Providers are the upstreams, in All's order of first use.
var Providers = []*Provider{OpenAI, AzureOpenAI, Anthropic, AWSBedrock, Google}
