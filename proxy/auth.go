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

// Auth fits a forwarded request's credentials to its upstream. Without one the
// client's own credentials go through untouched.
type Auth interface {
	Apply(ctx context.Context, req *http.Request, body []byte) error
}

// headerAuth is an Auth that only rewrites headers: the fasthttp client applies it
// to its own request, without building a net/http one.
type headerAuth interface {
	Auth
	applyHeaders(h *fasthttp.RequestHeader)
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

func (k HeaderKey) Apply(_ context.Context, req *http.Request, _ []byte) error {
	for _, d := range k.Drop {
		req.Header.Del(d)
	}
	req.Header.Set(k.Name, k.Value)
	return nil
}

func (k HeaderKey) applyHeaders(h *fasthttp.RequestHeader) {
	for _, d := range k.Drop {
		h.Del(d)
	}
	h.Set(k.Name, k.Value)
}

// QueryKey replaces the client's key in a query parameter (?key=) with a configured one.
type QueryKey struct{ Name, Key string }

func (k QueryKey) Apply(_ context.Context, req *http.Request, _ []byte) error {
	q := req.URL.Query()
	q.Set(k.Name, k.Key)
	req.URL.RawQuery = q.Encode()
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

func (k PlacedKey) Apply(_ context.Context, req *http.Request, _ []byte) error {
	q, inQuery := replaceQueryKey(req.URL.RawQuery, k.Query, k.Key)
	switch {
	case inQuery:
		req.URL.RawQuery = q
	case k.passed(req.Header.Get("Authorization"), req.Header.Get(k.Header)):
	default:
		req.Header.Set(k.Header, k.Key)
	}
	return nil
}

func (k PlacedKey) applyHeaders(h *fasthttp.RequestHeader) {
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

func (s *SigV4) Apply(ctx context.Context, req *http.Request, body []byte) error {
	authz := req.Header.Get("Authorization")
	if strings.HasPrefix(authz, "Bearer ") {
		return nil
	}
	region := s.Region
	if region == "" {
		region = scopeRegion(authz)
	}
	if !s.Endpoint {
		req.URL.Host = "bedrock-runtime." + region + ".amazonaws.com"
		req.URL.Scheme = "https"
		req.Host = ""
	}
	for _, h := range amzHeaders {
		req.Header.Del(h)
	}
	creds, err := s.Credentials.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("no AWS credentials to sign the Bedrock call (env, shared config, IRSA or pod identity): %w", err)
	}
	sum := sha256.Sum256(body)
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	if err := s.Signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "bedrock", region, now().UTC()); err != nil {
		return fmt.Errorf("signing the Bedrock call: %w", err)
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
