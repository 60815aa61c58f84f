package protocol

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// geminiPreamble is the first text the Gemini CLI 0.61.0 sent (the first part of its
// first user message; protocol/testdata/preamble/gemini-cli-first.json), and the
// request it sent as the second part.
func geminiPreamble(t testing.TB) (preamble, request string) {
	t.Helper()
	b, err := os.ReadFile("testdata/preamble/gemini-cli-first.json")
	if err != nil {
		t.Fatal(err)
	}
	parts := gjson.GetBytes(b, "contents.0.parts.#.text").Array()
	if len(parts) != 2 || !strings.Contains(parts[0].Str, "We are setting up the context for our chat.") {
		t.Fatalf("the capture's first user message: %v", parts)
	}
	return parts[0].Str, parts[1].Str
}

// tauFirstUserMessages are the simulated users' first messages of the 200 tau-bench
// airline runs: real requests, none of which may be taken for scaffolding.
func tauFirstUserMessages(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile("../../shared/data/tau-bench/gpt-4o-airline.json")
	if err != nil {
		t.Skipf("tau-bench data: %v", err)
	}
	var out []string
	for _, run := range gjson.ParseBytes(b).Array() {
		for _, m := range run.Get("traj").Array() {
			if m.Get("role").Str == "user" {
				out = append(out, m.Get("content").Str)
				break
			}
		}
	}
	if len(out) != 200 {
		t.Fatalf("%d first user messages, want 200", len(out))
	}
	return out
}

func TestSetupPreamble(t *testing.T) {
	gemini, geminiRequest := geminiPreamble(t)
	tests := []struct {
		name  string
		text  string
		kinds []string // nil: not a preamble
	}{
		{"gemini cli 0.61.0, captured", gemini, []string{"working directory", "date", "OS", "folder listing"}},
		{"gemini cli without its wrapper tags", strings.TrimSuffix(strings.TrimPrefix(gemini, "<session_context>\n"), "</session_context>"),
			[]string{"working directory", "date", "OS", "folder listing"}},
		{"key: value lines", "Working directory: /home/ann/app\nDate: 2026-11-27\nOS: linux\nShell: zsh",
			[]string{"working directory", "date", "OS", "shell"}},
		{"sentences and a tree", "I'm currently working in the directory: /srv/app\nHere is the folder structure of the current working directories:\n\n/srv/app/\n├───go.mod\n└───main.go",
			[]string{"working directory", "folder listing"}},
		// Real requests stay the task.
		{"the request the gemini cli sent", geminiRequest, nil},
		{"one line", "The current working directory is /srv/app and today's date is 2026-11-27.", nil},
		{"a request after the facts", "Working directory: /srv/app\nDate: 2026-11-27\nAdd a NOTES.md that records the rate limits.", nil},
		{"a question after the facts", "Working directory: /srv/app\nOS: linux\nThe build fails with undefined: Foo, any idea", nil},
		{"a question mark", "Working directory: /srv/app\nOS: linux\nwhy does the build fail on linux?", nil},
		{"a request in a key line", "The current working directory is /srv/app. Fix the failing test.\nOS: linux", nil},
		{"a statement that is most of it", "Working directory: /srv/app\nOS: linux\nThe tests in pkg/foo are flaky since Tuesday.", nil},
		{"a directory and its tree", "Working directory: /srv/app\n/srv/app/\n└───main.go", []string{"working directory", "folder listing"}},
		{"a path and prose", "/srv/app\nThe service in this folder crashes at start.", nil},
		{"codex's request", "List the files in this repository.", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kinds, ok := setupPreamble(tt.text)
			if ok != (tt.kinds != nil) || !reflect.DeepEqual(kinds, tt.kinds) {
				t.Errorf("setupPreamble(%q) = %v %v, want %v", tt.text, kinds, ok, tt.kinds)
			}
		})
	}
}

// TestSetupPreambleTauBench: no tau-bench user opens with scaffolding, so the
// first_user_message task of every run is its first user message, as before.
func TestSetupPreambleTauBench(t *testing.T) {
	rules := DefaultTaskRules()
	for i, text := range tauFirstUserMessages(t) {
		if kinds, ok := setupPreamble(text); ok {
			t.Errorf("run %d: %q taken for a setup preamble (%v)", i, text, kinds)
		}
		segs := []Segment{seg(-1, "system", "# Airline Agent Policy", 0), seg(0, "user", text, 0), seg(1, "user", "and another thing", 1)}
		if f, ok := FindTask(rules, nil, segs); !ok || f.Task != text || f.Skipped != "" {
			t.Errorf("run %d: task %q (%s), want the first user message", i, f.Task, f.Rule)
		}
	}
}

// TestFirstUserMessageSkipsPreamble: the Gemini CLI's shapes — the preamble as the
// first part of the request's message, or as a message of its own answered by the
// model before the request — give the request as the task, and the rule says what
// it skipped. A preamble with nothing after it is still read, as before.
func TestFirstUserMessageSkipsPreamble(t *testing.T) {
	gemini, request := geminiPreamble(t)
	const note = "task.rules[0]: first_user_message; skipped setup preamble (working directory, date, OS, folder listing)"
	tests := []struct {
		name       string
		rules      []TaskRule
		segs       []Segment
		task, rule string
	}{
		{"a part before the request", DefaultTaskRules(),
			[]Segment{seg(-1, "system", "You are an interactive CLI agent.", 0), seg(0, "user", gemini, 0), seg(0, "user", request, 0)},
			request, note},
		{"a message before the request", DefaultTaskRules(),
			[]Segment{seg(0, "user", gemini, 0), seg(2, "user", request, 1)},
			request, note},
		{"nothing after it", DefaultTaskRules(),
			[]Segment{seg(0, "user", gemini, 0)},
			strings.TrimSpace(gemini), "task.rules[0]: first_user_message"},
		{"a preamble after the request is the request's", DefaultTaskRules(),
			[]Segment{seg(0, "user", request, 0), seg(0, "user", gemini, 0)},
			request + "\n" + strings.TrimSpace(gemini), "task.rules[0]: first_user_message"},
		{"envelopes: false reads it", []TaskRule{{FirstUserMessage: true, NoEnvelopes: true}},
			[]Segment{seg(0, "user", gemini, 0), seg(0, "user", request, 0)},
			gemini + "\n" + request, "task.rules[0]: first_user_message, envelopes: false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ok := FindTask(tt.rules, nil, tt.segs)
			if !ok || f.Task != tt.task || f.Rule != tt.rule {
				t.Errorf("task %q\nrule %q\nwant %q\n     %q", f.Task, f.Rule, tt.task, tt.rule)
			}
		})
	}
}

// FuzzSetupPreamble: the detector never panics, a preamble names two kinds of fact
// at least, one line is never one, and a request line added to any text makes it no
// preamble.
func FuzzSetupPreamble(f *testing.F) {
	gemini, request := geminiPreamble(f)
	for _, s := range []string{gemini, request, "Working directory: /a\nOS: linux", "Date: x\nShell: y\n└───z", "", "\n\n", "/a\n/b/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		kinds, ok := setupPreamble(text)
		if ok && (len(kinds) < 2 || !strings.Contains(text, "\n")) {
			t.Fatalf("%q: a preamble of %v", text, kinds)
		}
		if _, ok := setupPreamble(text + "\nPlease fix the failing test."); ok {
			t.Fatalf("%q with a request after it is taken for a preamble", text)
		}
	})
}
