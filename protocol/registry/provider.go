package registry

// Provider is one upstream: the key of its block under `upstreams` in the config
// and of the proxy's upstreams, with what its calls need wherever they go.
type Provider struct {
	Name  string // the upstreams key; the passthrough metric label
	GenAI string // the GenAI semantic-conventions provider, for spans
	// BaseURL is the default upstream ("" for one derived from other settings:
	// Bedrock's regional endpoint).
	BaseURL string
	Auth    Auth
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
var OpenAI = &Provider{Name: "openai", GenAI: "openai", BaseURL: "https://api.openai.com",
	Auth: Auth{Kind: AuthHeader, Name: "Authorization", Prefix: "Bearer ", Drop: []string{"Api-Key"}}}

// Anthropic is the Anthropic API.
var Anthropic = &Provider{Name: "anthropic", GenAI: "anthropic", BaseURL: "https://api.anthropic.com",
	Auth: Auth{Kind: AuthHeader, Name: "X-Api-Key", Drop: []string{"Authorization"}}}

// AWSBedrock is Bedrock's runtime API: its base is the region's endpoint.
var AWSBedrock = &Provider{Name: "bedrock", GenAI: "aws.bedrock", Auth: Auth{Kind: AuthSigV4}}

// Google is the Gemini API. Its clients send an API key in x-goog-api-key or in
// ?key=; a configured key replaces it where the client put it. Vertex AI's OAuth
// bearer tokens are no API key: they go through untouched.
var Google = &Provider{Name: "gemini", GenAI: "gcp.gemini", BaseURL: "https://generativelanguage.googleapis.com",
	Auth: Auth{Kind: AuthHeader, Name: "X-Goog-Api-Key", Query: "key", PassBearer: true}}

// AzureOpenAI is an Azure OpenAI resource (https://{resource}.openai.azure.com): no
// default base, as each resource has its own. Its clients send a key in api-key
// or a Microsoft Entra token in Authorization: Bearer; a configured key is set in
// api-key and the client's bearer dropped (Azure would read either).
var AzureOpenAI = &Provider{Name: "azure", GenAI: "azure.ai.openai",
	Auth: Auth{Kind: AuthHeader, Name: "Api-Key", Drop: []string{"Authorization"}}}

// Providers are the upstreams, in All's order of first use.
var Providers = []*Provider{OpenAI, AzureOpenAI, Anthropic, AWSBedrock, Google}
