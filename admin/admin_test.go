package admin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/camproxy/camproxy/metrics"
)

func TestHealthReadyMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.Requests.WithLabelValues("openai", "coding", "cam", "200").Inc()
	m.Context.WithLabelValues("coding", "cam", "hit").Inc()
	m.ReplayQueue.Set(3)
	redisDown := errors.New("dial tcp 127.0.0.1:6379: connection refused")
	var fail bool
	h := New(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Gatherer: reg, Ready: []Check{
		{Name: "config", Fn: func(context.Context) error { return nil }},
		{Name: "redis", Fn: func(context.Context) error {
			if fail {
				return redisDown
			}
			return nil
		}},
	}})
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("readyz %d while every check passes", code)
	}
	fail = true
	code, body := get("/readyz")
	if code != 503 || !strings.Contains(body, `"redis"`) || !strings.Contains(body, "connection refused") {
		t.Fatalf("readyz with redis down: %d %s", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatal("healthz must stay up while not ready")
	}
	_, text := get("/metrics")
	for _, want := range []string{
		`camproxy_requests_total{arm="cam",code="200",experiment="coding",protocol="openai"} 1`,
		`camproxy_context_total{arm="cam",experiment="coding",result="hit"} 1`,
		`camproxy_replay_queue_depth 3`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(text, "go_goroutines") {
		t.Error("the default registry leaked in: only camproxy's registry is served")
	}
}
