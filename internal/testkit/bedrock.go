package testkit

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/tidwall/gjson"
)

// Bedrock Runtime operations, as the fake names them (BedrockCaptured.Kind, ReplyFn's kind).
const (
	BedrockConverse       = "converse"
	BedrockConverseStream = "converse-stream"
	BedrockInvoke         = "invoke"
	BedrockInvokeStream   = "invoke-with-response-stream"
)

// BedrockReply is what the scripted Bedrock answers to one call.
type BedrockReply struct {
	Content   string
	ToolCalls []ToolCall // Arguments: the tool input as a JSON object ("" = {})
	// Status ≥ 400: answer an AWS JSON error ({"message": ErrorMsg}) with this status and
	// an x-amzn-ErrorType of ErrorType (default: the type Bedrock uses for that status).
	Status    int
	ErrorMsg  string
	ErrorType string
	// StreamException (streams only), e.g. "throttlingException" or
	// "modelStreamErrorException": after two events, send an exception frame
	// (:message-type exception, :exception-type StreamException, {"message": ErrorMsg})
	// and end the stream, as Bedrock does when a model fails mid-answer.
	StreamException string
	Header          http.Header
}

// BedrockCaptured is one request the Bedrock fake received.
type BedrockCaptured struct {
	Captured
	RawPath   string // the path exactly as received, percent-encoding kept
	Model     string // the model id, decoded ("us.anthropic…-v2:0", or an ARN)
	Kind      string // BedrockConverse…; "" when the path is no Bedrock operation
	Region    string // from the SigV4 credential scope ("" for API keys)
	AuthError string // why the request was refused with 403; "" = authenticated
	Proto     string // "HTTP/1.1", or "HTTP/2.0" (h2c: the JavaScript SDK's default)
}

// Bedrock is a scripted Amazon Bedrock Runtime (Converse, ConverseStream, InvokeModel
// and InvokeModelWithResponseStream for Anthropic Claude bodies). It checks every
// request's SigV4 signature against its static credentials, as AWS does: it rebuilds
// the canonical request from what it received and signs it again with aws-sdk-go-v2's
// v4 signer, or, for what that signer cannot express (":authority" instead of "host",
// as the JavaScript SDK signs over HTTP/2), with SigV4 here. It serves HTTP/1.1 and h2c.
// Set the exported fields before requests arrive, or through Configure.
type Bedrock struct {
	*httptest.Server

	AccessKey, SecretKey string
	// SessionToken, when set, must be the request's X-Amz-Security-Token.
	SessionToken string
	// Region the fake serves; "" accepts any region of the credential scope.
	Region string
	// APIKey, when set, is accepted as `Authorization: Bearer <APIKey>` (Bedrock API keys).
	APIKey string

	// ReplyFn scripts the answer; nil = DefaultBedrockReply.
	ReplyFn func(kind, model string, body gjson.Result) BedrockReply
	// BeforeEvent, if set, runs before each stream event i is written (i from 0).
	BeforeEvent func(i int)
	// Delay before answering (headers included).
	Delay time.Duration
	// HangAfter > 0: after that many stream events, stop sending and wait until the
	// caller goes away.
	HangAfter int

	mu                       sync.Mutex
	callLog[BedrockCaptured] // Requests, Last, CancelledCount, Cancelled
}

// NewBedrock starts a scripted Bedrock Runtime on loopback that accepts requests
// signed (SigV4, service "bedrock") with these credentials.
func NewBedrock(accessKey, secretKey, region string) *Bedrock {
	b := &Bedrock{AccessKey: accessKey, SecretKey: secretKey, Region: region, callLog: newCallLog[BedrockCaptured]()}
	// The AWS SDK for JavaScript v3 talks HTTP/2 to Bedrock Runtime, and over http://
	// that is h2c with prior knowledge: serve both HTTP/1.1 and h2c, as AWS serves h1 and h2.
	b.Server = httptest.NewUnstartedServer(http.HandlerFunc(b.serve))
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	b.Server.Config.Protocols = &protos
	b.Server.Start()
	return b
}

// Configure changes the fake's settings (the exported fields) under its lock: use it
// when requests may arrive from outside this process (a node script), so that the
// race detector sees the change happen before the handler reads it.
func (b *Bedrock) Configure(fn func(*Bedrock)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fn(b)
}

// bedrockSettings is a snapshot of the exported fields, read under the lock.
type bedrockSettings struct {
	accessKey, secretKey, sessionToken, region, apiKey string
	replyFn                                            func(kind, model string, body gjson.Result) BedrockReply
	beforeEvent                                        func(i int)
	delay                                              time.Duration
	hangAfter                                          int
}

func (b *Bedrock) settings() bedrockSettings {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bedrockSettings{b.AccessKey, b.SecretKey, b.SessionToken, b.Region, b.APIKey, b.ReplyFn, b.BeforeEvent, b.Delay, b.HangAfter}
}

// rawPath is the request target's path exactly as it came over the wire.
func rawPath(r *http.Request) string {
	p := r.RequestURI
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if !strings.HasPrefix(p, "/") { // absolute-form or "*"
		return r.URL.EscapedPath()
	}
	return p
}

// parseBedrockPath splits /model/{id}/{operation}; id stays as received.
func parseBedrockPath(raw string) (rawID, kind string, ok bool) {
	rest, found := strings.CutPrefix(raw, "/model/")
	if !found {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", "", false
	}
	rawID, op := rest[:i], rest[i+1:]
	if strings.Contains(rawID, "/") { // a decoded '/' splits the id: no such route
		return "", "", false
	}
	switch op {
	case BedrockConverse, BedrockConverseStream, BedrockInvoke, BedrockInvokeStream:
		return rawID, op, true
	}
	return "", "", false
}

func (b *Bedrock) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	set := b.settings()
	raw := rawPath(r)
	c := BedrockCaptured{Captured: Captured{Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body}, RawPath: raw, Proto: r.Proto}
	rawID, kind, routed := parseBedrockPath(raw)
	if routed {
		c.Kind = kind
		if m, err := url.PathUnescape(rawID); err == nil {
			c.Model = m
		} else {
			c.Model = rawID
		}
	}
	region, errType, msg, reason := b.authenticate(set, r, raw, body)
	c.Region, c.AuthError = region, reason
	b.add(c)

	w.Header().Set("X-Amzn-Requestid", fmt.Sprintf("0b6c3e5a-%04d-4c1e-9d7a-3f1e2b7c8d9e", len(b.Requests())))
	if reason != "" {
		writeAWSError(w, http.StatusForbidden, errType, msg)
		return
	}
	if !routed || r.Method != http.MethodPost {
		writeAWSError(w, http.StatusNotFound, "UnknownOperationException", "")
		return
	}
	if set.delay > 0 {
		select {
		case <-time.After(set.delay):
		case <-r.Context().Done():
			b.noteCancel()
			return
		}
	}
	req := gjson.ParseBytes(body)
	if !gjson.ValidBytes(body) {
		writeAWSError(w, http.StatusBadRequest, "ValidationException", "Malformed input request, please reformat your input and try again.")
		return
	}
	replyFn := DefaultBedrockReply
	if set.replyFn != nil {
		replyFn = set.replyFn
	}
	rep := replyFn(kind, c.Model, req)
	for k, vs := range rep.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if rep.Status >= 300 {
		typ := rep.ErrorType
		if typ == "" {
			typ = bedrockErrorType(rep.Status)
		}
		writeAWSError(w, rep.Status, typ, rep.ErrorMsg)
		return
	}
	inTok := len(body) / 4
	switch kind {
	case BedrockConverse:
		out, _ := json.Marshal(ConverseOutput(rep, inTok))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	case BedrockInvoke:
		out, _ := json.Marshal(AnthropicMessage(c.Model, rep.Content, rep.ToolCalls, inTok))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Amzn-Bedrock-Input-Token-Count", strconv.Itoa(inTok))
		w.Header().Set("X-Amzn-Bedrock-Output-Token-Count", "7")
		w.Header().Set("X-Amzn-Bedrock-Invocation-Latency", "12")
		_, _ = w.Write(out)
	case BedrockConverseStream:
		b.stream(set, w, r, ConverseStreamEvents(rep, inTok), rep)
	case BedrockInvokeStream:
		w.Header().Set("X-Amzn-Bedrock-Content-Type", "application/json")
		b.stream(set, w, r, InvokeStreamEvents(c.Model, rep, inTok), rep)
	}
}

// authenticate checks SigV4 (or a Bedrock API key). It returns the region of the
// credential scope, and when the request is refused the AWS error type, message and
// a detailed reason for the test.
func (b *Bedrock) authenticate(set bedrockSettings, r *http.Request, raw string, body []byte) (region, errType, msg, reason string) {
	const badSig = "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
	auth := r.Header.Get("Authorization")
	if tok, ok := strings.CutPrefix(auth, "Bearer "); ok {
		if set.apiKey != "" && tok == set.apiKey {
			return "", "", "", ""
		}
		return "", "UnrecognizedClientException", "The security token included in the request is invalid.", "bearer token is not the fake's APIKey"
	}
	if auth == "" {
		return "", "MissingAuthenticationTokenException", "Missing Authentication Token", "no Authorization header"
	}
	const algo = "AWS4-HMAC-SHA256 "
	if !strings.HasPrefix(auth, algo) {
		return "", "IncompleteSignatureException", "Unsupported authorization scheme", "Authorization is neither AWS4-HMAC-SHA256 nor Bearer: " + auth
	}
	fields := map[string]string{}
	for _, part := range strings.Split(auth[len(algo):], ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/") // AKID/date/region/service/aws4_request
	if len(scope) != 5 || fields["SignedHeaders"] == "" || fields["Signature"] == "" {
		return "", "IncompleteSignatureException", "Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' parameters.", "incomplete Authorization: " + auth
	}
	region = scope[2]
	if scope[0] != set.accessKey {
		return region, "UnrecognizedClientException", "The security token included in the request is invalid.", "access key " + scope[0] + " is not the fake's"
	}
	if scope[3] != "bedrock" || scope[4] != "aws4_request" || (set.region != "" && region != set.region) {
		return region, "InvalidSignatureException", "Credential should be scoped to correct service: 'bedrock'.", "credential scope " + fields["Credential"] + " is not bedrock in " + set.region
	}
	amzDate := r.Header.Get("X-Amz-Date")
	at, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil {
		return region, "IncompleteSignatureException", "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.", "bad X-Amz-Date " + amzDate
	}
	tok := r.Header.Get("X-Amz-Security-Token")
	if set.sessionToken != "" && tok != set.sessionToken {
		return region, "UnrecognizedClientException", "The security token included in the request is invalid.", "session token mismatch"
	}
	sum := sha256.Sum256(body)
	payloadHash := hex.EncodeToString(sum[:])
	if h := r.Header.Get("X-Amz-Content-Sha256"); h != "" && h != payloadHash {
		return region, "InvalidSignatureException", badSig, "x-amz-content-sha256 " + h + " is not the hash of the body received"
	}

	signed := strings.Split(fields["SignedHeaders"], ";")
	value := func(h string) []string {
		switch h {
		case "host", ":authority":
			return []string{r.Host}
		case "content-length":
			if v := r.Header.Values(h); len(v) > 0 {
				return v
			}
			return []string{strconv.Itoa(len(body))}
		}
		return r.Header.Values(h)
	}
	for _, h := range signed {
		if len(value(h)) == 0 {
			return region, "InvalidSignatureException", badSig, "signed header " + h + " is missing from the request"
		}
	}
	var sig, how string
	if goSignerCanSign(signed) {
		sig, err = goSign(r.Method, r.Host, raw, r.URL.RawQuery, signed, value, len(body), payloadHash, at, region, aws.Credentials{AccessKeyID: set.accessKey, SecretAccessKey: set.secretKey, SessionToken: tok})
		if err != nil {
			return region, "InvalidSignatureException", badSig, "re-signing: " + err.Error()
		}
		how = "aws-sdk-go-v2's v4 signer"
	} else {
		// HTTP/2 clients (the JavaScript SDK) sign ":authority" instead of "host", and
		// some sign headers the Go signer never signs: build the canonical request here.
		sig, _ = SigV4(r.Method, raw, r.URL.RawQuery, signed, value, payloadHash, at, region, "bedrock", set.secretKey)
		how = "the SigV4 rules (signed headers the Go signer cannot express)"
	}
	if sig != fields["Signature"] {
		return region, "InvalidSignatureException", badSig, fmt.Sprintf("signature mismatch, re-signed with %s: %s host %q path %q query %q signed headers %s (the canonical URI is the path escaped once more)",
			how, r.Method, r.Host, raw, r.URL.RawQuery, fields["SignedHeaders"])
	}
	return region, "", "", ""
}

// goSignerCanSign: the Go signer always signs host, never a pseudo-header or one of
// the headers it ignores, and content-length whenever there is a body.
func goSignerCanSign(signed []string) bool {
	host, length := false, false
	for _, h := range signed {
		switch {
		case h == "host":
			host = true
		case h == "content-length":
			length = true
		case strings.HasPrefix(h, ":"), h == "authorization", h == "user-agent", h == "x-amzn-trace-id", h == "expect", h == "transfer-encoding":
			return false
		}
	}
	return host && length
}

// goSign rebuilds the request from what was received (raw escaped path, query, the
// signed headers) and signs it again with aws-sdk-go-v2's v4 signer; it returns the
// signature.
func goSign(method, host, raw, query string, signed []string, value func(string) []string, bodyLen int, payloadHash string, at time.Time, region string, creds aws.Credentials) (string, error) {
	re := &http.Request{
		Method:        method,
		URL:           &url.URL{Scheme: "http", Host: host, Opaque: "//" + host + raw, RawQuery: query},
		Host:          host,
		Header:        http.Header{},
		ContentLength: int64(bodyLen),
	}
	for _, h := range signed {
		if h != "host" && h != "content-length" {
			re.Header[http.CanonicalHeaderKey(h)] = value(h)
		}
	}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, re, payloadHash, "bedrock", region, at); err != nil {
		return "", err
	}
	_, sig, _ := strings.Cut(re.Header.Get("Authorization"), "Signature=")
	return sig, nil
}

// SigV4 computes the signature AWS expects for a request, from its method, raw
// (percent-encoded) path, raw query, the signed header names in order and their
// values, the payload hash, the X-Amz-Date time, region, service and secret key. It
// also returns the canonical request. For services other than S3 the canonical URI
// is the raw path escaped once more.
func SigV4(method, rawPath, rawQuery string, signed []string, value func(string) []string, payloadHash string, at time.Time, region, service, secret string) (sig, canonical string) {
	var c strings.Builder
	c.WriteString(method + "\n" + uriEscape(rawPath, false) + "\n" + canonicalQuery(rawQuery) + "\n")
	for _, h := range signed {
		vs := value(h)
		clean := make([]string, len(vs))
		for i, v := range vs {
			clean[i] = strings.Join(strings.Fields(v), " ")
		}
		c.WriteString(h + ":" + strings.Join(clean, ",") + "\n")
	}
	c.WriteString("\n" + strings.Join(signed, ";") + "\n" + payloadHash)
	canonical = c.String()
	day := at.UTC().Format("20060102")
	ch := sha256.Sum256([]byte(canonical))
	toSign := "AWS4-HMAC-SHA256\n" + at.UTC().Format("20060102T150405Z") + "\n" + day + "/" + region + "/" + service + "/aws4_request\n" + hex.EncodeToString(ch[:])
	key := []byte("AWS4" + secret)
	for _, part := range []string{day, region, service, "aws4_request"} {
		key = hmacSHA256(key, part)
	}
	return hex.EncodeToString(hmacSHA256(key, toSign)), canonical
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// uriEscape percent-encodes every byte but the unreserved ones (and '/' unless
// encodeSep), upper-case hex, as SigV4 requires.
func uriEscape(s string, encodeSep bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' || (c == '/' && !encodeSep) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// canonicalQuery: each name and value decoded then escaped, sorted by name then value.
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	var pairs [][2]string
	for _, kv := range strings.Split(raw, "&") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		if dk, err := url.QueryUnescape(k); err == nil {
			k = dk
		}
		if dv, err := url.QueryUnescape(v); err == nil {
			v = dv
		}
		pairs = append(pairs, [2]string{uriEscape(k, true), uriEscape(v, true)})
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i][0] != pairs[j][0] {
			return pairs[i][0] < pairs[j][0]
		}
		return pairs[i][1] < pairs[j][1]
	})
	out := make([]string, len(pairs))
	for i, p := range pairs {
		out[i] = p[0] + "=" + p[1]
	}
	return strings.Join(out, "&")
}

func bedrockErrorType(status int) string {
	switch status {
	case 400:
		return "ValidationException"
	case 403:
		return "AccessDeniedException"
	case 404:
		return "ResourceNotFoundException"
	case 408:
		return "ModelTimeoutException"
	case 424:
		return "ModelErrorException"
	case 429:
		return "ThrottlingException"
	case 503:
		return "ServiceUnavailableException"
	default:
		return "InternalServerException"
	}
}

// writeAWSError answers an AWS JSON protocol error (restJson1: the type in
// x-amzn-ErrorType, the body {"message": …}).
func writeAWSError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-Errortype", typ+":http://internal.amazon.com/coral/com.amazon.bedrock/")
	w.WriteHeader(status)
	var b []byte
	if msg == "" {
		b = []byte("{}")
	} else {
		b, _ = json.Marshal(map[string]string{"message": msg})
	}
	_, _ = w.Write(b)
}

// firstTool is the name of the first tool a request declares ("lookup" if none).
func firstTool(body gjson.Result) string {
	for _, p := range []string{"toolConfig.tools.0.toolSpec.name", "tools.0.name", "tools.0.function.name"} {
		if n := body.Get(p).String(); n != "" {
			return n
		}
	}
	return "lookup"
}

// DefaultBedrockReply calls the request's first tool (or "lookup") on the first turn
// and answers in text once a tool result is in, for Converse and Anthropic bodies.
func DefaultBedrockReply(kind string, _ string, body gjson.Result) BedrockReply {
	msgs := body.Get("messages").Array()
	if hasToolResult(msgs) {
		return BedrockReply{Content: fmt.Sprintf("Done after %d messages.", len(msgs))}
	}
	id := fmt.Sprintf("tooluse_%d", len(msgs))
	if kind == BedrockInvoke || kind == BedrockInvokeStream {
		id = fmt.Sprintf("toolu_%02d", len(msgs))
	}
	return BedrockReply{ToolCalls: []ToolCall{{ID: id, Name: firstTool(body), Arguments: `{"query":"flight status","limit":3}`}}}
}

// hasToolResult: the last message is a user turn carrying a tool result (Converse
// toolResult or Anthropic tool_result block).
func hasToolResult(msgs []gjson.Result) bool {
	if len(msgs) == 0 {
		return false
	}
	found := false
	msgs[len(msgs)-1].Get("content").ForEach(func(_, blk gjson.Result) bool {
		if blk.Get("toolResult").Exists() || blk.Get("type").String() == "tool_result" {
			found = true
		}
		return !found
	})
	return found
}

func toolInput(args string) json.RawMessage {
	if strings.TrimSpace(args) == "" {
		return json.RawMessage("{}")
	}
	return json.RawMessage(args)
}

// ConverseOutput is the Converse JSON answer for a reply.
func ConverseOutput(rep BedrockReply, inputTokens int) map[string]any {
	var content []any
	if rep.Content != "" {
		content = append(content, map[string]any{"text": rep.Content})
	}
	for _, c := range rep.ToolCalls {
		content = append(content, map[string]any{"toolUse": map[string]any{"toolUseId": c.ID, "name": c.Name, "input": toolInput(c.Arguments)}})
	}
	stop := "end_turn"
	if len(rep.ToolCalls) > 0 {
		stop = "tool_use"
	}
	return map[string]any{
		"output":     map[string]any{"message": map[string]any{"role": "assistant", "content": content}},
		"stopReason": stop,
		"usage":      map[string]any{"inputTokens": inputTokens, "outputTokens": 7, "totalTokens": inputTokens + 7},
		"metrics":    map[string]any{"latencyMs": 12},
	}
}

// BedrockEvent is one event-stream frame of a Bedrock stream.
type BedrockEvent struct {
	Type    string // :event-type (or :exception-type when Exception)
	Payload []byte // JSON
	// Exception marks an exception frame (:message-type exception).
	Exception bool
}

// padding mimics the "p" field Bedrock adds to stream events (length hiding).
func padding(i int) string {
	const s = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	return s[:1+(i*7)%len(s)]
}

func event(typ string, i int, fields map[string]any) BedrockEvent {
	fields["p"] = padding(i)
	b, _ := json.Marshal(fields)
	return BedrockEvent{Type: typ, Payload: b}
}

// fragments splits a tool's JSON input the way models stream it.
func fragments(s string) []string {
	var out []string
	for len(s) > 0 {
		n := min(7, len(s))
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// ConverseStreamEvents renders a reply as the ConverseStream events Bedrock sends, in
// order: messageStart, per block contentBlockStart (tools) / contentBlockDelta… /
// contentBlockStop, messageStop, metadata.
func ConverseStreamEvents(rep BedrockReply, inputTokens int) []BedrockEvent {
	var ev []BedrockEvent
	add := func(typ string, f map[string]any) { ev = append(ev, event(typ, len(ev), f)) }
	add("messageStart", map[string]any{"role": "assistant"})
	idx := 0
	if rep.Content != "" {
		for _, word := range splitKeep(rep.Content) {
			add("contentBlockDelta", map[string]any{"contentBlockIndex": idx, "delta": map[string]any{"text": word}})
		}
		add("contentBlockStop", map[string]any{"contentBlockIndex": idx})
		idx++
	}
	for _, c := range rep.ToolCalls {
		add("contentBlockStart", map[string]any{"contentBlockIndex": idx, "start": map[string]any{"toolUse": map[string]any{"toolUseId": c.ID, "name": c.Name}}})
		for _, f := range fragments(string(toolInput(c.Arguments))) {
			add("contentBlockDelta", map[string]any{"contentBlockIndex": idx, "delta": map[string]any{"toolUse": map[string]any{"input": f}}})
		}
		add("contentBlockStop", map[string]any{"contentBlockIndex": idx})
		idx++
	}
	stop := "end_turn"
	if len(rep.ToolCalls) > 0 {
		stop = "tool_use"
	}
	add("messageStop", map[string]any{"stopReason": stop})
	add("metadata", map[string]any{
		"usage":   map[string]any{"inputTokens": inputTokens, "outputTokens": 7, "totalTokens": inputTokens + 7},
		"metrics": map[string]any{"latencyMs": 12},
	})
	return ev
}

// InvokeStreamEvents renders a reply as InvokeModelWithResponseStream "chunk" events:
// each payload is {"bytes": base64(Anthropic stream event JSON)}.
func InvokeStreamEvents(model string, rep BedrockReply, inputTokens int) []BedrockEvent {
	var ev []BedrockEvent
	for i, a := range AnthropicStreamEvents(model, rep.Content, rep.ToolCalls, inputTokens) {
		data := a.Data
		if a.Type == "message_stop" { // Bedrock appends its invocation metrics
			data, _ = json.Marshal(map[string]any{"type": "message_stop", "amazon-bedrock-invocationMetrics": map[string]any{
				"inputTokenCount": inputTokens, "outputTokenCount": 7, "invocationLatency": 12, "firstByteLatency": 5}})
		}
		ev = append(ev, event("chunk", i, map[string]any{"bytes": base64.StdEncoding.EncodeToString(data)}))
	}
	return ev
}

// encodeEvent writes one event-stream frame.
func encodeEvent(enc *eventstream.Encoder, w io.Writer, e BedrockEvent) error {
	var hs eventstream.Headers
	if e.Exception {
		hs.Set(":message-type", eventstream.StringValue("exception"))
		hs.Set(":exception-type", eventstream.StringValue(e.Type))
	} else {
		hs.Set(":message-type", eventstream.StringValue("event"))
		hs.Set(":event-type", eventstream.StringValue(e.Type))
	}
	hs.Set(":content-type", eventstream.StringValue("application/json"))
	return enc.Encode(w, eventstream.Message{Headers: hs, Payload: e.Payload})
}

func (b *Bedrock) stream(set bedrockSettings, w http.ResponseWriter, r *http.Request, events []BedrockEvent, rep BedrockReply) {
	if rep.StreamException != "" && len(events) > 2 {
		msg, _ := json.Marshal(map[string]string{"message": rep.ErrorMsg})
		events = append(events[:2:2], BedrockEvent{Type: rep.StreamException, Payload: msg, Exception: true})
	}
	w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	fl.Flush()
	enc := eventstream.NewEncoder()
	var buf bytes.Buffer
	for i, e := range events {
		if set.beforeEvent != nil {
			set.beforeEvent(i)
		}
		if r.Context().Err() != nil {
			b.noteCancel()
			return
		}
		buf.Reset()
		_ = encodeEvent(enc, &buf, e)
		if _, err := w.Write(buf.Bytes()); err != nil {
			b.noteCancel()
			return
		}
		fl.Flush()
		if set.hangAfter > 0 && i+1 == set.hangAfter {
			select {
			case <-r.Context().Done():
				b.noteCancel()
			case <-time.After(30 * time.Second):
			}
			return
		}
	}
}

// DecodeBedrockStream reads an event stream to its end (tests, benchmarks).
func DecodeBedrockStream(r io.Reader) ([]BedrockEvent, error) {
	dec := eventstream.NewDecoder()
	var out []BedrockEvent
	for {
		m, err := dec.Decode(r, nil)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		e := BedrockEvent{Payload: m.Payload}
		if v := m.Headers.Get(":message-type"); v != nil && v.String() == "exception" {
			e.Exception = true
			if t := m.Headers.Get(":exception-type"); t != nil {
				e.Type = t.String()
			}
		} else if t := m.Headers.Get(":event-type"); t != nil {
			e.Type = t.String()
		}
		out = append(out, e)
	}
}
