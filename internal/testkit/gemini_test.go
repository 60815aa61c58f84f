package testkit

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
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

// TestGeminiFakeStreamFaults: in both framings, ErrorAfter ends the stream cleanly
// with Google's error object as its next chunk (an SSE event, an array element:
// the array still closes), and ResetAfter drops the connection after that many
// chunks, the body unfinished (no closing "]").
func TestGeminiFakeStreamFaults(t *testing.T) {
	body := `{"contents":[{"role":"user","parts":[{"text":"Write at length."}]}]}`
	for _, sse := range []bool{true, false} {
		path := "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
		if sse {
			path += "?alt=sse"
		}
		for _, fault := range []string{"error", "reset"} {
			g := NewGemini()
			g.Configure(func(g *Gemini) {
				g.ReplyFn = func(gjson.Result) Reply { return Reply{Content: "one two three four"} }
				if fault == "error" {
					g.ErrorAfter = 2
				} else {
					g.ResetAfter = 2
				}
			})
			req, _ := http.NewRequest(http.MethodPost, g.URL+path, strings.NewReader(body))
			req.Header.Set("X-Goog-Api-Key", "k")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			g.Close()
			var chunks []gjson.Result
			if sse {
				for ev := range strings.SplitSeq(string(got), "\r\n\r\n") {
					if d, ok := strings.CutPrefix(ev, "data: "); ok {
						chunks = append(chunks, gjson.Parse(d))
					}
				}
			} else if gjson.ValidBytes(got) {
				chunks = gjson.ParseBytes(got).Array()
			}
			switch name := fmt.Sprintf("sse=%v %s", sse, fault); fault {
			case "error":
				if err != nil || len(chunks) != 3 || chunks[2].Get("error.code").Int() != 503 || chunks[2].Get("error.status").String() != "UNAVAILABLE" ||
					chunks[1].Get("candidates.0.content.parts.0.text").String() != " two" {
					t.Errorf("%s: %v %s", name, err, got)
				}
			case "reset":
				if err == nil || strings.Contains(string(got), "error") || strings.Count(string(got), `"responseId"`) != 2 ||
					!sse && (gjson.ValidBytes(got) || !strings.HasPrefix(string(got), "[{") || strings.HasSuffix(string(got), "]")) {
					t.Errorf("%s: %v %s; want two chunks and a broken connection", name, err, got)
				}
			}
		}
	}
}
