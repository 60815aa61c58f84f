package testkit

import (
	"net/http"
	"strings"
)

// The Upstream also serves Azure OpenAI's paths, as an Azure OpenAI resource
// (https://{resource}.openai.azure.com) does: /openai/deployments/{d}/chat/completions
// and …/responses, /openai/responses, which all require ?api-version=, and the
// /openai/v1/ form, which takes none. The bodies and answers are OpenAI's, so they
// are served by the same handlers. Azure authenticates by the api-key header (or a
// Microsoft Entra bearer token) and answers a wrong one with 401 in its own shape.

// SetAzureKey makes key the only api-key the Azure paths accept ("" accepts any
// api-key or bearer token, but still requires one).
func (u *Upstream) SetAzureKey(key string) {
	u.Configure(func(u *Upstream) { u.azureKey = key })
}

// azure serves a call on /openai/; it reports false for other paths.
func (u *Upstream) azure(w http.ResponseWriter, r *http.Request, body []byte) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/openai/")
	if !ok {
		return false
	}
	u.mu.Lock()
	want := u.azureKey
	u.mu.Unlock()
	key := r.Header.Get("Api-Key")
	bearer, hasBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch {
	case key == "" && !hasBearer:
		writeAzureError(w, http.StatusUnauthorized, "401", "Access denied due to missing subscription key. Make sure to include subscription key when making requests to an API.")
		return true
	case want != "" && key != want && (key != "" || bearer != want):
		writeAzureError(w, http.StatusUnauthorized, "401", "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.")
		return true
	}
	api, v1 := strings.CutPrefix(rest, "v1/")
	if !v1 {
		if d, a, ok := strings.Cut(strings.TrimPrefix(rest, "deployments/"), "/"); ok && d != "" && strings.HasPrefix(rest, "deployments/") {
			api = a
		}
		if r.URL.Query().Get("api-version") == "" {
			writeAzureError(w, http.StatusNotFound, "404", "Resource not found")
			return true
		}
	}
	switch api {
	case "chat/completions":
		u.chat(w, r, body)
	case "responses":
		u.responses(w, r, body)
	default:
		writeAzureError(w, http.StatusNotFound, "404", "Resource not found")
	}
	return true
}

func writeAzureError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"error":{"code":"` + code + `","message":"` + msg + `"}}`))
}
