package testkit

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Google's own SDK reads the fake as the API: a function call without an id, then
// a streamed text answer over SSE, on the Gemini API paths with an API key and on
// Vertex AI's publisher paths with an OAuth bearer token.
func TestGeminiFakeWithGenAI(t *testing.T) {
	dir, _ := filepath.Abs("../../clients/node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules/@google/genai")); err != nil {
		t.Skip("npm ci in clients/node first")
	}
	for _, vertex := range []string{"0", "1"} {
		g := NewGemini()
		g.Configure(func(g *Gemini) { g.APIKey = "k-1" })
		cmd := exec.Command("node", "genai.mjs")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOOGLE_GEMINI_BASE_URL="+g.URL, "GEMINI_API_KEY=k-1", "CAMPROXY_VERTEX="+vertex,
			"CAMPROXY_BASE_URL="+g.URL, "CAMPROXY_VERTEX_TOKEN=k-1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("vertex=%s: %v %s", vertex, err, out)
		}
		var got struct {
			Calls []struct{ Name string }
			Text  string
			Error string
		}
		if err := json.Unmarshal(out, &got); err != nil || got.Error != "" || len(got.Calls) != 1 || got.Calls[0].Name != "lookup_flight" || !strings.HasPrefix(got.Text, "Done after 3 contents") {
			t.Fatalf("vertex=%s: %v %s", vertex, err, out)
		}
		reqs := g.Requests()
		if len(reqs) != 2 || !strings.HasSuffix(reqs[0].Path, ":generateContent") || !strings.HasSuffix(reqs[1].Path, ":streamGenerateContent?alt=sse") ||
			(vertex == "1") != strings.Contains(reqs[0].Path, "/publishers/google/models/") {
			t.Errorf("vertex=%s: paths %q %q", vertex, reqs[0].Path, reqs[len(reqs)-1].Path)
		}
		g.Close()
	}
}
