package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/protocol/registry"
)

// Auth fits a forwarded request's credentials to its upstream: it rewrites the
// upstream request (fasthttp's, its origin-form target and Host set) in place, one
// method per kind of credential. Without one the client's own credentials go
// through untouched.
type Auth interface {
	// Apply sets req's credentials; body is what req sends. Only a signer may change
	// req's Host, to another https host of its provider (SigV4's regional endpoint),
	// where the call then goes.
	Apply(ctx context.Context, req *fasthttp.Request, body []byte) error
}

// KeyAuth is the Auth that sets a configured key the way a provider reads it
// (registry.Auth), or nil for a SigV4 provider (SigV4 is built with credentials).
func KeyAuth(a registry.Auth, key string) Auth {
	switch a.Kind {
	case registry.AuthHeader:
		if a.Query != "" || a.PassBearer {
			return PlacedKey{Header: a.Name, Query: a.Query, Key: key, PassBearer: a.PassBearer}
		}
		return HeaderKey{Name: a.Name, Value: a.Prefix + key, Drop: a.Drop}
	case registry.AuthQuery:
		return QueryKey{Name: a.Name, Key: key}
	}
	return nil
}

// HeaderKey replaces the client's credentials with a configured key in a header
// (Authorization: Bearer for OpenAI, x-api-key for Anthropic).
type HeaderKey struct {
	Name, Value string
	Drop        []string // the client's other credential headers
}

func (k HeaderKey) Apply(_ context.Context, req *fasthttp.Request, _ []byte) error {
	for _, d := range k.Drop {
		req.Header.Del(d)
	}
	req.Header.Set(k.Name, k.Value)
	return nil
}

// QueryKey replaces the client's key in a query parameter (?key=) with a configured
// one. The query is re-encoded (url.Values: parameters sorted by name).
type QueryKey struct{ Name, Key string }

func (k QueryKey) Apply(_ context.Context, req *fasthttp.Request, _ []byte) error {
	path, query, _ := strings.Cut(string(req.Header.RequestURI()), "?")
	q, _ := url.ParseQuery(query) // as url.URL.Query: a malformed pair is dropped
	q.Set(k.Name, k.Key)
	req.Header.SetRequestURI(path + "?" + q.Encode())
	return nil
}

// PlacedKey replaces the client's key where the client put it (Gemini's
// x-goog-api-key header or ?key= query parameter), so that the upstream reads it
// where the client's own SDK sends it; a call with neither gets the header. With
// PassBearer, a call that carries Authorization: Bearer and no key (Vertex AI's
// OAuth token) goes through untouched.
type PlacedKey struct {
	Header, Query, Key string
	PassBearer         bool
}

func (k PlacedKey) Apply(_ context.Context, req *fasthttp.Request, _ []byte) error {
	h := &req.Header
	uri := h.RequestURI()
	path, query, _ := strings.Cut(string(uri), "?")
	q, inQuery := replaceQueryKey(query, k.Query, k.Key)
	switch {
	case inQuery:
		h.SetRequestURI(path + "?" + q)
	case k.passed(string(h.Peek("Authorization")), string(h.Peek(k.Header))):
	default:
		h.Set(k.Header, k.Key)
	}
	return nil
}

// passed says whether a call goes through with the client's own credential.
func (k PlacedKey) passed(authz, key string) bool {
	return k.PassBearer && key == "" && strings.HasPrefix(authz, "Bearer ")
}

// replaceQueryKey sets the value of every name= parameter of a raw query to key,
// each other byte as the client sent it (url.Values would reorder and re-escape the
// query). It reports whether the query had one.
func replaceQueryKey(raw, name, key string) (string, bool) {
	if name == "" || raw == "" {
		return raw, false
	}
	params := strings.Split(raw, "&")
	found := false
	for i, param := range params {
		pk, _, _ := strings.Cut(param, "=")
		if pk == name {
			params[i] = name + "=" + url.QueryEscape(key)
			found = true
		}
	}
	if !found {
		return raw, false
	}
	return strings.Join(params, "&"), true
}

// SigV4 re-signs Bedrock calls: the agent's signature cannot survive a changed body,
// so camproxy signs the exact host and escaped path it sends with its own credentials
// (the AWS default chain: env, shared config, web identity/IRSA, pod identity). A client
// that uses a Bedrock API key (Authorization: Bearer …) is passed through as it is.
type SigV4 struct {
	Credentials aws.CredentialsProvider
	// Region signs and, without Endpoint, names the regional endpoint; "" takes the
	// region of the client's own signature scope, else us-east-1.
	Region string
	// Endpoint pins the upstream host; "" = https://bedrock-runtime.{region}.amazonaws.com.
	Endpoint bool
	Signer   *v4.Signer
	Now      func() time.Time
}

// amzHeaders are the client's signing headers, meaningless once camproxy re-signs.
var amzHeaders = []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256"}

func (s *SigV4) Apply(ctx context.Context, req *fasthttp.Request, body []byte) error {
	h := &req.Header
	authz := string(h.Peek("Authorization"))
	if strings.HasPrefix(authz, "Bearer ") {
		return nil
	}
	region := s.Region
	if region == "" {
		region = scopeRegion(authz)
	}
	if !s.Endpoint {
		h.SetHost("bedrock-runtime." + region + ".amazonaws.com")
	}
	for _, name := range amzHeaders {
		h.Del(name)
	}
	creds, err := s.Credentials.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("no AWS credentials to sign the Bedrock call (env, shared config, IRSA or pod identity): %w", err)
	}
	// The signer reads a net/http request: one made for it alone, of the method,
	// host, target and headers req sends. Its signature headers are copied back, and
	// its target: the signer re-encodes the query it signs, and req sends exactly
	// what was signed.
	target, err := url.ParseRequestURI(string(h.RequestURI()))
	if err != nil {
		return fmt.Errorf("signing the Bedrock call: %w", err)
	}
	target.Host = string(h.Host())
	signed := &http.Request{Method: string(h.Method()), URL: target, Host: target.Host, Header: http.Header{},
		ContentLength: int64(len(body))}
	for k, v := range h.All() {
		if ks := string(k); ks != "Host" && ks != "Content-Length" {
			signed.Header.Add(ks, string(v))
		}
	}
	sum := sha256.Sum256(body)
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	if err := s.Signer.SignHTTP(ctx, creds, signed, hex.EncodeToString(sum[:]), "bedrock", region, now().UTC()); err != nil {
		return fmt.Errorf("signing the Bedrock call: %w", err)
	}
	h.SetRequestURI(signed.URL.RequestURI())
	for _, name := range amzHeaders {
		for _, v := range signed.Header.Values(name) {
			h.Add(name, v)
		}
	}
	return nil
}

// scopeRegion reads the region of a SigV4 Authorization header's credential scope
// (Credential=AKID/20240101/us-west-2/bedrock/aws4_request).
func scopeRegion(authz string) string {
	_, after, ok := strings.Cut(authz, "Credential=")
	if ok {
		parts := strings.Split(strings.SplitN(after, ",", 2)[0], "/")
		if len(parts) >= 3 && parts[2] != "" {
			return parts[2]
		}
	}
	return "us-east-1"
}
