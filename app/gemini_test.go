package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/replay"
)

// newGeminiEnv is an env whose gemini upstream is a fake Gemini API.
func newGeminiEnv(t *testing.T, mutate func(*config.Config)) (*env, *testkit.Gemini) {
	t.Helper()
	g := testkit.NewGemini()
	t.Cleanup(g.Close)
	e := newEnv(t, func(c *config.Config) {
		c.Upstreams["gemini"].BaseURL = g.URL
		if mutate != nil {
			mutate(c)
		}
	})
	return e, g
}

// onlyEpisode shuts the app down and reads the one episode it recorded.
func onlyEpisode(t *testing.T, e *env) *replay.Episode {
	t.Helper()
	buf, _ := recordedBuffer(t, e)
	if len(buf.Episodes) != 1 {
		t.Fatalf("%d episodes recorded, want one", len(buf.Episodes))
	}
	return buf.Episodes[0]
}

// checkGeminiTurns: every upstream call carried the credentials creds (header →
// value; "" = no such header) and the task's text with the context right after the
// task, the same in each call, and camproxy asked CAM once.
func checkGeminiTurns(t *testing.T, e *env, reqs []testkit.Captured, task string, creds map[string]string) {
	t.Helper()
	var first string
	for i, r := range reqs {
		for h, want := range creds {
			if got := r.Header.Get(h); got != want {
				t.Errorf("call %d: %s %q reached the upstream, want %q", i, h, got, want)
			}
		}
		text := gjson.GetBytes(r.Body, "contents.0.parts.0.text").String()
		if !strings.HasPrefix(text, task+"\n\n"+guidance(task)) {
			t.Errorf("call %d: the task's text %q has no context after the task", i, text)
		}
		if i == 0 {
			first = text
		} else if text != first {
			t.Errorf("the context changed between turns: %q then %q", first, text)
		}
	}
	if n := e.cam.Calls(); n != 1 {
		t.Errorf("%d CAM calls, want 1", n)
	}
}

// geminiKey is the credentials of a Gemini API call with key: x-goog-api-key, no bearer.
func geminiKey(key string) map[string]string {
	return map[string]string{"X-Goog-Api-Key": key, "Authorization": ""}
}

// TestNodeGenAI: Google's @google/genai calls a function (generateContent) then
// streams the answer to its response (generateContentStream, alt=sse) through
// camproxy, set up as its docs say: for the Gemini API by GOOGLE_GEMINI_BASE_URL and
// GEMINI_API_KEY alone; for Vertex AI by vertexai, project, location and
// httpOptions.baseUrl, with an OAuth access token from google-auth-library (an
// OAuth2Client in googleAuthOptions.authClient), which it sends as Authorization:
// Bearer to /v1beta1/projects/{p}/locations/{l}/publishers/google/models/{m}:….
// Both calls reach the gemini upstream on the path the SDK sent, augmented (the
// context right after the task, X-CAM-Context miss then episode, one episode id),
// one CAM call, one episode with the model, the function call and its response. The
// client's API key goes through, or upstreams.gemini.api_key replaces it; a Vertex
// bearer token goes through untouched, configured key or not: no API key is added
// (the fake accepts only the credential it expects).
func TestNodeGenAI(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	const token, project, location = "ya29.a0-vertex-access-token", "cam-proj-7", "europe-west4"
	bearer := map[string]string{"Authorization": "Bearer " + token, "X-Goog-Api-Key": ""}
	for _, tc := range []struct {
		name       string
		vertex     bool
		configured string            // upstreams.gemini.api_key
		accepted   string            // the only credential the fake accepts
		creds      map[string]string // what reaches it
	}{
		{"client key", false, "", "gm-client", geminiKey("gm-client")},
		{"configured key", false, "gm-camproxy", "gm-camproxy", geminiKey("gm-camproxy")},
		{"vertex bearer", true, "", token, bearer},
		{"vertex bearer, configured key", true, "gm-camproxy", token, bearer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, g := newGeminiEnv(t, func(c *config.Config) { c.Upstreams["gemini"].APIKey = tc.configured })
			g.Configure(func(g *testkit.Gemini) { g.APIKey = tc.accepted })
			const task = "Is flight UA 100 on time?"
			env, prefix := []string{"GOOGLE_GEMINI_BASE_URL=" + e.base, "GEMINI_API_KEY=gm-client"}, "/v1beta/models/gemini-2.5-flash:"
			if tc.vertex {
				env = []string{"CAMPROXY_VERTEX=1", "CAMPROXY_BASE_URL=" + e.base, "CAMPROXY_VERTEX_TOKEN=" + token,
					"CAMPROXY_VERTEX_PROJECT=" + project, "CAMPROXY_VERTEX_LOCATION=" + location}
				prefix = "/v1beta1/projects/" + project + "/locations/" + location + "/publishers/google/models/gemini-2.5-flash:"
			}
			out := gjson.ParseBytes(nodeScript(t, "genai.mjs", append(env, "CAMPROXY_TASK="+task)...))
			if out.Get("error").String() != "" || out.Get("calls.#").Int() != 1 || out.Get("calls.0.name").String() != "lookup_flight" ||
				!strings.HasPrefix(out.Get("text").String(), "Done after 3 contents") {
				t.Fatalf("@google/genai through camproxy: %s", out.Raw)
			}
			reqs, sent := g.Requests(), out.Get("sent").Array()
			if len(reqs) != 2 || len(sent) != 2 {
				t.Fatalf("%d upstream calls, %d client calls: %v", len(reqs), len(sent), reqs)
			}
			for i, suffix := range []string{"generateContent", "streamGenerateContent?alt=sse"} {
				r, s := reqs[i], sent[i]
				if r.Path != prefix+suffix || s.Get("url").String() != e.base+r.Path {
					t.Errorf("call %d: the client sent %s, the upstream got %s; want %s", i, s.Get("url"), r.Path, prefix+suffix)
				}
				if want := []string{"miss", "episode"}[i]; s.Get("context").String() != want || s.Get("episode").String() != sent[0].Get("episode").String() ||
					s.Get("episode").String() == "" {
					t.Errorf("call %d: X-CAM-Context %q (want %q), X-CAM-Episode-Id %q", i, s.Get("context"), want, s.Get("episode"))
				}
				if tc.vertex && s.Get("authorization").String() != "Bearer "+token {
					t.Errorf("call %d: the SDK sent Authorization %q, not the token it was given", i, s.Get("authorization"))
				}
			}
			checkGeminiTurns(t, e, reqs, task, tc.creds)
			ep := onlyEpisode(t, e)
			if ep.Protocol != "gemini" || ep.Task != task || ep.Steps != 2 || ep.Model != "gemini-2.5-flash" {
				t.Fatalf("episode: protocol %q task %q steps %d model %q", ep.Protocol, ep.Task, ep.Steps, ep.Model)
			}
			var called, answered bool
			for _, m := range ep.Messages {
				for _, c := range m.ToolCalls {
					called = called || c.Name == "lookup_flight" && gjson.Get(c.Arguments, "query").Exists()
				}
				answered = answered || m.Role == "tool" && strings.Contains(m.Content, "on time")
			}
			if !called || !answered {
				t.Fatalf("episode messages lack the function call (%v) or its response (%v): %+v", called, answered, ep.Messages)
			}
		})
	}
}

// TestAISDKGoogle: the Vercel AI SDK (`ai` with @ai-sdk/google), configured only by
// createGoogleGenerativeAI({ baseURL: camproxy + "/v1beta" }) and its key: generateText,
// then streamText with the first's messages and a follow-up as history, each looping
// model → lookup_flight → model. The four calls go to the gemini upstream
// (:generateContent twice, then :streamGenerateContent?alt=sse twice) with the context
// right after the task and the same in each, one CAM call, one episode whose export
// holds the function call and its response.
func TestAISDKGoogle(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	e, g := newGeminiEnv(t, nil)
	g.Configure(func(g *testkit.Gemini) { g.APIKey = "gm-ai-sdk-client" })
	out := gjson.ParseBytes(nodeScript(t, "ai-sdk-google.mjs", "CAMPROXY_BASE_URL="+e.base+"/v1beta",
		"CAMPROXY_TASK="+frameworkTask, "CAMPROXY_FOLLOWUP="+frameworkFollowup, "GOOGLE_GENERATIVE_AI_API_KEY=gm-ai-sdk-client"))
	if errs := out.Get("errors").Array(); len(errs) > 0 || out.Get("toolInputs.#").Int() != 2 {
		t.Fatalf("the AI SDK through camproxy: %s", out.Raw)
	}
	for _, run := range []string{"generate", "stream"} {
		steps := out.Get(run + ".steps").Array()
		if len(steps) != 2 || steps[0].Get("finishReason").String() != "tool-calls" || steps[0].Get("toolCalls.0").String() != "lookup_flight" ||
			steps[1].Get("finishReason").String() != "stop" {
			t.Fatalf("%s steps: %s", run, out.Get(run+".steps").Raw)
		}
	}
	if a := out.Get("answers").Array(); len(a) != 2 || !strings.HasPrefix(a[0].String(), "Done after 3 contents") || !strings.HasPrefix(a[1].String(), "Done after 7 contents") {
		t.Fatalf("answers %s", out.Get("answers").Raw)
	}
	reqs := g.Requests()
	wantSuffix := []string{":generateContent", ":generateContent", ":streamGenerateContent?alt=sse", ":streamGenerateContent?alt=sse"}
	if len(reqs) != len(wantSuffix) {
		t.Fatalf("%d upstream calls, want %d: %v", len(reqs), len(wantSuffix), reqs)
	}
	for i, r := range reqs {
		if !strings.HasPrefix(r.Path, "/v1beta/models/gemini-2.5-flash:") || !strings.HasSuffix(r.Path, wantSuffix[i]) {
			t.Errorf("upstream call %d: %s, want …%s", i, r.Path, wantSuffix[i])
		}
		if !strings.Contains(r.Header.Get("User-Agent"), "ai-sdk/provider-utils/") {
			t.Errorf("upstream call %d: user agent %q", i, r.Header.Get("User-Agent"))
		}
	}
	checkGeminiTurns(t, e, reqs, frameworkTask, geminiKey("gm-ai-sdk-client"))
	checkExportedCall(t, e, "lookup_flight", "query", "flight status", "on time")
}

// TestGeminiArrayStream: streamGenerateContent without alt=sse (a JSON array, as
// curl and the REST docs call it) through camproxy: the client gets the upstream's
// array byte for byte, the call is augmented and its answer recorded; with ?key= the
// configured key replaces the client's in the query, not in a header.
func TestGeminiArrayStream(t *testing.T) {
	e, g := newGeminiEnv(t, func(c *config.Config) { c.Upstreams["gemini"].APIKey = "gm-camproxy" })
	g.Configure(func(g *testkit.Gemini) { g.APIKey = "gm-camproxy" })
	const task = "Summarise the incident report."
	body := `{"contents":[{"role":"user","parts":[{"text":"` + task + `"}]}]}`
	resp, err := http.Post(e.base+"/v1beta/models/gemini-2.5-flash:streamGenerateContent?key=gm-client", "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !gjson.ValidBytes(got) || !gjson.ParseBytes(got).IsArray() || resp.ContentLength != -1 {
		t.Fatalf("%d (length %d): %s", resp.StatusCode, resp.ContentLength, got)
	}
	r := g.Last()
	if !strings.HasSuffix(r.Path, ":streamGenerateContent?key=gm-camproxy") || r.Header.Get("X-Goog-Api-Key") != "" {
		t.Fatalf("upstream call %s, x-goog-api-key %q", r.Path, r.Header.Get("X-Goog-Api-Key"))
	}
	if !strings.Contains(gjson.GetBytes(r.Body, "contents.0.parts.0.text").String(), "Guidance for: "+task) {
		t.Fatalf("not augmented: %s", r.Body)
	}
	// The fake's first answer is a function call: the recorded answer is the one the
	// client read out of the array.
	var calls []string
	gjson.ParseBytes(got).ForEach(func(_, el gjson.Result) bool {
		el.Get("candidates.0.content.parts.#.functionCall").ForEach(func(_, fc gjson.Result) bool {
			calls = append(calls, fc.Get("name").String()+fc.Get("args|@ugly").Raw)
			return true
		})
		return true
	})
	ep := onlyEpisode(t, e)
	last := ep.Messages[len(ep.Messages)-1]
	if ep.Protocol != "gemini" || last.Role != "assistant" || len(calls) != 1 || len(last.ToolCalls) != 1 ||
		last.ToolCalls[0].Name+last.ToolCalls[0].Arguments != calls[0] {
		t.Fatalf("episode %q: last message %+v; the client read the calls %q", ep.Protocol, last, calls)
	}
}

// geminiCLIScript answers Gemini CLI as the captures' run did: the routing side call
// (a JSON answer to its schema), a run_shell_command `ls` on the turn's first call,
// then text that quotes the shell's output once its functionResponse is in.
func geminiCLIScript(body gjson.Result) testkit.Reply {
	if body.Get("generationConfig.responseMimeType").String() == "application/json" {
		return testkit.Reply{Content: `{"complexity_reasoning":"one shell command","complexity_score":5}`}
	}
	contents := body.Get("contents").Array()
	for _, p := range contents[len(contents)-1].Get("parts").Array() {
		if r := p.Get("functionResponse"); r.Exists() {
			return testkit.Reply{Content: "The folder holds: " + strings.Join(strings.Fields(r.Get("response.output").String()), ", ")}
		}
	}
	return testkit.Reply{ToolCalls: []testkit.ToolCall{{Name: "run_shell_command", Arguments: `{"command":"ls","description":"List the files."}`}}}
}

// TestGeminiCLI: Gemini CLI 0.61.0 headless (`gemini -p … --yolo`) through camproxy,
// configured only by GOOGLE_GEMINI_BASE_URL and GEMINI_API_KEY (and the API-key auth
// type in its settings, which headless mode needs with a custom base URL): a shell
// tool round trip. Its router call is a side call, passed to the gemini upstream byte
// for byte; its turns go there with the context right after the task, the same in
// each, and every other byte the CLI's; one CAM call, one episode whose export holds
// the run_shell_command call and the shell's output. A tap between the CLI and
// camproxy keeps what the CLI sent: the router call and the two turns are the
// gemini-cli captures (written with -capture, else their shape is checked).
func TestGeminiCLI(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	bin := nodeModule(t, "@google/gemini-cli/bundle/gemini.js")
	e, g := newGeminiEnv(t, nil)
	g.Configure(func(g *testkit.Gemini) { g.APIKey, g.ReplyFn = "gm-cli-client", geminiCLIScript })
	root := t.TempDir()
	home, work := filepath.Join(root, "home"), filepath.Join(root, "work")
	for _, d := range []string{filepath.Join(home, ".gemini"), work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile := func(path, s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(filepath.Join(home, ".gemini", "settings.json"), `{"security":{"auth":{"selectedType":"gemini-api-key"}}}`)
	writeFile(filepath.Join(work, "alpha.txt"), "a\n")
	writeFile(filepath.Join(work, "beta.go"), "package beta\n")
	const task = "List the files in this folder."
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	tap, err := testkit.NewTap(e.base)
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	cmd := exec.CommandContext(ctx, "node", bin, "-p", task, "--yolo")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "HOME="+home, "GOOGLE_GEMINI_BASE_URL="+tap.URL, "GEMINI_API_KEY=gm-cli-client",
		"GEMINI_CLI_TRUST_WORKSPACE=true", "NO_COLOR=1", "NODE_NO_WARNINGS=1")
	cmd.Stdin = strings.NewReader("")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || !strings.Contains(stdout.String(), "alpha.txt, beta.go") {
		t.Fatalf("gemini -p: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	sent, got := tap.Requests(), g.Requests()
	if len(sent) != len(got) {
		t.Fatalf("the CLI made %d calls, the upstream got %d", len(sent), len(got))
	}
	// Each call reached the upstream as the CLI sent it, the turns with the context
	// spliced right after the task (the same in both) and no other byte changed.
	var router []byte
	var turns [][]byte // as the CLI sent them
	for i, r := range got {
		want := string(sent[i].Body)
		switch {
		case strings.Contains(r.Path, ":streamGenerateContent"):
			turns = append(turns, sent[i].Body)
			want = strings.Replace(want, `"`+jsonText(task)+`"`, `"`+jsonText(task+"\n\n"+guidance(task))+`"`, 1)
		case router == nil && strings.Contains(r.Path, ":generateContent"):
			router = sent[i].Body
		}
		if r.Path != sent[i].Path || string(r.Body) != want {
			t.Errorf("call %d: the CLI sent %s, the upstream got %s, %s", i, sent[i].Path, r.Path, firstByteDiff(string(r.Body), want))
		}
	}
	if len(turns) != 2 || router == nil {
		t.Fatalf("%d streamed turns of %d calls (router call %v), want 2", len(turns), len(got), router != nil)
	}
	if n := e.cam.Calls(); n != 1 {
		t.Errorf("%d CAM calls, want 1", n)
	}
	// Gemini CLI's model router (a generateContent before each turn) is a side call:
	// augmented, it would be an episode of its own.
	checkExportedCall(t, e, "run_shell_command", "command", "ls", "beta.go")
	writeCaptures(t, "gemini-cli", []captured{{"side-router.json", router}, {"first.json", turns[0]}, {"tool-result.json", turns[1]}})
	logHarness(t, "gemini-cli", sent)
}

// firstByteDiff shows where got first differs from want (bodies are one line).
func firstByteDiff(got, want string) string {
	i := 0
	for i < min(len(got), len(want)) && got[i] == want[i] {
		i++
	}
	if i == len(got) && i == len(want) {
		return "the same bytes"
	}
	from := max(0, i-60)
	return fmt.Sprintf("differing at byte %d:\n got  …%.160s\n want …%.160s", i, got[from:], want[from:])
}

// checkExportedCall shuts camproxy down and checks that it exported one episode,
// holding the call to tool (its argument arg being want) and the tool message that
// answers it, which contains result.
func checkExportedCall(t *testing.T, e *env, tool, arg, want, result string) {
	t.Helper()
	rows := exportedRows(t, e)
	if len(rows) != 1 {
		t.Fatalf("%d episodes exported, want 1", len(rows))
	}
	call, answer := toolCallNamed(rows[0], tool)
	if !call.Exists() || gjson.Get(call.Get("function.arguments").String(), arg).String() != want ||
		!strings.Contains(answer.Get("content").String(), result) {
		t.Errorf("the %s call and its response are not in the export: %s", tool, rows[0].Get("messages").Raw)
	}
}
