package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/episode"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/registry"
)

// harnessPaths are the paths each harness's captures were sent to (the captures
// keep bodies only): the proxy's lookup is run on them.
var harnessPaths = map[string]string{
	"codex": "/v1/responses", "claude-code": "/v1/messages",
	"ai-sdk": "/v1/chat/completions", "strands": "/v1/chat/completions", "openai-agents": "/v1/responses",
	"langgraph": "/v1/chat/completions", "langchain": "/v1/chat/completions",
	// Gemini CLI streams its turns (its router side call is a generateContent, which
	// the proxy parses alike: the model and framing are the path's).
	"gemini-cli": "/v1beta/models/gemini-3.8-flash:streamGenerateContent?alt=sse",
}

// TestExplainAgreesWithRoutes: for every captured request of a real harness,
// `task explain` (the protocol told from the body) and the proxy (the route its
// path matches, parsed as the proxy parses it) name the same protocol and the same
// task id. A capture directory without a path here fails: its agreement is unchecked.
func TestExplainAgreesWithRoutes(t *testing.T) {
	rules := protocol.DefaultTaskRules()
	files, err := filepath.Glob("../protocol/testdata/harness/*/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures: %v", err)
	}
	for _, f := range files {
		dir := filepath.Base(filepath.Dir(f))
		path, ok := harnessPaths[dir]
		if !ok {
			t.Errorf("%s: no path for the captures of %s", f, dir)
			continue
		}
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		i, augmented := registry.Match(registry.All, registry.PathCall(path))
		route := registry.All[i]
		req, err := route.Parse(registry.PathCall(path), body, rules)
		if err != nil || !augmented {
			t.Errorf("%s: the proxy's %s route (augmented %v): %v", f, route.Explain, augmented, err)
			continue
		}
		proxyID := episode.TaskID(req.Parsed().Task)
		ex, err := Explain(body, CallInput{}, nil, rules)
		if err != nil {
			t.Errorf("%s: task explain: %v", f, err)
			continue
		}
		if ex.Protocol != route.Explain || ex.TaskID != proxyID {
			t.Errorf("%s: task explain says %s %s, the proxy %s %s", f, ex.Protocol, ex.TaskID, route.Explain, proxyID)
		}
	}
}

// TestExplanationText: the labels, the task's lines indented, the hashed text when
// it differs, and what an empty rule or experiment means.
func TestExplanationText(t *testing.T) {
	var b strings.Builder
	ex := &Explanation{Protocol: "openai", Experiment: "support", Rule: "task.rules[0]: first_user_message", Task: "Rebook\nflight 12", TaskID: "t-1", Hashed: "Rebook\nflight <n>"}
	if err := ex.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := "protocol:   openai\nexperiment: support\nrule:       task.rules[0]: first_user_message\ntask_id:    t-1\ntask:\n  Rebook\n  flight 12\n" +
		"hashed (volatile parts replaced):\n  Rebook\n  flight <n>\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	if err := (&Explanation{Protocol: "openai", TaskID: "t-0"}).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"experiment: none takes it and there is no default", "rule:       none matched: the call gets no context"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("lacks %q:\n%s", s, b.String())
		}
	}
	if strings.Contains(b.String(), "hashed") {
		t.Errorf("a task equal to its hashed text printed it twice:\n%s", b.String())
	}
}
