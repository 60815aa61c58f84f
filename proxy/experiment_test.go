package proxy

import (
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/protocol/registry"
)

// testCall is a registry.Call of a path, query and headers (found without allocating).
type testCall struct {
	path  string
	query string
	hdr   [][2]string
}

func (c *testCall) Path() []byte    { return []byte(c.path) }
func (c *testCall) RawPath() []byte { return []byte(c.path) }
func (c *testCall) Header(name string) []byte {
	for _, kv := range c.hdr {
		if strings.EqualFold(kv[0], name) {
			return []byte(kv[1])
		}
	}
	return nil
}
func (c *testCall) Query(name string) []byte {
	q, err := url.ParseQuery(c.query)
	if err != nil || !q.Has(name) {
		return nil
	}
	return []byte(q.Get(name))
}

// newTestCall is a call of path (and its query) with headers given as name, value pairs.
func newTestCall(path string, kv ...string) *testCall {
	c := &testCall{path: path}
	if p, q, ok := strings.Cut(path, "?"); ok {
		c.path, c.query = p, q
	}
	for i := 0; i+1 < len(kv); i += 2 {
		c.hdr = append(c.hdr, [2]string{kv[i], kv[i+1]})
	}
	return c
}

// testExperiment is an experiment of one arm; allow sets allow_override.
func testExperiment(t testing.TB, name string, allow bool, m Match, rules []protocol.TaskRule) *Experiment {
	t.Helper()
	pol, err := policies.New(name, policies.StickyEpisode, allow, []policies.Arm{{Name: "baseline", Weight: 1, Augmenter: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	return &Experiment{Name: name, Match: m, TaskRules: rules, Policy: pol}
}

func mustMatch(t testing.TB, agents, fps, protos, paths, models []string, task string) Match {
	t.Helper()
	m, err := NewMatch(agents, fps, protos, paths, models, task)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fingerprint is KeyFingerprint as a string.
func fingerprint(key string) string {
	fp := KeyFingerprint([]byte(key))
	return string(fp[:])
}

// gatewayExperiments are a gateway's experiments in match order: one per match key,
// then default. tasks reads its task from the body's metadata.task, the others from
// the first user message (one shared slice of rules).
func gatewayExperiments(t testing.TB, withDefault bool) []*Experiment {
	rules := protocol.DefaultTaskRules()
	own := []protocol.TaskRule{{JSONPath: "metadata.task"}}
	xs := []*Experiment{
		testExperiment(t, "support", false, mustMatch(t, []string{"support-bot"}, nil, nil, nil, nil, ""), rules),
		testExperiment(t, "research", true, mustMatch(t, nil, []string{strings.ToUpper(fingerprint("sk-research")[:10])}, nil, nil, nil, ""), rules),
		testExperiment(t, "coding", true, mustMatch(t, nil, nil, []string{"anthropic", "openai"}, nil, []string{"claude-*", "GPT-5*"}, ""), rules),
		testExperiment(t, "responses", false, mustMatch(t, nil, nil, nil, []string{"/v1/resp*"}, nil, ""), rules),
		testExperiment(t, "tasks", false, mustMatch(t, nil, nil, nil, nil, nil, `(?i)\brefund\b`), own),
	}
	if withDefault {
		xs = append(xs, testExperiment(t, "default", false, Match{}, rules))
	}
	return xs
}

// counting is p whose Parse counts its calls.
func counting(p *registry.Protocol, n *int) *registry.Protocol {
	q := *p
	q.Parse = func(c registry.Call, body []byte, rules []protocol.TaskRule) (protocol.Request, error) {
		*n++
		return p.Parse(c, body, rules)
	}
	return &q
}

// TestChoose: the first experiment whose every match key holds takes the call — by
// agent header, key fingerprint (of each place a client puts its key), protocol, path,
// model glob (case-insensitive), task regexp on the task its own rules find; else the
// default; with none, ErrNoExperiment without the body read. X-CAM-Experiment names
// one where it allows overrides, is ignored elsewhere, and is refused when unknown.
// The body is read once per distinct set of task rules among the candidates.
func TestChoose(t *testing.T) {
	chat := `{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}]}`
	gpt5 := `{"model":"gpt-5-mini","messages":[{"role":"user","content":"hello"}]}`
	claude := `{"model":"Claude-Sonnet-4","max_tokens":10,"messages":[{"role":"user","content":"hello"}]}`
	refund := `{"model":"gpt-4o","metadata":{"task":"Refund order 7"},"messages":[{"role":"user","content":"hello"}]}`
	other := `{"model":"gpt-4o","metadata":{"task":"track order 7"},"messages":[{"role":"user","content":"hello"}]}`
	responses := `{"model":"gpt-4o","input":"hello"}`
	sigv4 := "AWS4-HMAC-SHA256 Credential=sk-research/20240101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=00"
	for _, tt := range []struct {
		name      string
		noDefault bool
		proto     *registry.Protocol
		call      *testCall
		body      string
		want      string // the experiment; "" with err
		task      string // the task the chosen experiment's rules found
		ignored   bool
		parses    int
		err       error
		errHas    string
		reordered bool // coding before support
		headOnly  bool // only the experiments with conditions on the head
	}{
		{name: "agent header", proto: registry.Chat, call: newTestCall("/v1/chat/completions", "X-CAM-Agent", "support-bot"), body: chat, want: "support", task: "hello", parses: 1},
		{name: "agent header, another agent", proto: registry.Chat, call: newTestCall("/v1/chat/completions", "X-CAM-Agent", "support-bot-2"), body: chat, want: "default", task: "hello", parses: 2},
		{name: "bearer key", proto: registry.Chat, call: newTestCall("/v1/chat/completions", "Authorization", "Bearer sk-research"), body: chat, want: "research", task: "hello", parses: 1},
		{name: "x-api-key", proto: registry.Messages, call: newTestCall("/v1/messages", "X-Api-Key", "sk-research"), body: chat, want: "research", task: "hello", parses: 1},
		{name: "azure api-key", proto: registry.Chat, call: newTestCall("/v1/chat/completions", "Api-Key", "sk-research"), body: chat, want: "research", task: "hello", parses: 1},
		{name: "gemini header key", proto: registry.Chat, call: newTestCall("/v1/chat/completions", "X-Goog-Api-Key", "sk-research"), body: chat, want: "research", task: "hello", parses: 1},
		{name: "query key", proto: registry.Chat, call: newTestCall("/v1/chat/completions?key=sk-research"), body: chat, want: "research", task: "hello", parses: 1},
		{name: "sigv4 access key id", proto: registry.Chat, call: newTestCall("/v1/chat/completions", "Authorization", sigv4), body: chat, want: "research", task: "hello", parses: 1},
		{name: "another key", proto: registry.Chat, call: newTestCall("/v1/chat/completions", "Authorization", "Bearer sk-other"), body: chat, want: "default", task: "hello", parses: 2},
		{name: "model glob and protocol", proto: registry.Chat, call: newTestCall("/v1/chat/completions"), body: gpt5, want: "coding", task: "hello", parses: 1},
		{name: "model glob, case-insensitive", proto: registry.Messages, call: newTestCall("/v1/messages"), body: claude, want: "coding", task: "hello", parses: 1},
		{name: "model glob but not its protocol", proto: registry.Responses, call: newTestCall("/v1/responses"), body: `{"model":"gpt-5","input":"hello"}`, want: "responses", task: "hello", parses: 1},
		{name: "path glob", proto: registry.Responses, call: newTestCall("/v1/responses"), body: responses, want: "responses", task: "hello", parses: 1},
		{name: "task by its own rules", proto: registry.Chat, call: newTestCall("/v1/chat/completions"), body: refund, want: "tasks", task: "Refund order 7", parses: 2},
		{name: "task not matched: read again by the default's rules", proto: registry.Chat, call: newTestCall("/v1/chat/completions"), body: other, want: "default", task: "hello", parses: 2},
		{name: "first match wins", proto: registry.Chat, call: newTestCall("/v1/chat/completions", "X-CAM-Agent", "support-bot"), body: gpt5, want: "support", task: "hello", parses: 1},
		{name: "first match wins, reordered", reordered: true, proto: registry.Chat, call: newTestCall("/v1/chat/completions", "X-CAM-Agent", "support-bot"), body: gpt5, want: "coding", task: "hello", parses: 1},
		{name: "no default", noDefault: true, proto: registry.Chat, call: newTestCall("/v1/chat/completions"), body: chat, err: ErrNoExperiment, parses: 2},
		{name: "no default, no candidate: body not read", noDefault: true, headOnly: true, proto: registry.Gemini, call: newTestCall("/v1beta/models/x:generateContent"), body: `{}`, err: ErrNoExperiment},
		{name: "override allowed", proto: registry.Chat, call: newTestCall("/v1/chat/completions", "X-CAM-Agent", "support-bot", "X-CAM-Experiment", "coding"), body: chat, want: "coding", task: "hello", parses: 1},
		{name: "override allowed, no default", noDefault: true, proto: registry.Chat, call: newTestCall("/v1/chat/completions", "X-CAM-Experiment", "research"), body: chat, want: "research", task: "hello", parses: 1},
		{name: "override ignored", proto: registry.Chat, call: newTestCall("/v1/chat/completions", "X-CAM-Agent", "support-bot", "X-CAM-Experiment", "responses"), body: chat, want: "support", task: "hello", ignored: true, parses: 1},
		{name: "override unknown", proto: registry.Chat, call: newTestCall("/v1/chat/completions", "X-CAM-Experiment", "suport"), body: chat,
			errHas: `X-CAM-Experiment: "suport" is not an experiment; the experiments are support, research, coding, responses, tasks, default`},
		{name: "a body not read", proto: registry.Chat, call: newTestCall("/v1/chat/completions"), body: `{"model":`, errHas: "JSON", parses: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			xs := gatewayExperiments(t, !tt.noDefault)
			if tt.reordered {
				xs[0], xs[2] = xs[2], xs[0]
			}
			if tt.headOnly {
				xs = xs[:4]
			}
			var n int
			ch, err := Choose(xs, counting(tt.proto, &n), tt.call, []byte(tt.body))
			switch {
			case tt.err != nil || tt.errHas != "":
				if tt.err != nil && !errors.Is(err, tt.err) || tt.errHas != "" && (err == nil || !strings.Contains(err.Error(), tt.errHas)) {
					t.Fatalf("err %v, want %v %q", err, tt.err, tt.errHas)
				}
				if ch.Experiment != nil {
					t.Errorf("chose %s with an error", ch.Experiment.Name)
				}
			case err != nil:
				t.Fatal(err)
			case ch.Experiment.Name != tt.want:
				t.Errorf("chose %s, want %s", ch.Experiment.Name, tt.want)
			case ch.Request.Parsed().Task != tt.task:
				t.Errorf("task %q, want %q: the body must be read by the chosen experiment's rules", ch.Request.Parsed().Task, tt.task)
			}
			if ch.Ignored != tt.ignored {
				t.Errorf("ignored %v, want %v", ch.Ignored, tt.ignored)
			}
			if n != tt.parses {
				t.Errorf("the body was read %d times, want %d", n, tt.parses)
			}
		})
	}
}

// TestChooseOneExperimentAllocatesNothing: the one-experiment form (an empty match)
// costs a call no allocation beyond its parse, and its credential is not read (the
// test call's Header allocates the value it finds).
func TestChooseOneExperimentAllocatesNothing(t *testing.T) {
	r, err := registry.Chat.Parse(nil, []byte(taskBody), protocol.DefaultTaskRules())
	if err != nil {
		t.Fatal(err)
	}
	p := *registry.Chat
	p.Parse = func(registry.Call, []byte, []protocol.TaskRule) (protocol.Request, error) { return r, nil }
	xs := []*Experiment{testExperiment(t, "default", false, Match{}, protocol.DefaultTaskRules())}
	c := newTestCall("/v1/chat/completions", "Authorization", "Bearer sk-1")
	body := []byte(taskBody)
	if n := testing.AllocsPerRun(100, func() {
		if ch, err := Choose(xs, &p, c, body); err != nil || ch.Experiment != xs[0] {
			t.Fatal("the one experiment did not take the call")
		}
	}); n != 0 {
		t.Errorf("Choose allocates %v times a call", n)
	}
}

// TestCredential: the client's credential wherever its SDK puts it, the Bearer scheme
// dropped (in any case), a SigV4 signature's access key id, Authorization first.
func TestCredential(t *testing.T) {
	for _, tt := range []struct {
		call *testCall
		want string
	}{
		{newTestCall("/", "Authorization", "Bearer sk-1"), "sk-1"},
		{newTestCall("/", "Authorization", "bearer sk-1"), "sk-1"},
		{newTestCall("/", "Authorization", "Bearer "), ""},
		{newTestCall("/", "Authorization", "Basic dTpw"), "Basic dTpw"},
		{newTestCall("/", "Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240101/us-west-2/bedrock/aws4_request, SignedHeaders=host, Signature=ab"), "AKIDEXAMPLE"},
		{newTestCall("/", "Authorization", "AWS4-HMAC-SHA256 SignedHeaders=host"), ""},
		{newTestCall("/", "X-Api-Key", "sk-ant"), "sk-ant"},
		{newTestCall("/", "Api-Key", "azure-key"), "azure-key"},
		{newTestCall("/", "X-Goog-Api-Key", "goog"), "goog"},
		{newTestCall("/?alt=sse&key=goog2"), "goog2"},
		{newTestCall("/", "Authorization", "Bearer first", "X-Api-Key", "second"), "first"},
		{newTestCall("/"), ""},
	} {
		if got := string(Credential(tt.call)); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.call, got, tt.want)
		}
	}
	if got, want := fingerprint("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Errorf("KeyFingerprint(abc) = %s, want sha256 hex %s", got, want)
	}
}

// FuzzChoose: for any agent, credential, path and body, Choose never panics and picks
// what the match rules say, checked one experiment at a time: the first whose
// conditions all hold on the body read by its own rules, or an error.
func FuzzChoose(f *testing.F) {
	f.Add("support-bot", "Bearer sk-research", "/v1/chat/completions", `{"model":"gpt-5","messages":[{"role":"user","content":"refund"}]}`, "")
	f.Add("", "", "/v1/chat/completions", `{"model":"gpt-4o","metadata":{"task":"a refund"},"messages":[]}`, "coding")
	f.Add("x", "AWS4-HMAC-SHA256 Credential=/", "/v1/responses", `{"input":[{"role":"user","content":"hi"}]}`, "nope")
	f.Fuzz(func(t *testing.T, agent, authz, path, body, override string) {
		xs := gatewayExperiments(t, len(body)%2 == 0)
		c := newTestCall("/"+strings.TrimPrefix(path, "/"), "X-CAM-Agent", agent, "Authorization", authz, "X-CAM-Experiment", override)
		p, _ := registry.Match(registry.All, c)
		proto := registry.All[p]
		ch, err := Choose(xs, proto, c, []byte(body))
		if override != "" {
			i := slices.IndexFunc(xs, func(x *Experiment) bool { return x.Name == override })
			var unknown *UnknownExperimentError
			switch {
			case i < 0:
				if !errors.As(err, &unknown) {
					t.Fatalf("unknown override %q: %v", override, err)
				}
				return
			case xs[i].Policy.AllowOverride():
				if err == nil && ch.Experiment != xs[i] {
					t.Fatalf("override %q: chose %s", override, ch.Experiment.Name)
				}
				return
			case err == nil && !ch.Ignored:
				t.Fatalf("override %q of an experiment without overrides not reported ignored", override)
			}
		}
		var want *Experiment
		var wantErr error
		for _, x := range xs {
			var key keyPrint
			if !x.Match.head(c, proto.Explain, &key) {
				continue
			}
			r, err := proto.Parse(c, []byte(body), x.TaskRules)
			if err != nil {
				wantErr = err
				break
			}
			if x.Match.body(r.Parsed()) {
				want = x
				break
			}
		}
		switch {
		case wantErr != nil:
			if err == nil {
				t.Fatalf("chose %s; a candidate's parse failed: %v", ch.Experiment.Name, wantErr)
			}
		case want == nil:
			if !errors.Is(err, ErrNoExperiment) {
				t.Fatalf("chose %v (%v), want none", ch.Experiment, err)
			}
		case err != nil || ch.Experiment != want:
			t.Fatalf("chose %v (%v), want %s", ch.Experiment, err, want.Name)
		}
	})
}

// TestNewMatch: a match's globs and regexp are checked; fingerprints and model globs
// compare lower-case.
func TestNewMatch(t *testing.T) {
	if _, err := NewMatch(nil, nil, nil, []string{"[a"}, nil, ""); err == nil {
		t.Error("a bad path glob was accepted")
	}
	if _, err := NewMatch(nil, nil, nil, nil, nil, "("); err == nil {
		t.Error("a bad task regexp was accepted")
	}
	m := mustMatch(t, nil, []string{"ABCDEF12"}, nil, nil, []string{"GPT-*"}, "")
	if m.fingerprints[0] != "abcdef12" || m.models[0] != "gpt-*" || m.Empty() {
		t.Errorf("%+v", m)
	}
	if !(&Match{}).Empty() || mustMatch(t, nil, nil, nil, nil, nil, "x").task.String() != regexp.MustCompile("x").String() {
		t.Error("Empty")
	}
}

// BenchmarkChoose is the choice of a call's experiment with its body read (a real
// chat body, tau-bench's size): the body read alone, then chosen among one experiment
// (the one-experiment form: the cost added to every call is the difference), then
// among a gateway's six, matched by key fingerprint, model and task.
func BenchmarkChoose(b *testing.B) {
	body := []byte(taskBody)
	rules := protocol.DefaultTaskRules()
	c := newTestCall("/v1/chat/completions", "Authorization", "Bearer sk-research")
	b.Run("parse-alone", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := registry.Chat.Parse(c, body, rules); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("one-experiment", func(b *testing.B) {
		xs := []*Experiment{testExperiment(b, "default", false, Match{}, rules)}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Choose(xs, registry.Chat, c, body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gateway", func(b *testing.B) {
		xs := gatewayExperiments(b, true)
		b.ReportAllocs()
		for b.Loop() {
			if ch, err := Choose(xs, registry.Chat, c, body); err != nil || ch.Experiment.Name != "research" {
				b.Fatal(err)
			}
		}
	})
}
