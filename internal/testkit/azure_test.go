package testkit

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestAzureFakeWithAzureOpenAI: the openai package's AzureOpenAI client reads the
// fake as an Azure resource (a tool call, then a streamed answer on the deployment's
// path), with the one key the fake was given.
func TestAzureFakeWithAzureOpenAI(t *testing.T) {
	dir, _ := filepath.Abs("../../clients/node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules/openai")); err != nil {
		t.Skip("npm ci in clients/node first")
	}
	u := NewUpstream()
	defer u.Close()
	u.SetAzureKey("az-client-key")
	cmd := exec.Command("node", "azure-openai.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AZURE_OPENAI_ENDPOINT="+u.URL, "CAMPROXY_TASK=fix the build")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if got := gjson.GetBytes(out, "content").String(); got != "Done after 4 messages." {
		t.Errorf("streamed answer %q", got)
	}
	for _, r := range u.Requests() {
		if r.Path != "/openai/deployments/gpt4-deploy/chat/completions?api-version=2024-10-21" || r.Header.Get("Api-Key") != "az-client-key" {
			t.Errorf("the client sent %s with api-key %q", r.Path, r.Header.Get("Api-Key"))
		}
	}
}

// TestAzureFakeRefuses: as Azure does, a wrong or missing key is a 401 in Azure's
// error shape, a deployments path without api-version a 404; the v1 form needs none,
// and an Entra bearer token stands for the key.
func TestAzureFakeRefuses(t *testing.T) {
	u := NewUpstream()
	defer u.Close()
	u.SetAzureKey("k")
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		path, header, value string
		status              int
	}{
		{"/openai/deployments/d/chat/completions?api-version=2024-10-21", "Api-Key", "k", 200},
		{"/openai/deployments/d/chat/completions?api-version=2024-10-21", "Api-Key", "wrong", 401},
		{"/openai/deployments/d/chat/completions?api-version=2024-10-21", "", "", 401},
		{"/openai/deployments/d/chat/completions", "Api-Key", "k", 404},
		{"/openai/v1/chat/completions", "Authorization", "Bearer k", 200},
		{"/openai/deployments/d/embeddings?api-version=1", "Api-Key", "k", 404},
	} {
		req, _ := http.NewRequest(http.MethodPost, u.URL+tc.path, strings.NewReader(body))
		if tc.header != "" {
			req.Header.Set(tc.header, tc.value)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || tc.status != 200 && gjson.GetBytes(b, "error.code").String() != resp.Status[:3] {
			t.Errorf("%s %s=%q: %d %s; want %d", tc.path, tc.header, tc.value, resp.StatusCode, b, tc.status)
		}
	}
}
