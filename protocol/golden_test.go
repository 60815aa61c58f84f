package protocol_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/anthropic"
	"github.com/camproxy/camproxy/protocol/gemini"
	"github.com/camproxy/camproxy/protocol/openai"
	"github.com/camproxy/camproxy/protocol/responses"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestGoldenMessages")

// TestGoldenMessages: the request bodies real harnesses sent (testdata/harness,
// captured by the compatibility suite) normalise to the messages in
// testdata/golden, as the replay buffer records them: the OpenAI chat shape, tool
// calls with their function or custom object, tool results as tool messages, raw
// items kept. A change in normalisation shows here as a diff of real trajectories.
func TestGoldenMessages(t *testing.T) {
	files, err := filepath.Glob("testdata/harness/*/*.json")
	if err != nil || len(files) == 0 {
		t.Skipf("no harness captures: %v", err)
	}
	for _, file := range files {
		name := strings.TrimPrefix(file, "testdata/harness/")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			msgs, err := normalise(filepath.Dir(name), body)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			enc := json.NewEncoder(&got)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(protocol.StripMedia(msgs)); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata/golden", name)
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (new capture? go test ./protocol -run TestGoldenMessages -update)", err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("%s normalises differently from %s (if intended: go test ./protocol -run TestGoldenMessages -update):\n%s",
					file, golden, firstDiff(got.String(), string(want)))
			}
			// What is recorded reads back as the same messages.
			var back []protocol.Message
			if err := json.Unmarshal(want, &back); err != nil || len(back) != len(msgs) {
				t.Errorf("golden does not read back: %v", err)
			}
		})
	}
}

// normalise parses a captured body with the adapter of its wire API (parseView) and
// returns its messages.
func normalise(client string, body []byte) ([]protocol.Message, error) {
	v, err := parseView(client, body)
	if err != nil {
		return nil, err
	}
	return v.Messages, nil
}

// parseView parses a captured body with the adapter of its wire API: the Responses
// API has "input", the Gemini API "contents", Anthropic's Messages API a top-level "system" (Claude Code) or
// typed tool blocks; the rest is chat completions.
func parseView(client string, body []byte) (*protocol.View, error) {
	root := gjson.ParseBytes(body)
	var r protocol.Request
	var err error
	switch {
	case root.Get("contents").Exists():
		// Gemini's model and framing are in the path, not the body.
		r, err = gemini.Parse(body, protocol.DefaultTaskRules(), "", gemini.FrameSSE)
	case root.Get("input").Exists() && !root.Get("messages").Exists():
		r, err = responses.Parse(body, protocol.DefaultTaskRules())
	case client == "claude-code" || root.Get("system").Exists():
		r, err = anthropic.Parse(body, protocol.DefaultTaskRules())
	default:
		r, err = openai.Parse(body, protocol.DefaultTaskRules())
	}
	if err != nil {
		return nil, err
	}
	return r.Parsed(), nil
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return "line " + strconv.Itoa(i+1) + ":\n got  " + g[i] + "\n want " + w[i]
		}
	}
	return "lengths differ: " + strconv.Itoa(len(g)) + " and " + strconv.Itoa(len(w)) + " lines"
}
