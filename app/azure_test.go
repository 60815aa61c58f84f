package app

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
)

// TestAzureOpenAIClient: the openai npm package's AzureOpenAI client, configured by
// AZURE_OPENAI_ENDPOINT (camproxy) alone, through camproxy to an Azure resource (the
// fake, which accepts only the configured key): a tool call then a streamed answer on
// /openai/deployments/{d}/chat/completions?api-version=…. Both turns are augmented
// with the same context right after the task, one CAM call, one episode recorded
// with the body's model; the client's api-key is rewritten to upstreams.azure.api_key
// and the api-version query reaches the resource as sent.
func TestAzureOpenAIClient(t *testing.T) {
	e := newEnv(t, func(c *config.Config) {
		c.Upstreams["azure"] = c.Upstreams["openai"]
		c.Upstreams["azure"].WebSocket = ""
		c.Upstreams["azure"].APIKey = "az-conf-key"
	})
	e.up.SetAzureKey("az-conf-key")
	const task = "Rebook passenger Mia Li onto the earliest flight to Boston."
	out := gjson.ParseBytes(nodeScript(t, "azure-openai.mjs", "AZURE_OPENAI_ENDPOINT="+e.base, "CAMPROXY_TASK="+task))

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
		if !strings.HasSuffix(sent[i].Get("url").String(), path) || r.Path != path {
			t.Errorf("call %d: the client sent %s, the resource got %s; want %s", i, sent[i].Get("url"), r.Path, path)
		}
		if r.Header.Get("Api-Key") != "az-conf-key" {
			t.Errorf("call %d: api-key %q reached the resource", i, r.Header.Get("Api-Key"))
		}
		assertSpliced(t, []byte(sent[i].Get("body").String()), r.Body, task, wantCtx)
	}
	if e.cam.Calls() != 1 {
		t.Fatalf("CAM calls %d", e.cam.Calls())
	}
	ep := onlyEpisode(t, e)
	if ep.Protocol != "openai" || ep.Model != "gpt-4o" || ep.Task != task || ep.Steps != 2 {
		t.Errorf("episode: protocol %s model %s task %q steps %d", ep.Protocol, ep.Model, ep.Task, ep.Steps)
	}
}

// TestAzurePaths: the /openai/v1/ form of the Responses API is augmented on the
// azure upstream with the client's own api-key passed through; another /openai/ call
// is passed through to it untouched; and without upstreams.azure the deployments
// path goes to the openai upstream untouched, as before Azure had a route.
func TestAzurePaths(t *testing.T) {
	const task = "Summarise the incident report."
	e := newEnv(t, func(c *config.Config) {
		c.Upstreams["azure"] = c.Upstreams["openai"]
		c.Upstreams["azure"].WebSocket = ""
	})
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
