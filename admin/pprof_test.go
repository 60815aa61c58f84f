package admin

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestPprof: the profiler answers behind the admin token (401 without it, 200
// with it), from a loopback peer only when no token is set, and not at all with
// admin.pprof off.
func TestPprof(t *testing.T) {
	const token = "s3cr3t-admin-token-0123456789"
	newAdmin := func(token string, pprof bool) func(path, auth, peer string) *httptest.ResponseRecorder {
		h := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Gatherer: prometheus.NewRegistry(),
			Token: token, Pprof: pprof})
		return func(path, auth, peer string) *httptest.ResponseRecorder {
			r := httptest.NewRequest("GET", path, nil)
			r.RemoteAddr = peer
			if auth != "" {
				r.Header.Set("Authorization", "Bearer "+auth)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
	}
	const local, remote = "127.0.0.1:40000", "10.1.2.3:40000"
	withToken, noToken, off := newAdmin(token, true), newAdmin("", true), newAdmin(token, false)
	for _, c := range []struct {
		name       string
		do         func(path, auth, peer string) *httptest.ResponseRecorder
		path, auth string
		peer       string
		want       int
		body       string // in the answer when 200
	}{
		{"index without token", withToken, "/debug/pprof/", "", remote, 401, ""},
		{"index, wrong token", withToken, "/debug/pprof/", "wrong-token-0123456789", remote, 401, ""},
		{"heap without token", withToken, "/debug/pprof/heap", "", local, 401, ""},
		{"cmdline without token", withToken, "/debug/pprof/cmdline", "", local, 401, ""},
		{"index", withToken, "/debug/pprof/", token, remote, 200, "goroutine"},
		{"goroutine dump", withToken, "/debug/pprof/goroutine?debug=1", token, remote, 200, "goroutine profile:"},
		{"heap", withToken, "/debug/pprof/heap?debug=1", token, remote, 200, "heap profile:"},
		{"cmdline", withToken, "/debug/pprof/cmdline", token, remote, 200, ""},
		{"symbol", withToken, "/debug/pprof/symbol", token, remote, 200, "num_symbols"},
		{"no token, loopback", noToken, "/debug/pprof/goroutine?debug=1", "", local, 200, "goroutine profile:"},
		{"no token, other host", noToken, "/debug/pprof/", "", remote, 403, ""},
		{"pprof off", off, "/debug/pprof/", token, remote, 404, ""},
	} {
		w := c.do(c.path, c.auth, c.peer)
		if w.Code != c.want {
			t.Errorf("%s: GET %s: %d, want %d: %.200s", c.name, c.path, w.Code, c.want, w.Body)
			continue
		}
		if c.want == 200 && !strings.Contains(w.Body.String(), c.body) {
			t.Errorf("%s: GET %s: body lacks %q: %.300s", c.name, c.path, c.body, w.Body)
		}
	}
}
