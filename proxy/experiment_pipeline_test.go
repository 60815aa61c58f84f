package proxy

import (
	"bytes"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/camproxy/camproxy/policies"
	"github.com/camproxy/camproxy/protocol"
)

// agentsProxy is a gateway of two experiments matched by X-CAM-Agent — support (arm
// baseline, no context; overrides off) and coding (arm cam, the CAM's context;
// overrides on) — and, withDefault, a default (arm plain, no context).
func agentsProxy(t *testing.T, calls chan upstreamCall, withDefault bool) *inmemProxy {
	t.Helper()
	return newInmemProxy(t, capture(calls, answerCompletion), false, func(o *Options, _ *fasthttp.Server) {
		rules := protocol.DefaultTaskRules()
		place := Placement{Mode: protocol.AppendToTask, Template: "\n\n{{context}}"}
		x := func(name string, allow bool, agent, arm, augmenter string) *Experiment {
			pol, err := policies.New(name, policies.StickyEpisode, allow, []policies.Arm{{Name: arm, Weight: 1, Augmenter: augmenter}})
			if err != nil {
				t.Fatal(err)
			}
			var m Match
			if agent != "" {
				m = mustMatch(t, []string{agent}, nil, nil, nil, nil, "")
			}
			return &Experiment{Name: name, Match: m, TaskRules: rules, Placement: place, Policy: pol, Augmenters: o.Runtime.Augmenters}
		}
		xs := []*Experiment{x("support", false, "support-bot", "baseline", "none"), x("coding", true, "coder", "cam", "cam")}
		if withDefault {
			xs = append(xs, x("default", false, "", "plain", "none"))
		}
		o.Runtime = &Runtime{Experiments: xs}
	})
}

// callPair is a request and response for a test's calls, released when it ends.
func callPair(t *testing.T) (*fasthttp.Request, *fasthttp.Response) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	t.Cleanup(func() {
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	})
	return req, resp
}

// noTurn fails t when a turn was recorded.
func noTurn(t *testing.T, p *inmemProxy) {
	t.Helper()
	select {
	case turn := <-p.rec.turns:
		t.Fatalf("a turn was recorded: %+v", turn.Episode)
	default:
	}
}

// camHeaders are the X-CAM-* headers of an answer.
func camHeaders(h *fasthttp.ResponseHeader) []string {
	var out []string
	for k, v := range h.All() {
		if strings.HasPrefix(strings.ToLower(string(k)), "x-cam-") {
			out = append(out, string(k)+": "+string(v))
		}
	}
	return out
}

// TestExperimentsByAgent: each agent's calls land in its own experiment — its arm, its
// context, the answer's X-CAM-Experiment, the recorded episode's experiment, the
// metrics' experiment label; a call no experiment takes goes to the default.
// X-CAM-Experiment moves a call where the experiment allows it, is reported ignored
// where it does not, and is refused naming the experiments when unknown.
func TestExperimentsByAgent(t *testing.T) {
	withContext := strings.Replace(taskBody, `Friday."`, `Friday.\n\n`+camContext+`"`, 1)
	for _, tt := range []struct {
		name       string
		hdr        []string
		experiment string
		arm        string
		upstream   string // the body the upstream gets
		ignored    bool
		status     int
		msg        string
	}{
		{name: "support agent", hdr: []string{hdrAgent, "support-bot"}, experiment: "support", arm: "baseline", upstream: taskBody},
		{name: "coding agent", hdr: []string{hdrAgent, "coder"}, experiment: "coding", arm: "cam", upstream: withContext},
		{name: "no agent: the default", experiment: "default", arm: "plain", upstream: taskBody},
		{name: "an unknown agent: the default", hdr: []string{hdrAgent, "Coder"}, experiment: "default", arm: "plain", upstream: taskBody},
		{name: "override allowed", hdr: []string{hdrAgent, "support-bot", hdrExperiment, "coding"}, experiment: "coding", arm: "cam", upstream: withContext},
		{name: "override ignored", hdr: []string{hdrAgent, "coder", hdrExperiment, "support"}, experiment: "coding", arm: "cam", upstream: withContext, ignored: true},
		{name: "override unknown", hdr: []string{hdrAgent, "coder", hdrExperiment, "suport"}, status: 400,
			msg: `X-CAM-Experiment: "suport" is not an experiment; the experiments are support, coding, default`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			calls := make(chan upstreamCall, 1)
			p := agentsProxy(t, calls, true)
			req, resp := callPair(t)
			if err := p.do(req, resp, []byte(taskBody), tt.hdr...); err != nil {
				t.Fatal(err)
			}
			h := &resp.Header
			if tt.status != 0 {
				if resp.StatusCode() != tt.status || gjson.GetBytes(resp.Body(), "error.message").String() != tt.msg {
					t.Fatalf("%d %s, want %d %q", resp.StatusCode(), resp.Body(), tt.status, tt.msg)
				}
				if len(calls) != 0 {
					t.Error("the refused call reached the upstream")
				}
				noTurn(t, p)
				return
			}
			up := <-calls
			if string(up.body) != tt.upstream {
				t.Errorf("upstream body\n%s\nwant\n%s", up.body, tt.upstream)
			}
			if got := string(h.Peek(hdrExperiment)); got != tt.experiment {
				t.Errorf("%s %q, want %q", hdrExperiment, got, tt.experiment)
			}
			if got := string(h.Peek(hdrArm)); got != tt.arm {
				t.Errorf("%s %q, want %q", hdrArm, got, tt.arm)
			}
			if got, want := string(h.Peek(hdrExperimentOverride)), map[bool]string{true: "ignored"}[tt.ignored]; got != want {
				t.Errorf("%s %q, want %q", hdrExperimentOverride, got, want)
			}
			turn := nextTurn(t, p)
			if turn.Episode.Experiment != tt.experiment || turn.Episode.Arm != tt.arm {
				t.Errorf("recorded episode of experiment %q arm %q, want %q %q", turn.Episode.Experiment, turn.Episode.Arm, tt.experiment, tt.arm)
			}
			if n := testutil.ToFloat64(p.srv.m.Episodes.WithLabelValues(tt.experiment, tt.arm)); n != 1 {
				t.Errorf("episodes_total{experiment=%q,arm=%q} = %v, want 1", tt.experiment, tt.arm, n)
			}
			if n := testutil.ToFloat64(p.srv.m.Requests.WithLabelValues("openai", tt.experiment, tt.arm, "200")); n != 1 {
				t.Errorf("requests_total{experiment=%q,arm=%q} = %v, want 1", tt.experiment, tt.arm, n)
			}
			if st := p.srv.Stats().Experiments[tt.experiment][tt.arm]; st.Episodes != 1 {
				t.Errorf("dashboard stats of %s/%s: %+v", tt.experiment, tt.arm, st)
			}
		})
	}
}

// TestNoExperimentRelaysUntouched: with no default, a call no experiment takes is
// relayed byte for byte as X-CAM-Skip's is, and nothing of it is recorded (no turn,
// no episode, no count); its answer carries no X-CAM-* header. A call an experiment
// takes, next, is recorded as usual.
func TestNoExperimentRelaysUntouched(t *testing.T) {
	calls := make(chan upstreamCall, 1)
	p := agentsProxy(t, calls, false)
	req, resp := callPair(t)
	// Odd spacing and key order: re-encoding anywhere would show.
	body := []byte("{\"messages\":[{\"role\":\"user\",\"content\":\"Change my flight to Friday.\"}] ,\n \"model\":\"gpt-4o\"}")
	if err := p.do(req, resp, body, hdrAgent, "someone-else", hdrTask, "t-1"); err != nil {
		t.Fatal(err)
	}
	up := <-calls
	if !bytes.Equal(up.body, body) {
		t.Errorf("upstream body\n%q\nwant\n%q", up.body, body)
	}
	for k := range up.header {
		if strings.HasPrefix(strings.ToLower(k), "x-cam-") {
			t.Errorf("camproxy's header %s reached the upstream", k)
		}
	}
	if resp.StatusCode() != 200 || !bytes.Equal(resp.Body(), completion) {
		t.Errorf("agent got %d %s", resp.StatusCode(), resp.Body())
	}
	if got := camHeaders(&resp.Header); len(got) != 0 {
		t.Errorf("the answer carries camproxy's headers %v", got)
	}
	if st := p.srv.Stats(); len(st.Experiments) != 0 {
		t.Errorf("counted: %+v", st)
	}
	noTurn(t, p)
	// The next call, the support agent's, is the first turn recorded.
	if err := p.do(req, resp, []byte(taskBody), hdrAgent, "support-bot"); err != nil {
		t.Fatal(err)
	}
	<-calls
	if turn := nextTurn(t, p); turn.Episode.Experiment != "support" || turn.Index != 0 {
		t.Errorf("recorded %+v", turn.Episode)
	}
	noTurn(t, p)
}

// TestStitchingStaysInItsExperiment: two agents whose conversations open alike each
// continue their own episode — stitching never crosses experiments — and an episode
// named by its id keeps the experiment it started on whoever continues it.
func TestStitchingStaysInItsExperiment(t *testing.T) {
	calls := make(chan upstreamCall, 8)
	p := agentsProxy(t, calls, true)
	req, resp := callPair(t)
	call := func(body string, hdr ...string) (episode, experiment string) {
		t.Helper()
		if err := p.do(req, resp, []byte(body), hdr...); err != nil || resp.StatusCode() != 200 {
			t.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
		}
		<-calls
		turn := nextTurn(t, p)
		if got := string(resp.Header.Peek(hdrExperiment)); got != turn.Episode.Experiment {
			t.Errorf("answered %s %q, recorded %q", hdrExperiment, got, turn.Episode.Experiment)
		}
		return string(resp.Header.Peek(hdrEpisode)), turn.Episode.Experiment
	}
	answer := gjson.GetBytes(completion, "choices.0.message").Raw
	turn2 := strings.Replace(taskBody, `}],"temperature"`, `},`+answer+`,{"role":"user","content":"It is 7."}],"temperature"`, 1)

	support1, _ := call(taskBody, hdrAgent, "support-bot")
	coding1, _ := call(taskBody, hdrAgent, "coder")
	if support1 == coding1 {
		t.Fatal("two experiments' first calls share an episode")
	}
	// The coding agent's second turn resends the same history the support agent's
	// first turn had: it continues its own episode.
	if ep, x := call(turn2, hdrAgent, "coder"); ep != coding1 || x != "coding" {
		t.Errorf("coding turn 2: episode %s (%s), want %s (coding)", ep, x, coding1)
	}
	if ep, x := call(turn2, hdrAgent, "support-bot"); ep != support1 || x != "support" {
		t.Errorf("support turn 2: episode %s (%s), want %s (support)", ep, x, support1)
	}
	// A default-experiment call of the same history finds neither.
	if ep, x := call(turn2); ep == support1 || ep == coding1 || x != "default" {
		t.Errorf("default call: episode %s (%s) crossed into another experiment's", ep, x)
	}
	// Named by id, the support episode stays support's when the coder sends it.
	if ep, x := call(turn2, hdrAgent, "coder", hdrEpisode, support1); ep != support1 || x != "support" {
		t.Errorf("named episode: %s (%s), want %s (support)", ep, x, support1)
	}
	if resp.Header.Peek(hdrArm) == nil || string(resp.Header.Peek(hdrArm)) != "baseline" {
		t.Errorf("the named episode's arm %q, want support's baseline", resp.Header.Peek(hdrArm))
	}
}

// TestRuntimeOneExperimentForm: a Runtime built with the one-experiment fields is one
// experiment named after its policy, taking every call (the form every earlier caller
// builds).
func TestRuntimeOneExperimentForm(t *testing.T) {
	calls := make(chan upstreamCall, 1)
	p := newInmemProxy(t, capture(calls, answerCompletion), false)
	rt := p.srv.Runtime()
	if len(rt.Experiments) != 1 || rt.Experiments[0].Name != "bench" || !rt.Experiments[0].Match.Empty() || rt.Experiments[0].Policy != rt.Policy {
		t.Fatalf("runtime %+v", rt.Experiments)
	}
	req, resp := callPair(t)
	if err := p.do(req, resp, []byte(taskBody), hdrAgent, "anyone"); err != nil {
		t.Fatal(err)
	}
	<-calls
	if got := string(resp.Header.Peek(hdrExperiment)); got != "bench" {
		t.Errorf("%s %q", hdrExperiment, got)
	}
	if turn := nextTurn(t, p); turn.Episode.Experiment != "bench" {
		t.Errorf("recorded experiment %q", turn.Episode.Experiment)
	}
}
