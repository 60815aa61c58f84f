package admin

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/camproxy/camproxy/episode"
)

// TestAdminToken: with admin.token set, every endpoint but the probes and the
// scrape needs it, in the header or the dashboard's cookie.
func TestAdminToken(t *testing.T) {
	const token = "s3cr3t-admin-token-0123456789"
	store := episode.NewMemory(time.Minute, nil)
	defer store.Close()
	h := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Gatherer: prometheus.NewRegistry(), Episodes: store,
		Record: func(any) {}, Token: token})
	do := func(method, path, auth, cookie string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, strings.NewReader(`{"episode_id":"ep_1","reward":1}`))
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		if cookie != "" {
			r.Header.Set("Cookie", cookie)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for _, c := range []struct {
		method, path, auth string
		want               int
	}{
		{"GET", "/healthz", "", 200},
		{"GET", "/readyz", "", 200},
		{"GET", "/metrics", "", 200},
		{"POST", "/v1/feedback", "", 401},
		{"POST", "/v1/feedback", "Bearer wrong-token-0123456789", 401},
		{"POST", "/v1/feedback", "Bearer " + token + "x", 401},
		{"POST", "/v1/feedback", token, 401}, // no scheme
		{"POST", "/v1/rollouts", "", 401},
		{"GET", "/v1/episodes/ep_1", "", 401},
		{"GET", "/v1/anything-new", "", 401},                 // endpoints added later are closed by default
		{"POST", "/v1/feedback", "Bearer " + token, 404},     // past the check: the episode is unknown
		{"GET", "/v1/episodes/ep_1", "Bearer " + token, 404}, // past the check
		{"POST", "/v1/feedback?token=" + token, "", 401},     // never in the query
		{"GET", "/v1/status?token=" + token, "", 401},        // never in the query, but on /ui
	} {
		w := do(c.method, c.path, c.auth, "")
		if w.Code != c.want {
			t.Errorf("%s %s auth %q: %d, want %d: %s", c.method, c.path, c.auth, w.Code, c.want, w.Body)
		}
		if w.Code == 401 && (!strings.Contains(w.Body.String(), "admin token") || w.Header().Get("WWW-Authenticate") == "") {
			t.Errorf("401 does not say what is needed: %v %s", w.Header(), w.Body)
		}
		if strings.Contains(w.Body.String(), token) {
			t.Errorf("the token is echoed: %s", w.Body)
		}
	}
	// A browser: the cookie /ui?token= sets (TestHardeningAdminQueryToken) opens the API.
	if w := do("GET", "/v1/episodes/ep_1", "", tokenCookie+"="+token); w.Code != 404 {
		t.Fatalf("with the cookie: %d", w.Code)
	}
	if w := do("GET", "/v1/episodes/ep_1", "", tokenCookie+"=nope"); w.Code != 401 {
		t.Fatalf("with a wrong cookie: %d", w.Code)
	}
	// No token configured: open to this host's processes.
	open := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Gatherer: prometheus.NewRegistry(), Episodes: store, Record: func(any) {}})
	r := localRequest("GET", "/v1/episodes/ep_1", nil)
	rw := httptest.NewRecorder()
	open.ServeHTTP(rw, r)
	if rw.Code != 404 {
		t.Fatalf("no token configured: %d", rw.Code)
	}
}
