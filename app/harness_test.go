package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
)

// env is one camproxy in front of a scripted upstream and a scripted CAM.
type env struct {
	t     *testing.T
	up    *testkit.Upstream
	cam   *testkit.CAM
	app   *App
	cfg   *config.Config
	base  string // http://host:port of the data plane
	admin string
}

// testConfig is camproxy on loopback with one CAM arm.
func testConfig(up *testkit.Upstream, cam *testkit.CAM) *config.Config {
	cfg := config.Default()
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Server.AdminListen = "127.0.0.1:0"
	cfg.Upstreams["openai"].BaseURL = up.URL
	ac := config.DefaultAugmenter()
	ac.Type = "cam"
	ac.BaseURL = cam.URL + "/v1"
	// Long enough never to matter: on a loaded machine a CAM answer can take half a
	// second, and a test expecting the context must not get fail-open. The tests of
	// the deadline itself set a short one (TestCAMFailsOpen).
	ac.Timeout = 30 * time.Second
	ac.Breaker = config.Breaker{Failures: 3, OpenFor: 400 * time.Millisecond}
	cfg.Augmenters = map[string]config.Augmenter{"cam": ac}
	cfg.Experiment.Arms = []config.Arm{{Name: "cam", Weight: 1, Augmenter: "cam"}}
	return cfg
}

func newEnv(t *testing.T, mutate func(*config.Config)) *env {
	t.Helper()
	return newEnvWith(t, mutate, Options{Logger: testLogger(t)})
}

// newEnvWith is newEnv with the App's options (a logger to read, a store cooldown).
func newEnvWith(t *testing.T, mutate func(*config.Config), o Options) *env {
	t.Helper()
	up, cam := testkit.NewUpstream(), testkit.NewCAM()
	t.Cleanup(up.Close)
	t.Cleanup(cam.Close)
	cfg := testConfig(up, cam)
	dir := t.TempDir()
	cfg.Replay.Sinks = []string{"file://" + dir + "/replay"}
	cfg.Replay.SpoolDir = dir + "/spool"
	if mutate != nil {
		mutate(cfg)
	}
	e := &env{t: t, up: up, cam: cam, cfg: cfg}
	e.app = startAppWith(t, cfg, o)
	e.base = "http://" + e.app.Addr()
	e.admin = "http://" + e.app.AdminAddr()
	return e
}

func startApp(t *testing.T, cfg *config.Config) *App {
	t.Helper()
	return startAppWith(t, cfg, Options{Logger: testLogger(t)})
}

func startAppWith(t *testing.T, cfg *config.Config, o Options) *App {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config invalid: %v", err)
	}
	a, err := New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	})
	return a
}

// testLogger logs to the test's output: shown for a test that fails (and with
// -v), not spread over stderr for every test that passes.
func testLogger(t *testing.T) *slog.Logger { return testkit.Logger(t, slog.LevelInfo) }

// requireRedis returns a client for the test Redis or skips naming how to get one.
func requireRedis(t *testing.T) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		if os.Getenv("CAMPROXY_REQUIRE_REDIS") == "1" {
			t.Fatalf("redis at 127.0.0.1:6379 not reachable: %v", err)
		}
		t.Skipf("redis at 127.0.0.1:6379 not reachable (%v); `make test` starts one", err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// post sends a chat body to camproxy and returns the response and its body.
func (e *env) post(body []byte, headers map[string]string) (*http.Response, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.base+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-client-key")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("read: %v", err)
	}
	return resp, b
}

// agent plays a tool-calling agent: it keeps the conversation and sends it whole each
// turn, as chat APIs require.
type agent struct {
	msgs    []json.RawMessage
	episode string // sent as X-CAM-Episode-Id when useHeader
	header  bool
	model   string
}

func newAgent(task string, header bool) *agent {
	a := &agent{header: header, model: "gpt-4o"}
	a.add(map[string]any{"role": "system", "content": "You are an airline agent. Follow the policy."})
	a.add(map[string]any{"role": "user", "content": task})
	return a
}

func (a *agent) add(m any) {
	b, _ := json.Marshal(m)
	a.msgs = append(a.msgs, b)
}

func (a *agent) body(extra string) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"` + a.model + `","messages":[`)
	for i, m := range a.msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	b.WriteString(`],"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object"}}}]` + extra + `}`)
	return []byte(b.String())
}

// turn sends the conversation, appends the assistant answer and, for a tool call, a
// tool result. It returns the response headers.
func (e *env) turn(a *agent) http.Header {
	e.t.Helper()
	h := map[string]string{}
	if a.header && a.episode != "" {
		h["X-CAM-Episode-Id"] = a.episode
	}
	resp, body := e.post(a.body(""), h)
	if resp.StatusCode != 200 {
		e.t.Fatalf("turn: status %d: %s", resp.StatusCode, body)
	}
	msg := gjson.GetBytes(body, "choices.0.message")
	a.msgs = append(a.msgs, json.RawMessage(msg.Raw))
	if calls := msg.Get("tool_calls").Array(); len(calls) > 0 {
		a.add(map[string]any{"role": "tool", "tool_call_id": calls[0].Get("id").String(), "content": `{"status":"on time"}`})
	} else {
		a.add(map[string]any{"role": "user", "content": "thanks, one more thing"})
	}
	if a.episode == "" {
		a.episode = resp.Header.Get("X-CAM-Episode-Id")
	}
	return resp.Header
}

func (e *env) metric(name string) string {
	return testkit.MetricLines(e.t, e.admin, name)
}

// newS3 starts an in-process S3 with a "replay" bucket and points the AWS default
// credential chain at static test keys, so nothing reaches past loopback.
func newS3(t *testing.T, accessKey, secretKey string) *testkit.S3 {
	t.Helper()
	s3 := testkit.NewS3("replay")
	t.Cleanup(s3.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", accessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secretKey)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return s3
}
