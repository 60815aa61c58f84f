package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// openPaths stay reachable without the admin token: probes and scrapers.
var openPaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// tokenCookie carries the token for a browser on /ui, which cannot send a header
// on navigation: GET /ui?token=… sets it.
const tokenCookie = "camproxy_admin"

// requireToken rejects a request without the admin token with 401. The token is
// compared in constant time (over hashes, so its length does not leak either).
func requireToken(token string) func(http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	ok := func(got string) bool {
		h := sha256.Sum256([]byte(got))
		return got != "" && subtle.ConstantTimeCompare(h[:], want[:]) == 1
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if openPaths[r.URL.Path] {
				next.ServeHTTP(w, r)
				return
			}
			if bearer, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found && ok(bearer) {
				next.ServeHTTP(w, r)
				return
			}
			if c, err := r.Cookie(tokenCookie); err == nil && ok(c.Value) {
				next.ServeHTTP(w, r)
				return
			}
			if q := r.URL.Query().Get("token"); r.Method == http.MethodGet && ok(q) {
				http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: q, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
				u := *r.URL
				qs := u.Query()
				qs.Del("token")
				u.RawQuery = qs.Encode()
				http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther) // the token leaves the address bar
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="camproxy admin"`)
			writeErr(w, http.StatusUnauthorized, "this admin endpoint needs the admin token: Authorization: Bearer TOKEN (admin.token)")
		})
	}
}
