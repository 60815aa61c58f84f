package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/replay"
)

// TestSecretsNowhere uses a distinctive secret everywhere one can be — the agent's
// OpenAI key and Anthropic key, its AWS credentials, camproxy's upstream, CAM, AWS
// and admin credentials — drives every protocol, failures included (an upstream 401
// that echoes the key, a failing CAM), and then greps every log line (at debug), the
// metrics, the file sink, the spool and the S3 sink for any of them.
func TestSecretsNowhere(t *testing.T) {
	const (
		clientKey    = "sk-CLIENTKEY-a1b2c3d4e5"
		clientAntKey = "sk-ant-CLIENTKEY-f6g7h8"
		clientAKID   = "AKIDCLIENTAGENT00001"
		clientSecret = "client-aws-SECRET-i9j0k1"
		upstreamKey  = "sk-UPSTREAMKEY-l2m3n4o5"
		antKey       = "sk-ant-UPSTREAMKEY-p6q7"
		camKey       = "CAMKEY-r8s9t0u1v2"
		proxyAKID    = "AKIDPROXYCAMPROXY001"
		proxySecret  = "proxy-aws-SECRET-w3x4y5"
		adminToken   = "ADMINTOKEN-z6a7b8c9d0e1"
	)
	all := []string{clientKey, clientAntKey, clientAKID, clientSecret, upstreamKey, antKey, camKey, proxyAKID, proxySecret, adminToken}

	s3 := newS3(t, proxyAKID, proxySecret) // also the credentials camproxy signs Bedrock calls with
	t.Setenv("AWS_SESSION_TOKEN", "")
	br := testkit.NewBedrock(proxyAKID, proxySecret, "us-east-1")
	t.Cleanup(br.Close)
	an := testkit.NewAnthropic()
	t.Cleanup(an.Close)
	var logs testkit.SyncBuffer
	dir := t.TempDir()
	s3URI := "s3://replay/sec?region=us-east-1&endpoint=" + s3.URL
	e := newEnvWith(t, func(c *config.Config) {
		c.Upstreams["openai"].APIKey = upstreamKey
		c.Upstreams["anthropic"].BaseURL, c.Upstreams["anthropic"].APIKey = an.URL, antKey
		c.Upstreams["bedrock"].Endpoint = br.URL
		ac := c.Augmenters["cam"]
		ac.APIKey = camKey
		c.Augmenters["cam"] = ac
		c.Replay.Sinks = []string{"file://" + dir + "/replay", s3URI}
		c.Replay.SpoolDir = dir + "/spool"
		c.Admin.Token = adminToken
	}, Options{Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})

	call := func(path string, body string, h map[string]string) (int, string) {
		req, _ := http.NewRequest("POST", e.base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	openaiBody := func(task string, stream bool) string {
		b, _ := json.Marshal(map[string]any{"model": "gpt-4o", "stream": stream, "messages": []any{map[string]any{"role": "user", "content": task}}})
		return string(b)
	}
	bearer := map[string]string{"Authorization": "Bearer " + clientKey}
	if code, out := call("/v1/chat/completions", openaiBody("Secret test: rebook flight 1", false), bearer); code != 200 {
		t.Fatalf("openai: %d %s", code, out)
	}
	call("/v1/chat/completions", openaiBody("Secret test: stream flight 2", true), bearer)
	if got := e.up.Last().Header.Get("Authorization"); got != "Bearer "+upstreamKey {
		t.Fatalf("the upstream got %q, not camproxy's key", got)
	}
	// An upstream 401 that quotes the key it got, as OpenAI's does, and a CAM that fails.
	e.up.Configure(func(u *testkit.Upstream) {
		u.Reply = func(gjson.Result) testkit.Reply {
			return testkit.Reply{Status: 401, ErrorMsg: "Incorrect API key provided: " + upstreamKey + ". You can find your API key at …"}
		}
	})
	e.cam.SetMode(testkit.CAM500)
	call("/v1/chat/completions", openaiBody("Secret test: failing flight 3", false), bearer)
	e.up.Configure(func(u *testkit.Upstream) { u.Reply = nil })
	e.cam.SetMode(testkit.CAMOK)
	ant := `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"Secret test: refund order 4"}]}`
	if code, out := call("/v1/messages", ant, map[string]string{"X-Api-Key": clientAntKey, "Anthropic-Version": "2023-06-01"}); code != 200 {
		t.Fatalf("anthropic: %d %s", code, out)
	}
	client := bedrockruntime.New(bedrockruntime.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.base), RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider(clientAKID, clientSecret, "")})
	_, err := client.Converse(context.Background(), &bedrockruntime.ConverseInput{ModelId: aws.String(claudeID),
		Messages: []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: "Secret test: bedrock 5"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if br.Last().AuthError != "" {
		t.Fatalf("bedrock upstream: %s", br.Last().AuthError)
	}
	// Admin: a wrong token and the right one.
	fb := `{"episode_id":"ep_unknown","reward":1}`
	call2 := func(tok string) int {
		req, _ := http.NewRequest("POST", e.admin+"/v1/feedback", strings.NewReader(fb))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if call2(adminToken+"-wrong") != 401 || call2(adminToken) != 404 {
		t.Fatal("admin token not enforced")
	}
	metrics := e.metric("")
	ctx := context.Background() // no deadline of its own: a hang meets go test's -timeout
	if err := e.app.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	places := map[string][]byte{"logs": []byte(logs.String()), "metrics": []byte(metrics)}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			places[p], _ = os.ReadFile(p)
		}
		return nil
	})
	src, err := replay.OpenSource(ctx, s3URI)
	if err != nil {
		t.Fatal(err)
	}
	var s3Lines bytes.Buffer
	if err := src.Scan(ctx, func(line []byte) error { s3Lines.Write(line); return nil }); err != nil {
		t.Fatal(err)
	}
	places["s3 sink"] = s3Lines.Bytes()
	if s3Lines.Len() == 0 || len(places) < 4 || !strings.Contains(logs.String(), "camproxy serving") {
		t.Fatalf("nothing to grep: s3 %d bytes, %d places, logs %d bytes", s3Lines.Len(), len(places), len(logs.String()))
	}
	for where, b := range places {
		for _, s := range all {
			if i := bytes.Index(b, []byte(s)); i >= 0 {
				t.Errorf("%s holds the secret %q: …%s…", where, s, b[max(0, i-80):min(len(b), i+len(s)+20)])
			}
		}
	}
	faultRow(t, "security", "10 distinctive secrets, 4 protocols, failures", "-",
		"none in logs (debug), metrics, file sink, spool or S3 sink")
}

// TestArmOverrideOnlyWhenAllowed: an agent's X-CAM-Arm picks its arm only where
// experiment.allow_override says so; otherwise the hash of the episode decides.
func TestArmOverrideOnlyWhenAllowed(t *testing.T) {
	for _, allow := range []bool{false, true} {
		e := newEnv(t, func(c *config.Config) {
			c.Experiment.Arms = []config.Arm{{Name: "baseline", Weight: 1, Augmenter: "none"}, {Name: "cam", Weight: 1, Augmenter: "cam"}}
			c.Experiment.AllowOverride = allow
		})
		arms := map[string]int{}
		for i := range 40 {
			resp, _ := e.post(newAgent(fmt.Sprintf("Override task %d", i), false).body(""), map[string]string{"X-CAM-Arm": "baseline"})
			arms[resp.Header.Get("X-CAM-Arm")]++
		}
		if allow && arms["baseline"] != 40 {
			t.Fatalf("allow_override: the header was not honoured: %v", arms)
		}
		if !allow && (arms["cam"] == 0 || arms["baseline"] == 40) {
			t.Fatalf("allow_override false: the header chose the arm: %v", arms)
		}
	}
}
