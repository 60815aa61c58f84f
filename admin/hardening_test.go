package admin

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/internal/testkit"
)

// faultRow logs one row of `make faults`.
var faultRow = testkit.FaultRow

// hardenedRouter is the admin plane with every optional route mounted (episodes,
// feedback, rollouts, the dashboard's), so walking it enumerates them all.
func hardenedRouter(t *testing.T, o Options) *chi.Mux {
	t.Helper()
	store := episode.NewMemory(time.Minute, nil)
	t.Cleanup(func() { _ = store.Close() })
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	o.Gatherer = prometheus.NewRegistry()
	o.Episodes = store
	o.Record = func(any) {}
	o.Recent = NewRecent(4)
	return New(o).(*chi.Mux)
}

// adminRoute is one route of the router, with a path a request can take.
type adminRoute struct{ method, pattern, path string }

func walkRoutes(t *testing.T, r chi.Routes) []adminRoute {
	t.Helper()
	var out []adminRoute
	err := chi.Walk(r, func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		out = append(out, adminRoute{method, pattern, strings.ReplaceAll(pattern, "{id}", "ep_1")})
		return nil
	})
	if err != nil || len(out) < 9 {
		t.Fatalf("walk: %v, %d routes", err, len(out))
	}
	return out
}

func serve(h http.Handler, method, path, remote string, hdr map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(`{"episode_id":"ep_1","reward":1}`))
	r.RemoteAddr = remote
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestHardeningAdminQueryToken (issue 18, 3): on every route of the router but the
// dashboard's bootstrap (/ui), a token in the query string is refused with a 401
// that says to send the header — even the right token, which the URL has leaked
// into access logs; the header and the cookie /ui?token= sets both work.
func TestHardeningAdminQueryToken(t *testing.T) {
	const token = "s3cr3t-admin-token-0123456789"
	h := hardenedRouter(t, Options{Token: token})
	bearer := map[string]string{"Authorization": "Bearer " + token}
	cookie := map[string]string{"Cookie": tokenCookie + "=" + token}
	var refused, total int
	var saw string // what a client sent ?token= got
	for _, rt := range walkRoutes(t, h) {
		if openPaths[rt.pattern] {
			continue
		}
		sep := "?"
		if strings.Contains(rt.path, "?") {
			sep = "&"
		}
		query := rt.path + sep + "token=" + token
		if rt.pattern == uiPath {
			// The bootstrap: the token becomes an HttpOnly, SameSite=Strict cookie and
			// leaves the address bar.
			w := serve(h, rt.method, query+"&tab=x", "127.0.0.1:1", nil)
			ck := w.Result().Cookies()
			if w.Code != http.StatusSeeOther || w.Header().Get("Location") != uiPath+"?tab=x" || len(ck) != 1 ||
				ck[0].Name != tokenCookie || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode {
				t.Errorf("GET /ui?token=: %d %v %+v", w.Code, w.Header(), ck)
			}
			if w := serve(h, rt.method, uiPath+"?token=wrong-token-0123456789", "127.0.0.1:1", nil); w.Code != http.StatusUnauthorized {
				t.Errorf("GET /ui with a wrong token: %d", w.Code)
			}
		} else {
			total++
			for _, hdr := range []map[string]string{nil, bearer} {
				w := serve(h, rt.method, query, "127.0.0.1:1", hdr)
				if w.Code == http.StatusUnauthorized && strings.Contains(w.Body.String(), "Authorization: Bearer") &&
					strings.Contains(w.Body.String(), "query") && len(w.Result().Cookies()) == 0 {
					if hdr == nil {
						refused++
						saw = fmt.Sprintf("%d %.60s…", w.Code, gjson.Get(w.Body.String(), "error.message").String())
					}
					continue
				}
				t.Errorf("%s %s?token= (header %v): %d %v %s, want 401 saying to send the header", rt.method, rt.pattern, hdr != nil, w.Code, w.Header(), w.Body)
			}
		}
		for name, hdr := range map[string]map[string]string{"header": bearer, "cookie": cookie} {
			if w := serve(h, rt.method, rt.path, "127.0.0.1:1", hdr); w.Code == http.StatusUnauthorized || w.Code == http.StatusForbidden {
				t.Errorf("%s %s with the token in the %s: %d %s", rt.method, rt.pattern, name, w.Code, w.Body)
			}
			// A token is a token from any host.
			if w := serve(h, rt.method, rt.path, "203.0.113.9:1", hdr); w.Code == http.StatusUnauthorized || w.Code == http.StatusForbidden {
				t.Errorf("%s %s with the token in the %s from another host: %d %s", rt.method, rt.pattern, name, w.Code, w.Body)
			}
		}
		if w := serve(h, rt.method, rt.path, "127.0.0.1:1", nil); w.Code != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d", rt.method, rt.pattern, w.Code)
		}
	}
	faultRow(t, "admin", "admin token in the query string (API routes)", saw,
		fmt.Sprintf("%d/%d routes refused it; header and /ui cookie accepted", refused, total))
}

// TestHardeningAdminPeer (issue 18, 8): with no token, the API answers loopback
// peers only — a request from another host is refused on every route of the router
// while /healthz, /readyz and /metrics answer it (kubelet, Prometheus). LoopbackOnly
// keeps other hosts out even with a token; AllowUnauthenticated lets them in.
func TestHardeningAdminPeer(t *testing.T) {
	const token = "s3cr3t-admin-token-0123456789"
	bearer := map[string]string{"Authorization": "Bearer " + token}
	for _, c := range []struct {
		name        string
		o           Options
		hdr         map[string]string
		remoteAllow bool // another host reaches the API
	}{
		{"no token", Options{}, nil, false},
		{"no token, from a v4-mapped v6 peer", Options{}, nil, false},
		{"loopback_only with a token", Options{Token: token, LoopbackOnly: true}, bearer, false},
		{"allow_unauthenticated", Options{AllowUnauthenticated: true}, nil, true},
		{"token", Options{Token: token}, bearer, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := hardenedRouter(t, c.o)
			remote := "10.1.2.3:40000"
			if strings.Contains(c.name, "v6") {
				remote = "[::ffff:10.1.2.3]:40000"
			}
			var refused, api, probes int
			for _, rt := range walkRoutes(t, h) {
				far := serve(h, rt.method, rt.path, remote, c.hdr)
				near := serve(h, rt.method, rt.path, "127.0.0.1:50000", c.hdr)
				near6 := serve(h, rt.method, rt.path, "[::1]:50000", c.hdr)
				if openPaths[rt.pattern] {
					if far.Code == http.StatusOK {
						probes++
					} else {
						t.Errorf("%s %s from another host: %d, want 200 (probes and scrapes come from other hosts)", rt.method, rt.pattern, far.Code)
					}
					continue
				}
				api++
				for _, w := range []*httptest.ResponseRecorder{near, near6} {
					if w.Code == http.StatusForbidden || w.Code == http.StatusUnauthorized {
						t.Errorf("%s %s from loopback: %d %s", rt.method, rt.pattern, w.Code, w.Body)
					}
				}
				blocked := far.Code == http.StatusForbidden
				if blocked {
					refused++
				}
				if blocked == c.remoteAllow {
					t.Errorf("%s %s from another host: %d %s (other hosts allowed: %v)", rt.method, rt.pattern, far.Code, far.Body, c.remoteAllow)
				}
				if blocked && !strings.Contains(far.Body.String(), "admin.") {
					t.Errorf("403 does not name the setting: %s", far.Body)
				}
			}
			if c.name == "no token" {
				faultRow(t, "admin", "admin API from another host, no admin.token", fmt.Sprintf("403 on %d/%d API routes", refused, api),
					fmt.Sprintf("%d/%d probe and scrape routes 200", probes, len(openPaths)))
			}
		})
	}
}

// localRequest is a request from a process on this host: without a token the admin
// API answers only those (httptest's default peer, 192.0.2.1, is another host).
func localRequest(method, target string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, target, body)
	r.RemoteAddr = "127.0.0.1:40000"
	return r
}
