package protocol_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/internal/memotest"
	"github.com/camproxy/camproxy/protocol/openai"
)

// view is parseView failing the test on a body that does not parse.
func view(t testing.TB, client string, body []byte) *protocol.View {
	t.Helper()
	v, err := parseView(client, body)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSideCallsCaptured: the side calls Claude Code and Codex really sent are
// recognised, each as its kind, with the request they quote (the prompt the user
// typed in the session they belong to: the session's task).
func TestSideCallsCaptured(t *testing.T) {
	const prompt = "List the files in this repository."
	for _, c := range []struct{ file, reason, quoted string }{
		{"claude-code/side-title.json", "title", prompt},
		{"claude-code/side-compact.json", "compact", ""},
		{"codex/side-title.json", "title", prompt},
		{"codex/side-compact.json", "compact", ""},
		{"gemini-cli/side-router.json", "router", ""},
	} {
		t.Run(c.file, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata/harness", c.file))
			if err != nil {
				t.Fatal(err)
			}
			v := view(t, filepath.Dir(c.file), body)
			sc, ok := protocol.MatchSideCall(protocol.BuiltinSideCalls(), v, body)
			if !ok || sc.Reason != c.reason || sc.Quoted != c.quoted {
				t.Fatalf("MatchSideCall = %+v, %v; want reason %q quoting %q", sc, ok, c.reason, c.quoted)
			}
			if !strings.HasPrefix(sc.Rule, "builtin: "+filepath.Dir(c.file)) {
				t.Errorf("rule %q: another harness's signature matched", sc.Rule)
			}
		})
	}
}

// TestSideCallsNoFalsePositive: no agent turn is taken for a side call: every other
// captured call of every harness (first calls, tool turns, continuations), and the
// first turn of each of tau-bench's 200 airline trajectories, with and without the
// rule form of the docs' example.
func TestSideCallsNoFalsePositive(t *testing.T) {
	rules := append(protocol.BuiltinSideCalls(), protocol.SideCallRule{Source: "side_calls.rules[0]", Reason: "title",
		Model: "*haiku*", Tools: protocol.ToolsNone, Match: regexp.MustCompile(`(?i)\btitle\b`)})
	files, err := filepath.Glob("testdata/harness/*/*.json")
	if err != nil || len(files) < 20 {
		t.Fatalf("captures: %d, %v", len(files), err)
	}
	n := 0
	for _, file := range files {
		if strings.HasPrefix(filepath.Base(file), "side-") {
			continue
		}
		body, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		v := view(t, filepath.Base(filepath.Dir(file)), body)
		if sc, ok := protocol.MatchSideCall(rules, v, body); ok {
			t.Errorf("%s: an agent turn taken for a side call: %+v", file, sc)
		}
		n++
	}
	raw, err := os.ReadFile("../../shared/data/tau-bench/gpt-4o-airline.json")
	if err != nil {
		t.Skipf("tau-bench data: %v", err)
	}
	var runs []struct {
		Traj []json.RawMessage `json:"traj"`
	}
	if err := json.Unmarshal(raw, &runs); err != nil {
		t.Fatal(err)
	}
	for i, r := range runs {
		first := r.Traj[:2] // the policy and the user's first message
		for _, tools := range []string{``, `,"tools":[{"type":"function","function":{"name":"get_user_details","parameters":{}}}]`} {
			body := []byte(`{"model":"gpt-4o","max_tokens":1024,"messages":[` + string(first[0]) + `,` + string(first[1]) + `]` + tools + `}`)
			v := view(t, "tau-bench", body)
			if sc, ok := protocol.MatchSideCall(rules, v, body); ok {
				t.Errorf("tau-bench run %d: an agent turn taken for a side call: %+v", i, sc)
			}
			n++
		}
	}
	t.Logf("%d agent calls, none a side call", n)
}

// TestSideCallRuleForm: the rule form of the configuration, on a title call in the
// shape small-model titlers send, and each condition on its own.
func TestSideCallRuleForm(t *testing.T) {
	title := []byte(`{"model":"claude-haiku-4-5","max_tokens":50,"messages":[{"role":"user","content":"Generate a title for this conversation: \"Fix the flaky login test\""}]}`)
	titleTools := []byte(`{"model":"claude-haiku-4-5","max_tokens":50,"tools":[{"name":"Read","input_schema":{}}],"messages":[{"role":"user","content":"Generate a title for this conversation: \"Fix the flaky login test\""}]}`)
	turn := []byte(`{"model":"claude-haiku-4-5","max_tokens":4096,"messages":[{"role":"user","content":"Fix the flaky login test"}]}`)
	earlier := []byte(`{"model":"claude-haiku-4-5","max_tokens":50,"messages":[{"role":"user","content":"Generate a title for this conversation"},{"role":"assistant","content":"ok"},{"role":"user","content":"now fix it"}]}`)
	rule := func(mod func(*protocol.SideCallRule)) []protocol.SideCallRule {
		r := protocol.SideCallRule{Source: "side_calls.rules[0]", Reason: "title", Model: "*HAIKU*", Tools: protocol.ToolsNone,
			Match: regexp.MustCompile(`(?i)title`), Quote: regexp.MustCompile(`conversation: "(.*)"`)}
		if mod != nil {
			mod(&r)
		}
		return []protocol.SideCallRule{r}
	}
	for _, c := range []struct {
		name   string
		rules  []protocol.SideCallRule
		body   []byte
		want   bool
		quoted string
	}{
		{"title call", rule(nil), title, true, "Fix the flaky login test"},
		{"agent turn, same model", rule(nil), turn, false, ""},
		{"title call with tools", rule(nil), titleTools, false, ""},
		{"tools: some", rule(func(r *protocol.SideCallRule) { r.Tools = protocol.ToolsSome }), titleTools, true, "Fix the flaky login test"},
		{"tools: any", rule(func(r *protocol.SideCallRule) { r.Tools = protocol.ToolsAny }), titleTools, true, "Fix the flaky login test"},
		{"other model", rule(func(r *protocol.SideCallRule) { r.Model = "gpt-*" }), title, false, ""},
		{"max_tokens above", rule(func(r *protocol.SideCallRule) { r.MaxTokens = 20 }), title, false, ""},
		{"max_tokens within", rule(func(r *protocol.SideCallRule) { r.MaxTokens = 50; r.Match = nil }), title, true, "Fix the flaky login test"},
		{"instruction in an earlier message", rule(nil), earlier, false, ""},
		{"no rules", nil, title, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := view(t, "anthropic", c.body)
			sc, ok := protocol.MatchSideCall(c.rules, v, c.body)
			if ok != c.want || sc.Quoted != c.quoted {
				t.Fatalf("MatchSideCall = %+v, %v; want %v quoting %q", sc, ok, c.want, c.quoted)
			}
			if ok && (sc.Reason != "title" || sc.Rule != "side_calls.rules[0]") {
				t.Errorf("side call %+v", sc)
			}
		})
	}
}

// FuzzSideCall: the matcher reads untrusted bodies (tools, max_tokens, additional_tools
// items at any JSON type) and must never panic; a match always names its rule.
func FuzzSideCall(f *testing.F) {
	for _, file := range []string{"claude-code/side-title.json", "codex/side-compact.json", "codex/first.json"} {
		if b, err := os.ReadFile(filepath.Join("testdata/harness", file)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"quota"}]}`))
	f.Add([]byte(`{"model":"m","max_tokens":"1","tools":{},"input":[{"type":"additional_tools"}],"toolConfig":{"tools":7}}`))
	rules := append(protocol.BuiltinSideCalls(), protocol.SideCallRule{Source: "x", Reason: "x", Model: "[", Tools: protocol.ToolsSome, MaxTokens: 3})
	f.Fuzz(func(t *testing.T, body []byte) {
		v := &protocol.View{Model: gjson.GetBytes(body, "model").String()}
		if r, err := openai.Parse(body, protocol.DefaultTaskRules()); err == nil {
			v = r.Parsed()
		}
		sc, ok := protocol.MatchSideCall(rules, v, body)
		if ok && (sc.Rule == "" || sc.Reason == "") {
			t.Fatalf("match without a rule: %+v", sc)
		}
		// The facts the parse collected decide as the body read alone does, and the
		// matches the slots remember as the texts searched afresh do.
		alone := *v
		alone.Side, alone.Slots = protocol.SideFacts{}, nil
		if sc2, ok2 := protocol.MatchSideCall(rules, &alone, body); ok2 != ok || sc2 != sc {
			t.Fatalf("with the parse's facts and slots %+v %v, reading the body %+v %v", sc, ok, sc2, ok2)
		}
		if sc2, ok2 := protocol.MatchSideCall(rules, v, body); ok2 != ok || sc2 != sc {
			t.Fatalf("first %+v %v, again from the slots %+v %v", sc, ok, sc2, ok2)
		}
	})
}

// TestSideCallSearchOncePerMessage: a message with a slot (one the adapter
// remembers, which a conversation resends on every turn) has its texts searched for
// the side-call rules once per rule set; later calls read the slot and allocate
// nothing. The slot, not the text, answers the second call here: its message's text
// is swapped behind it, which no adapter does.
func TestSideCallSearchOncePerMessage(t *testing.T) {
	sys := "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n" + strings.Repeat("policy ", 1000) +
		"Your task is to create a detailed summary of the conversation so far"
	body := []byte(`{"model":"m","tools":[{}],"messages":[]}`)
	slots := []*protocol.Slot{new(protocol.Slot), new(protocol.Slot)}
	v := &protocol.View{Model: "m", Slots: slots, Messages: []protocol.Message{
		{Role: "system", Content: sys}, {Role: "user", Content: "go on"}}}
	rules := protocol.BuiltinSideCalls()
	if sc, ok := protocol.MatchSideCall(rules, v, body); !ok || sc.Reason != "compact" {
		t.Fatalf("first call: %+v %v, want compact", sc, ok)
	}
	swapped := *v
	swapped.Messages = []protocol.Message{{Role: "system", Content: "You are an agent."}, {Role: "user", Content: "go on"}}
	if sc, ok := protocol.MatchSideCall(rules, &swapped, body); !ok || sc.Reason != "compact" {
		t.Fatalf("the same slots: %+v %v; the message was searched again", sc, ok)
	}
	if n := testing.AllocsPerRun(10, func() { protocol.MatchSideCall(rules, v, body) }); n != 0 {
		t.Errorf("%v allocations per call from the slots, want 0", n)
	}
	// Another rule set searches the message again.
	if sc, ok := protocol.MatchSideCall(protocol.BuiltinSideCalls(), &swapped, body); ok {
		t.Fatalf("another rule set took the slot's matches: %+v", sc)
	}
	// A message without a slot is searched on every call.
	swapped.Slots = nil
	if sc, ok := protocol.MatchSideCall(rules, &swapped, body); ok {
		t.Fatalf("no slots: %+v", sc)
	}
}

// BenchmarkMatchSideCallResent is the side-call check of one turn of an agent's
// conversation that resends its long system prompt: tau-bench's (~8 KB) when its
// trajectories are at hand, read by the adapter as the proxy does (slots, side facts).
func BenchmarkMatchSideCallResent(b *testing.B) {
	sys := strings.Repeat("# Airline agent policy. Book, modify and cancel reservations. ", 130)
	// memotest.TauPath is relative to a directory one level down.
	if raw, err := os.ReadFile(strings.TrimPrefix(memotest.TauPath, "../")); err == nil {
		sys = gjson.GetBytes(raw, "0.traj.0.content").Str
	}
	content, _ := json.Marshal(sys)
	body := []byte(`{"model":"gpt-4o","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"system","content":` +
		string(content) + `},{"role":"user","content":"Change my flight to Friday."},{"role":"assistant","content":"Which reservation?"},` +
		`{"role":"user","content":"The one to Boston."}]}`)
	r, err := openai.Parse(body, protocol.DefaultTaskRules())
	if err != nil {
		b.Fatal(err)
	}
	v, rules := r.Parsed(), protocol.BuiltinSideCalls()
	if len(sys) < 4096 {
		b.Fatalf("a system prompt of %d bytes", len(sys))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := protocol.MatchSideCall(rules, v, body); ok {
			b.Fatal("a turn taken for a side call")
		}
	}
}
