package testkit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/tidwall/gjson"
)

const (
	testAK = "AKIDFAKEBEDROCK"
	testSK = "fake/secret/key+value"
	// A cross-region inference profile id: ':' arrives percent-encoded.
	sonnetPath = "/model/us.anthropic.claude-3-5-sonnet-20241022-v2%3A0"
	sonnetID   = "us.anthropic.claude-3-5-sonnet-20241022-v2:0"
)

// signedRequest builds a POST to base+path (path kept percent-encoded as given) and
// signs it with the SDK's v4 signer. signHost/signPath, when set, are what the
// signature covers instead (the request still goes to base+path).
type signOpts struct {
	signHost, signPath string
	ak, sk             string
	region             string
	singleEscape       bool // sign like S3 (path not escaped again)
	tamper             func(r *http.Request)
}

func signedRequest(t *testing.T, base, path string, body []byte, o signOpts) *http.Request {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, base+"/", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	host, sp := u.Host, path
	if o.signHost != "" {
		host = o.signHost
	}
	if o.signPath != "" {
		sp = o.signPath
	}
	req.Host = host
	req.URL.Opaque = "//" + host + sp
	ak, sk, region := testAK, testSK, "us-east-1"
	if o.ak != "" {
		ak = o.ak
	}
	if o.sk != "" {
		sk = o.sk
	}
	if o.region != "" {
		region = o.region
	}
	sum := sha256.Sum256(body)
	err = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: ak, SecretAccessKey: sk}, req,
		hex.EncodeToString(sum[:]), "bedrock", region, time.Now(), func(so *v4.SignerOptions) { so.DisableURIPathEscaping = o.singleEscape })
	if err != nil {
		t.Fatal(err)
	}
	// Send to the fake whatever was signed.
	req.Host = u.Host
	req.URL.Opaque = "//" + u.Host + path
	if o.tamper != nil {
		o.tamper(req)
	}
	return req
}

func do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

const converseBody = `{"messages":[{"role":"user","content":[{"text":"Rebook Mia Li."}]}],"toolConfig":{"tools":[{"toolSpec":{"name":"lookup_flight","inputSchema":{"json":{"type":"object"}}}}]}}`

func TestBedrockSignature(t *testing.T) {
	b := NewBedrock(testAK, testSK, "us-east-1")
	defer b.Close()
	b.APIKey = "bedrock-api-key-1"
	body := []byte(converseBody)
	arnPath := "/model/" + url.QueryEscape("arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-5-sonnet-20241022-v2:0")
	if !strings.Contains(arnPath, "%2F") || !strings.Contains(arnPath, "%3A") {
		t.Fatalf("test ARN path not escaped: %s", arnPath)
	}

	cases := []struct {
		name    string
		path    string
		o       signOpts
		errType string // "" = accepted
	}{
		{"signed by the SDK signer, ':' in the id", sonnetPath + "/converse", signOpts{}, ""},
		{"ARN id with %2F", arnPath + "/converse", signOpts{}, ""},
		{"scope region is not the fake's", sonnetPath + "/converse", signOpts{region: "us-west-2"}, "InvalidSignatureException"},
		{"signed for another host", sonnetPath + "/converse", signOpts{signHost: "bedrock-runtime.us-east-1.amazonaws.com"}, "InvalidSignatureException"},
		{"signed for another path", sonnetPath + "/converse", signOpts{signPath: "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"}, "InvalidSignatureException"},
		{"path signed decoded", sonnetPath + "/converse", signOpts{signPath: "/model/us.anthropic.claude-3-5-sonnet-20241022-v2:0/converse"}, "InvalidSignatureException"},
		{"path escaped once only (S3 style)", sonnetPath + "/converse", signOpts{singleEscape: true}, "InvalidSignatureException"},
		{"wrong secret", sonnetPath + "/converse", signOpts{sk: "nope"}, "InvalidSignatureException"},
		{"wrong access key", sonnetPath + "/converse", signOpts{ak: "AKIDOTHER"}, "UnrecognizedClientException"},
		{"body changed after signing", sonnetPath + "/converse", signOpts{tamper: func(r *http.Request) {
			nb := []byte(strings.Replace(converseBody, "Mia", "Max", 1))
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(nb)), int64(len(nb))
		}}, "InvalidSignatureException"},
		{"signed header changed", sonnetPath + "/converse", signOpts{tamper: func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }}, "InvalidSignatureException"},
		{"no signature", sonnetPath + "/converse", signOpts{tamper: func(r *http.Request) { r.Header.Del("Authorization") }}, "MissingAuthenticationTokenException"},
		{"bedrock API key", sonnetPath + "/converse", signOpts{tamper: func(r *http.Request) { r.Header.Set("Authorization", "Bearer bedrock-api-key-1") }}, ""},
		{"wrong API key", sonnetPath + "/converse", signOpts{tamper: func(r *http.Request) { r.Header.Set("Authorization", "Bearer other") }}, "UnrecognizedClientException"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, out := do(t, signedRequest(t, b.URL, c.path, body, c.o))
			last := b.Last()
			if c.errType == "" {
				if resp.StatusCode != 200 || last.AuthError != "" {
					t.Fatalf("status %d %s; auth error %q", resp.StatusCode, out, last.AuthError)
				}
				if last.RawPath != c.path || last.Kind != BedrockConverse {
					t.Fatalf("raw path %q kind %q", last.RawPath, last.Kind)
				}
				want, _ := url.PathUnescape(strings.TrimSuffix(strings.TrimPrefix(c.path, "/model/"), "/converse"))
				if last.Model != want {
					t.Fatalf("model %q, want %q", last.Model, want)
				}
				return
			}
			if resp.StatusCode != 403 || last.AuthError == "" {
				t.Fatalf("status %d %s; auth error %q", resp.StatusCode, out, last.AuthError)
			}
			if got := resp.Header.Get("x-amzn-ErrorType"); !strings.HasPrefix(got, c.errType+":") {
				t.Fatalf("x-amzn-ErrorType %q, want %s", got, c.errType)
			}
			if gjson.GetBytes(out, "message").String() == "" {
				t.Fatalf("body %s", out)
			}
			if c.errType == "InvalidSignatureException" && c.o.region == "" &&
				!strings.HasPrefix(gjson.GetBytes(out, "message").String(), "The request signature we calculated does not match the signature you provided.") {
				t.Fatalf("message %s", out)
			}
			t.Logf("refused: %s", last.AuthError)
		})
	}
}

// TestSigV4MatchesGoSigner: the fake's own canonical-request builder (used for what
// the Go signer cannot express, such as :authority) agrees with aws-sdk-go-v2.
func TestSigV4MatchesGoSigner(t *testing.T) {
	at := time.Date(2024, 5, 1, 9, 30, 0, 0, time.UTC)
	for _, c := range []struct{ path, query string }{
		{sonnetPath + "/converse", ""},
		{"/model/" + url.QueryEscape("arn:aws:bedrock:us-east-1:1:inference-profile/x y") + "/invoke", ""},
		{"/model/m/converse", "b=2&a=x%2Fy&a=x-y&c=with%20space"},
	} {
		body := []byte(converseBody)
		sum := sha256.Sum256(body)
		hash := hex.EncodeToString(sum[:])
		req, _ := http.NewRequest(http.MethodPost, "http://bedrock.test/", bytes.NewReader(body))
		req.URL.Opaque = "//bedrock.test" + c.path
		req.URL.RawQuery = c.query
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Amz-Meta", "  two   spaces  ")
		if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: testAK, SecretAccessKey: testSK}, req, hash, "bedrock", "eu-west-1", at); err != nil {
			t.Fatal(err)
		}
		auth := req.Header.Get("Authorization")
		_, rest, _ := strings.Cut(auth, "SignedHeaders=")
		list, goSig, _ := strings.Cut(rest, ", Signature=")
		value := func(h string) []string {
			switch h {
			case "host":
				return []string{"bedrock.test"}
			case "content-length":
				return []string{strconv.Itoa(len(body))}
			}
			return req.Header.Values(h)
		}
		sig, canonical := SigV4(http.MethodPost, c.path, c.query, strings.Split(list, ";"), value, hash, at, "eu-west-1", "bedrock", testSK)
		if sig != goSig {
			t.Fatalf("%s?%s: SigV4 %s, Go signer %s\n%s", c.path, c.query, sig, goSig, canonical)
		}
	}
}

func TestBedrockConverse(t *testing.T) {
	b := NewBedrock(testAK, testSK, "us-east-1")
	defer b.Close()
	resp, out := do(t, signedRequest(t, b.URL, sonnetPath+"/converse", []byte(converseBody), signOpts{}))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	o := gjson.ParseBytes(out)
	if o.Get("stopReason").String() != "tool_use" || o.Get("output.message.role").String() != "assistant" {
		t.Fatalf("%s", out)
	}
	tu := o.Get("output.message.content.0.toolUse")
	if tu.Get("name").String() != "lookup_flight" || tu.Get("toolUseId").String() == "" || tu.Get("input.limit").Int() != 3 {
		t.Fatalf("toolUse %s", tu.Raw)
	}
	if o.Get("usage.totalTokens").Int() != o.Get("usage.inputTokens").Int()+7 || !o.Get("metrics.latencyMs").Exists() {
		t.Fatalf("usage %s", out)
	}

	// Second turn with the tool result: text.
	body := `{"messages":[{"role":"user","content":[{"text":"Rebook."}]},{"role":"assistant","content":[{"toolUse":{"toolUseId":"t1","name":"lookup_flight","input":{}}}]},{"role":"user","content":[{"toolResult":{"toolUseId":"t1","content":[{"json":{"ok":true}}]}}]}]}`
	_, out = do(t, signedRequest(t, b.URL, sonnetPath+"/converse", []byte(body), signOpts{}))
	if gjson.GetBytes(out, "output.message.content.0.text").String() != "Done after 3 messages." || gjson.GetBytes(out, "stopReason").String() != "end_turn" {
		t.Fatalf("%s", out)
	}

	// Scripted error.
	b.ReplyFn = func(kind, model string, _ gjson.Result) BedrockReply {
		return BedrockReply{Status: 429, ErrorMsg: "Too many requests, please wait before trying again."}
	}
	resp, out = do(t, signedRequest(t, b.URL, sonnetPath+"/converse", []byte(body), signOpts{}))
	if resp.StatusCode != 429 || !strings.HasPrefix(resp.Header.Get("X-Amzn-ErrorType"), "ThrottlingException") || gjson.GetBytes(out, "message").String() == "" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, out)
	}
	if n := len(b.Requests()); n != 3 {
		t.Fatalf("%d requests", n)
	}

	// Unknown operation.
	resp, _ = do(t, signedRequest(t, b.URL, sonnetPath+"/chat", []byte(body), signOpts{}))
	if resp.StatusCode != 404 {
		t.Fatalf("unknown op: %d", resp.StatusCode)
	}
}

func eventTypes(evs []BedrockEvent) []string {
	var out []string
	for _, e := range evs {
		t := e.Type
		if e.Exception {
			t = "!" + t
		}
		out = append(out, t)
	}
	return out
}

func TestBedrockConverseStream(t *testing.T) {
	b := NewBedrock(testAK, testSK, "us-east-1")
	defer b.Close()
	var paced atomic.Int64
	b.BeforeEvent = func(int) { paced.Add(1) }
	b.ReplyFn = func(kind, model string, _ gjson.Result) BedrockReply {
		if kind != BedrockConverseStream || model != sonnetID {
			t.Errorf("kind %q model %q", kind, model)
		}
		return BedrockReply{Content: "Flight UA 12 is on time.", ToolCalls: []ToolCall{{ID: "tooluse_1", Name: "lookup_flight", Arguments: `{"flight":"UA12","date":"2024-05-01"}`}}}
	}
	resp, err := http.DefaultClient.Do(signedRequest(t, b.URL, sonnetPath+"/converse-stream", []byte(converseBody), signOpts{}))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/vnd.amazon.eventstream" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	evs, err := DecodeBedrockStream(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(eventTypes(evs), ",")
	want := "messageStart," + strings.Repeat("contentBlockDelta,", 6) + "contentBlockStop," +
		"contentBlockStart," + strings.Repeat("contentBlockDelta,", 6) + "contentBlockStop,messageStop,metadata"
	if got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	if int(paced.Load()) != len(evs) {
		t.Fatalf("BeforeEvent ran %d times for %d events", paced.Load(), len(evs))
	}
	var text, input string
	for _, e := range evs {
		p := gjson.ParseBytes(e.Payload)
		if !p.Get("p").Exists() {
			t.Fatalf("no padding in %s", e.Payload)
		}
		switch e.Type {
		case "contentBlockDelta":
			text += p.Get("delta.text").String()
			input += p.Get("delta.toolUse.input").String()
			if p.Get("delta.toolUse").Exists() && p.Get("contentBlockIndex").Int() != 1 {
				t.Fatalf("tool delta index: %s", e.Payload)
			}
		case "contentBlockStart":
			if p.Get("start.toolUse.name").String() != "lookup_flight" || p.Get("start.toolUse.toolUseId").String() != "tooluse_1" {
				t.Fatalf("%s", e.Payload)
			}
		case "messageStop":
			if p.Get("stopReason").String() != "tool_use" {
				t.Fatalf("%s", e.Payload)
			}
		case "metadata":
			if p.Get("usage.outputTokens").Int() != 7 || !p.Get("metrics.latencyMs").Exists() {
				t.Fatalf("%s", e.Payload)
			}
		}
	}
	if text != "Flight UA 12 is on time." || input != `{"flight":"UA12","date":"2024-05-01"}` {
		t.Fatalf("text %q input %q", text, input)
	}
}

func TestBedrockStreamException(t *testing.T) {
	b := NewBedrock(testAK, testSK, "us-east-1")
	defer b.Close()
	b.ReplyFn = func(string, string, gjson.Result) BedrockReply {
		return BedrockReply{Content: "one two three four", StreamException: "throttlingException", ErrorMsg: "Too many tokens, please wait before trying again."}
	}
	resp, err := http.DefaultClient.Do(signedRequest(t, b.URL, sonnetPath+"/converse-stream", []byte(converseBody), signOpts{}))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	evs, err := DecodeBedrockStream(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(eventTypes(evs), ","); got != "messageStart,contentBlockDelta,!throttlingException" {
		t.Fatalf("events %s", got)
	}
	if gjson.GetBytes(evs[2].Payload, "message").String() != "Too many tokens, please wait before trying again." {
		t.Fatalf("%s", evs[2].Payload)
	}
}

func TestBedrockInvoke(t *testing.T) {
	b := NewBedrock(testAK, testSK, "us-east-1")
	defer b.Close()
	body := []byte(`{"anthropic_version":"bedrock-2023-05-31","max_tokens":512,"messages":[{"role":"user","content":"Rebook Mia Li."}],"tools":[{"name":"lookup_flight","input_schema":{"type":"object"}}]}`)
	resp, out := do(t, signedRequest(t, b.URL, sonnetPath+"/invoke", body, signOpts{}))
	o := gjson.ParseBytes(out)
	if resp.StatusCode != 200 || o.Get("type").String() != "message" || o.Get("stop_reason").String() != "tool_use" ||
		o.Get("content.0.type").String() != "tool_use" || o.Get("content.0.name").String() != "lookup_flight" || o.Get("content.0.input.limit").Int() != 3 ||
		o.Get("usage.output_tokens").Int() != 7 || resp.Header.Get("X-Amzn-Bedrock-Output-Token-Count") != "7" {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}

	b.ReplyFn = func(string, string, gjson.Result) BedrockReply {
		return BedrockReply{Content: "Checking now.", ToolCalls: []ToolCall{{ID: "toolu_01", Name: "lookup_flight", Arguments: `{"flight":"UA12"}`}}}
	}
	resp, err := http.DefaultClient.Do(signedRequest(t, b.URL, sonnetPath+"/invoke-with-response-stream", body, signOpts{}))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "application/vnd.amazon.eventstream" {
		t.Fatalf("%v", resp.Header)
	}
	evs, err := DecodeBedrockStream(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var inner []string
	var text, input string
	for _, e := range evs {
		if e.Type != "chunk" {
			t.Fatalf("event type %q", e.Type)
		}
		raw, err := base64.StdEncoding.DecodeString(gjson.GetBytes(e.Payload, "bytes").String())
		if err != nil {
			t.Fatal(err)
		}
		p := gjson.ParseBytes(raw)
		inner = append(inner, p.Get("type").String())
		text += p.Get("delta.text").String()
		input += p.Get("delta.partial_json").String()
		if p.Get("type").String() == "message_stop" && !p.Get("amazon-bedrock-invocationMetrics.outputTokenCount").Exists() {
			t.Fatalf("message_stop without invocation metrics: %s", raw)
		}
	}
	want := "message_start,content_block_start,content_block_delta,content_block_delta,content_block_stop," +
		"content_block_start,content_block_delta,content_block_delta,content_block_delta,content_block_delta,content_block_stop,message_delta,message_stop"
	if got := strings.Join(inner, ","); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	if text != "Checking now." || input != `{"flight":"UA12"}` {
		t.Fatalf("text %q input %q", text, input)
	}
}

// TestBedrockCancel: a caller that leaves mid-stream is noticed.
func TestBedrockCancel(t *testing.T) {
	b := NewBedrock(testAK, testSK, "us-east-1")
	defer b.Close()
	b.HangAfter = 2
	ctx, cancel := context.WithCancel(context.Background())
	req := signedRequest(t, b.URL, sonnetPath+"/converse-stream", []byte(converseBody), signOpts{}).WithContext(ctx)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	dec := resp.Body
	buf := make([]byte, 1)
	if _, err := dec.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-b.Cancelled:
	case <-time.After(Patience(t)):
		t.Fatal("cancellation not noticed")
	}
}

// logRefusals explains, when the test failed, why the fake refused requests.
func logRefusals(t *testing.T, b *Bedrock) {
	if !t.Failed() {
		return
	}
	for _, r := range b.Requests() {
		if r.AuthError != "" {
			t.Logf("%s %s refused: %s\nheaders %v", r.Proto, r.RawPath, r.AuthError, r.Header)
		}
	}
}

// runNode runs a script of clients/node with env and returns its stdout. Without
// node_modules it skips unless CAMPROXY_REQUIRE_NODE=1 (as app's node tests do).
func runNode(t *testing.T, script string, env ...string) gjson.Result {
	t.Helper()
	dir, _ := filepath.Abs("../../clients/node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		if os.Getenv("CAMPROXY_REQUIRE_NODE") == "1" {
			t.Fatalf("clients/node/node_modules missing: run `npm ci` there")
		}
		t.Skip("clients/node/node_modules missing; `make test` runs npm ci")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s\n%s", script, err, out, stderr.Bytes())
	}
	return gjson.ParseBytes(out)
}

// TestBedrockNodeSDK: the AWS SDK for JavaScript signs for the fake's host and the
// percent-encoded model id, and decodes its event stream.
func TestBedrockNodeSDK(t *testing.T) {
	for _, http1 := range []bool{false, true} {
		b := NewBedrock(testAK, testSK, "us-east-1")
		defer b.Close()
		defer logRefusals(t, b)
		env := []string{"CAMPROXY_BASE_URL=" + b.URL, "AWS_ACCESS_KEY_ID=" + testAK, "AWS_SECRET_ACCESS_KEY=" + testSK,
			"AWS_SESSION_TOKEN=", "CAMPROXY_TASK=Rebook Mia Li onto the earliest flight to Boston.", "CAMPROXY_AWS_HTTP1="}
		proto, signedHost := "HTTP/2.0", ":authority;"
		if http1 {
			env = append(env, "CAMPROXY_AWS_HTTP1=1")
			proto, signedHost = "HTTP/1.1", ";host;"
		}
		out := runNode(t, "bedrock-converse.mjs", env...)
		for _, r := range b.Requests() {
			if r.AuthError != "" {
				t.Fatalf("SDK request refused: %s", r.AuthError)
			}
			if r.RawPath != sonnetPath+"/"+r.Kind || r.Model != sonnetID {
				t.Fatalf("raw path %q model %q", r.RawPath, r.Model)
			}
			// By default the JavaScript SDK talks h2c to an http:// endpoint and signs :authority.
			if r.Proto != proto || !strings.Contains(r.Header.Get("Authorization"), signedHost) {
				t.Fatalf("http1=%v: %s %s", http1, r.Proto, r.Header.Get("Authorization"))
			}
		}
		if n := len(b.Requests()); n != 2 {
			t.Fatalf("%d requests", n)
		}
		if out.Get("toolUse.name").String() != "lookup_flight" || out.Get("toolUse.input.limit").Int() != 3 || out.Get("converse.stopReason").String() != "tool_use" {
			t.Fatalf("converse: %s", out.Raw)
		}
		want := `["messageStart","contentBlockDelta","contentBlockDelta","contentBlockDelta","contentBlockDelta","contentBlockStop","messageStop","metadata"]`
		if out.Get("stream.events").Raw != want || out.Get("stream.text").String() != "Done after 3 messages." || out.Get("stream.stopReason").String() != "end_turn" {
			t.Fatalf("stream: %s", out.Get("stream").Raw)
		}
		if out.Get("sent.0.body").String() != string(b.Requests()[0].Body) || out.Get("sent.1.path").String() != b.Requests()[1].RawPath ||
			!strings.Contains(out.Get("sent.0.signedHeaders").String()+";", signedHost[1:]) {
			t.Fatalf("sent %s", out.Get("sent").Raw)
		}
		if out.Get("converse.metadata.httpStatusCode").Int() != 200 || out.Get("converse.metadata.requestId").String() == "" {
			t.Fatalf("metadata %s", out.Get("converse.metadata").Raw)
		}
	}

	// The wrong secret: the SDK sees AWS's error.
	b2 := NewBedrock(testAK, "another secret", "us-east-1")
	defer b2.Close()
	dir, _ := filepath.Abs("../../clients/node")
	cmd := exec.Command("node", "bedrock-converse.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CAMPROXY_BASE_URL="+b2.URL, "AWS_ACCESS_KEY_ID="+testAK, "AWS_SECRET_ACCESS_KEY="+testSK, "AWS_SESSION_TOKEN=", "CAMPROXY_TASK=x")
	msg, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "InvalidSignatureException") {
		t.Fatalf("want InvalidSignatureException, got %v\n%s", err, msg)
	}
}

// TestStrandsAgentBedrock: a real Strands agent loops over ConverseStream against the
// fake: tool call, tool result, answer; twice.
func TestStrandsAgentBedrock(t *testing.T) {
	b := NewBedrock(testAK, testSK, "us-east-1")
	defer b.Close()
	defer logRefusals(t, b)
	for _, c := range []struct{ stream, http1 string }{{"1", ""}, {"0", ""}, {"1", "1"}} {
		stream := c.stream
		out := runNode(t, "strands-agent.mjs", "CAMPROXY_MODEL_KIND=bedrock", "CAMPROXY_BASE_URL="+b.URL, "AWS_ACCESS_KEY_ID="+testAK,
			"AWS_SECRET_ACCESS_KEY="+testSK, "AWS_SESSION_TOKEN=", "CAMPROXY_STREAM="+stream, "CAMPROXY_AWS_HTTP1="+c.http1, "CAMPROXY_TASK=Is flight UA12 on time?")
		if out.Get("modelCalls").Int() != 4 || out.Get("toolCalls").Int() != 2 || out.Get("toolErrors.#").Int() != 0 ||
			out.Get("final").String() != "Done after 7 messages." || out.Get("toolInputs.0.query").String() != "flight status" {
			t.Fatalf("stream=%s: %s", stream, out.Raw)
		}
	}
	kinds := map[string]int{}
	for _, r := range b.Requests() {
		if r.AuthError != "" {
			t.Fatalf("refused: %s", r.AuthError)
		}
		kinds[r.Kind+" "+r.Proto]++
	}
	if kinds["converse-stream HTTP/2.0"] != 4 || kinds["converse HTTP/2.0"] != 4 || kinds["converse-stream HTTP/1.1"] != 4 {
		t.Fatalf("calls %v", kinds)
	}
}

// TestStrandsAgentOpenAI: the same agent on OpenAIModel (chat completions) against
// the scripted OpenAI upstream.
func TestStrandsAgentOpenAI(t *testing.T) {
	// Scripted before it starts: requests come from another process, which gives the
	// race detector no ordering with a later assignment.
	u := &Upstream{callLog: newCallLog[Captured](), Reply: func(body gjson.Result) Reply {
		msgs := body.Get("messages").Array()
		if msgs[len(msgs)-1].Get("role").String() == "tool" {
			return Reply{Content: fmt.Sprintf("Done after %d messages.", len(msgs))}
		}
		return Reply{ToolCalls: []ToolCall{{ID: fmt.Sprintf("call_%d", len(msgs)), Name: "lookup_flight", Arguments: `{"flight":"UA12"}`}}}
	}}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	out := runNode(t, "strands-agent.mjs", "CAMPROXY_MODEL_KIND=openai", "CAMPROXY_BASE_URL="+u.URL+"/v1", "CAMPROXY_TASK=Is flight UA12 on time?")
	if out.Get("modelCalls").Int() != 4 || out.Get("toolCalls").Int() != 2 || out.Get("toolErrors.#").Int() != 0 ||
		!strings.HasPrefix(out.Get("final").String(), "Done after ") || out.Get("toolInputs.1.flight").String() != "UA12" {
		t.Fatalf("%s", out.Raw)
	}
	if n := len(u.Requests()); n != 4 {
		t.Fatalf("%d upstream calls", n)
	}
}
