package app

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
)

// newAzureEnv is an env whose azure upstream is the fake's Azure resource, with
// upstreams.azure.api_key set to key ("" none).
func newAzureEnv(t *testing.T, key string) *env {
	t.Helper()
	return newEnv(t, func(c *config.Config) {
		azure := *c.Upstreams["openai"] // a copy: the openai block stays as it is
		c.Upstreams["azure"] = &azure
		c.Upstreams["azure"].WebSocket = ""
		c.Upstreams["azure"].APIKey = key
	})
}

// azureAuth is how an Azure call is authenticated, at each end.
type azureAuth struct {
	name       string
	token      string            // the client's Microsoft Entra token ("" its api key, az-client-key)
	configured string            // upstreams.azure.api_key
	accepted   string            // the only key or token the resource accepts
	creds      map[string]string // what reaches it (header → value, "" none)
}

// The Entra token the clients' azureADTokenProvider returns.
const entraToken = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.fake-entra-token"

var (
	confKey      = map[string]string{"Api-Key": "az-conf-key", "Authorization": ""}
	apiKeyAuth   = azureAuth{"api key rewritten", "", "az-conf-key", "az-conf-key", confKey}
	entraKeyAuth = azureAuth{"entra bearer, configured key", entraToken, "az-conf-key", "az-conf-key", confKey}
	entraAuth    = azureAuth{"entra bearer passed through", entraToken, "", entraToken,
		map[string]string{"Authorization": "Bearer " + entraToken, "Api-Key": ""}}
)

// runAzureClient runs azure-openai.mjs with the extra env against an env set up for
// a (the resource accepting only a.accepted, its answers scripted by script when
// set), and returns the env and the script's output.
func runAzureClient(t *testing.T, a azureAuth, task string, script func(*testkit.Upstream), env ...string) (*env, gjson.Result) {
	t.Helper()
	e := newAzureEnv(t, a.configured)
	e.up.SetAzureKey(a.accepted)
	if script != nil {
		e.up.Configure(script)
	}
	env = append(env, "AZURE_OPENAI_ENDPOINT="+e.base, "CAMPROXY_TASK="+task)
	if a.token != "" {
		env = append(env, "CAMPROXY_AZURE_TOKEN="+a.token)
	}
	return e, gjson.ParseBytes(nodeScript(t, "azure-openai.mjs", env...))
}

// checkAzureCall: the client sent the call with its own credential, and the resource
// got it on the same path with a.creds.
func checkAzureCall(t *testing.T, e *env, a azureAuth, i int, sent gjson.Result, r testkit.Captured) {
	t.Helper()
	if sent.Get("url").String() != e.base+r.Path {
		t.Errorf("call %d: the client sent %s, the resource got %s", i, sent.Get("url"), r.Path)
	}
	if a.token != "" && (sent.Get("authorization").String() != "Bearer "+a.token || sent.Get("apiKey").Exists() && sent.Get("apiKey").Type != gjson.Null) ||
		a.token == "" && sent.Get("apiKey").String() != "az-client-key" {
		t.Errorf("call %d: the client sent Authorization %s, api-key %s", i, sent.Get("authorization").Raw, sent.Get("apiKey").Raw)
	}
	for h, want := range a.creds {
		if got := r.Header.Get(h); got != want {
			t.Errorf("call %d: %s %q reached the resource, want %q", i, h, got, want)
		}
	}
}

// TestAzureOpenAIClient: the openai npm package's AzureOpenAI client, configured by
// AZURE_OPENAI_ENDPOINT (camproxy) and an api key or a Microsoft Entra token
// provider (azureADTokenProvider), through camproxy to an Azure resource (the fake,
// which accepts only one key or token): a tool call then a streamed answer on
// /openai/deployments/{d}/chat/completions?api-version=…. Both turns are augmented
// with the same context right after the task, one CAM call, one episode recorded
// with the body's model; the api-version query reaches the resource as sent. With
// upstreams.azure.api_key the client's api-key or bearer is replaced by the
// configured api-key (no Authorization reaches the resource); without it the
// client's Entra bearer goes through untouched.
func TestAzureOpenAIClient(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	for _, a := range []azureAuth{apiKeyAuth, entraKeyAuth, entraAuth} {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel() // a node client each, against its own camproxy
			const task = "Rebook passenger Mia Li onto the earliest flight to Boston."
			e, out := runAzureClient(t, a, task, nil)
			if out.Get("toolCall.function.name").String() != "lookup" || out.Get("content").String() != "Done after 4 messages." {
				t.Fatalf("answers: %s", out.Raw)
			}
			if h := out.Get("headers").Array(); h[0].String() != "miss" || h[1].String() != "episode" {
				t.Fatalf("X-CAM-Context per turn: %s", out.Get("headers").Raw)
			}
			if ep := out.Get("episodes").Array(); ep[0].String() == "" || ep[0].String() != ep[1].String() {
				t.Fatalf("episodes: %s", out.Get("episodes").Raw)
			}
			reqs, sent := e.up.Requests(), out.Get("sent").Array()
			if len(reqs) != 2 || len(sent) != 2 {
				t.Fatalf("%d upstream calls, %d client calls", len(reqs), len(sent))
			}
			const path = "/openai/deployments/gpt4-deploy/chat/completions?api-version=2024-10-21"
			wantCtx := "Guidance for: " + task + "\n- check the policy first."
			for i, r := range reqs {
				if r.Path != path {
					t.Errorf("call %d: the resource got %s, want %s", i, r.Path, path)
				}
				checkAzureCall(t, e, a, i, sent[i], r)
				assertSpliced(t, []byte(sent[i].Get("body").String()), r.Body, task, wantCtx)
			}
			if e.cam.Calls() != 1 {
				t.Fatalf("CAM calls %d", e.cam.Calls())
			}
			ep := onlyEpisode(t, e)
			if ep.Protocol != "openai" || ep.Model != "gpt-4o" || ep.Task != task || ep.Steps != 2 {
				t.Errorf("episode: protocol %s model %s task %q steps %d", ep.Protocol, ep.Model, ep.Task, ep.Steps)
			}
		})
	}
}

// TestAzureResponsesStream: a streamed Responses call (stream: true) from the openai
// npm package on each of Azure's Responses paths — the resource's
// /openai/responses?api-version=… (AzureOpenAI), a deployment's
// /openai/deployments/{d}/responses?api-version=… (AzureOpenAI with the
// deployment in its baseURL) and /openai/v1/responses (OpenAI on Azure's v1 base) —
// each with another credential: the call is augmented (the context right after
// the task, X-CAM-Context miss, an episode id), its credential fitted as on the chat
// path, the event stream reaches the client byte for byte as the resource sent it
// (and each event as the client parsed it), and one episode is recorded with the
// streamed answer.
func TestAzureResponsesStream(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	const answer = "You are rebooked on UA 200, leaving 09:10."
	rep := testkit.Reply{Content: answer}
	for _, tc := range []struct {
		form, path string
		auth       azureAuth
	}{
		{"resource", "/openai/responses?api-version=2025-04-01-preview", apiKeyAuth},
		{"deployment", "/openai/deployments/gpt4-deploy/responses?api-version=2025-04-01-preview", entraKeyAuth},
		{"v1", "/openai/v1/responses", entraAuth},
	} {
		t.Run(tc.form+", "+tc.auth.name, func(t *testing.T) {
			t.Parallel() // a node client each, against its own camproxy
			task := "Rebook passenger Mia Li onto the earliest flight to Boston (" + tc.form + ")."
			e, out := runAzureClient(t, tc.auth, task, func(u *testkit.Upstream) {
				u.RespondTo = func(gjson.Result, []gjson.Result) testkit.Reply { return rep }
			}, "CAMPROXY_AZURE_API=responses", "CAMPROXY_AZURE_PATH="+tc.form)
			reqs, sent := e.up.Requests(), out.Get("sent").Array()
			if len(reqs) != 1 || len(sent) != 1 {
				t.Fatalf("%d upstream calls, %d client calls: %s", len(reqs), len(sent), out.Raw)
			}
			r := reqs[0]
			if r.Path != tc.path || !gjson.GetBytes(r.Body, "stream").Bool() {
				t.Fatalf("the resource got %s %s, want %s streamed", r.Path, r.Body, tc.path)
			}
			checkAzureCall(t, e, tc.auth, 0, sent[0], r)
			assertSpliced(t, []byte(sent[0].Get("body").String()), r.Body, task, "Guidance for: "+task+"\n- check the policy first.")
			if out.Get("headers.0").String() != "miss" || out.Get("episodes.0").String() == "" {
				t.Errorf("X-CAM-Context %s, X-CAM-Episode-Id %s", out.Get("headers.0").Raw, out.Get("episodes.0").Raw)
			}
			// What the resource sent, for the body it got: the client read the same.
			want := testkit.ResponseStream(gjson.ParseBytes(r.Body), 1, rep)
			if got := sent[0].Get("stream").String(); got != string(want) {
				t.Fatalf("the client read the stream\n%s\nthe resource sent\n%s", got, want)
			}
			var data []string
			for frame := range strings.SplitSeq(strings.TrimSuffix(string(want), "\n\n"), "\n\n") {
				_, d, _ := strings.Cut(frame, "\ndata: ")
				data = append(data, d)
			}
			events := out.Get("events").Array()
			if len(events) != len(data) {
				t.Fatalf("the client parsed %d events of %d", len(events), len(data))
			}
			for i, ev := range events {
				if !jsonEqual(ev.Raw, data[i]) {
					t.Errorf("event %d: the client parsed %s, the resource sent %s", i, ev.Raw, data[i])
				}
			}
			if e.cam.Calls() != 1 {
				t.Errorf("CAM calls %d", e.cam.Calls())
			}
			ep := onlyEpisode(t, e)
			last := ep.Messages[len(ep.Messages)-1]
			if ep.Protocol != "openai" || ep.Model != "gpt4-deploy" || ep.Task != task || ep.Steps != 1 || last.Role != "assistant" || last.Content != answer {
				t.Errorf("episode: protocol %s model %s task %q steps %d, last message %+v", ep.Protocol, ep.Model, ep.Task, ep.Steps, last)
			}
		})
	}
}

// TestAzurePaths: the /openai/v1/ form of the Responses API is augmented on the
// azure upstream with the client's own api-key passed through; another /openai/ call
// is passed through to it untouched; and without upstreams.azure the deployments
// path goes to the openai upstream untouched, as before Azure had a route.
func TestAzurePaths(t *testing.T) {
	const task = "Summarise the incident report."
	e := newAzureEnv(t, "")
	e.up.SetAzureKey("az-client")
	key := map[string]string{"Api-Key": "az-client"}
	resp, b := e.postTo("/openai/v1/responses", []byte(`{"model":"o4-mini","input":"`+task+`"}`), key)
	if resp.StatusCode != 200 || resp.Header.Get("X-CAM-Context") != "miss" || resp.Header.Get("X-CAM-Episode-Id") == "" {
		t.Fatalf("/openai/v1/responses: %d %q %s", resp.StatusCode, resp.Header.Get("X-CAM-Context"), b)
	}
	if r := e.up.Last(); !strings.Contains(string(r.Body), "Guidance for: "+task) || r.Header.Get("Api-Key") != "az-client" {
		t.Errorf("the resource got %s with api-key %q", r.Body, r.Header.Get("Api-Key"))
	}
	const other = `{"input":"x","model":"e"}`
	resp, _ = e.postTo("/openai/deployments/emb/embeddings?api-version=2024-10-21", []byte(other), key)
	if r := e.up.Last(); resp.StatusCode != 404 || resp.Header.Get("X-CAM-Episode-Id") != "" || string(r.Body) != other ||
		r.Path != "/openai/deployments/emb/embeddings?api-version=2024-10-21" {
		t.Errorf("embeddings: %d %q; the resource got %s %s", resp.StatusCode, resp.Header.Get("X-CAM-Episode-Id"), r.Path, r.Body)
	}

	plain := newEnv(t, nil)
	body := `{"messages":[{"role":"user","content":"` + task + `"}]}`
	resp, _ = plain.postTo("/openai/deployments/d/chat/completions?api-version=2024-10-21", []byte(body), key)
	if r := plain.up.Last(); resp.Header.Get("X-CAM-Episode-Id") != "" || string(r.Body) != body || plain.cam.Calls() != 0 {
		t.Errorf("without an azure upstream: %d episode %q, the upstream got %s", resp.StatusCode, resp.Header.Get("X-CAM-Episode-Id"), r.Body)
	}
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && reflect.DeepEqual(x, y)
}
