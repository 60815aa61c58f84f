package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/netip"
	"strings"
)

// openPaths stay reachable without the admin token, from any host: probes and scrapers.
var openPaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// tokenCookie carries the token for a browser on /ui, which cannot send a header
// on navigation: GET /ui?token=… sets it.
const tokenCookie = "camproxy_admin"

// uiPath is the one address that takes the token in its query: the dashboard's
// bootstrap. Anywhere else a token in the URL would end up in access logs, proxies
// and browser history, so it is refused rather than quietly accepted.
const uiPath = "/ui"

// guard applies o's access rules to everything but openPaths: the peer first (no
// token and no opt-out, or LoopbackOnly: this host only), then the token if one is set.
func guard(o *Options) func(http.Handler) http.Handler {
	peerOnly := o.LoopbackOnly || (o.Token == "" && !o.AllowUnauthenticated)
	var token func(http.Handler) http.Handler
	if o.Token != "" {
		token = requireToken(o.Token)
	}
	return func(next http.Handler) http.Handler {
		checked := next
		if token != nil {
			checked = token(next)
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if openPaths[r.URL.Path] {
				next.ServeHTTP(w, r)
				return
			}
			if peerOnly && !loopbackPeer(r) {
				msg := "the admin API answers other hosts only with a token: set admin.token (e.g. ${CAMPROXY_ADMIN_TOKEN}) and send Authorization: Bearer TOKEN"
				if o.LoopbackOnly {
					msg = "the admin API answers this host only (admin.loopback_only); /healthz, /readyz and /metrics answer everyone"
				}
				writeErr(w, http.StatusForbidden, msg)
				return
			}
			checked.ServeHTTP(w, r)
		})
	}
}

// loopbackPeer reports whether the request came over a loopback connection. The TCP
// peer only: a forwarding header is the client's say-so.
func loopbackPeer(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// requireToken rejects a request without the admin token with 401. The token is
// compared in constant time (over hashes, so its length does not leak either).
// It is taken from the Authorization header or the cookie /ui?token= sets.
func requireToken(token string) func(http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	ok := func(got string) bool {
		h := sha256.Sum256([]byte(got))
		return got != "" && subtle.ConstantTimeCompare(h[:], want[:]) == 1
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != uiPath && r.URL.Query().Has("token") {
				deny(w, "the admin token is not accepted in the query string (it would be logged): "+
					"send it in the header Authorization: Bearer TOKEN (admin.token); only /ui?token= takes it, to set the dashboard's cookie")
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
			if q := r.URL.Query().Get("token"); r.URL.Path == uiPath && r.Method == http.MethodGet && ok(q) {
				http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: q, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
				u := *r.URL
				qs := u.Query()
				qs.Del("token")
				u.RawQuery = qs.Encode()
				http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther) // the token leaves the address bar
				return
			}
			deny(w, "this admin endpoint needs the admin token: send the header Authorization: Bearer TOKEN (admin.token)")
		})
	}
}

func deny(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="camproxy admin"`)
	writeErr(w, http.StatusUnauthorized, msg)
}
