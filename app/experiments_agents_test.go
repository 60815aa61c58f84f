package app

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/proxy"
	"github.com/camproxy/camproxy/replay"
	"github.com/camproxy/camproxy/report"
)

// The research agent's key, and the Bedrock support agent's model.
const (
	researchKey  = "sk-research-agent-key"
	supportModel = "amazon.nova-lite-v1:0"
)

// agentExperiments are a gateway's three experiments (issue 30), each with an arm
// named cam whose augmenter is its own CAM, so that a context or a reward that
// strays into another experiment shows: engineers by the X-CAM-Agent header Claude
// Code sends, research by its key's fingerprint, support by a model glob. No default.
func agentExperiments(c *config.Config, cams map[string]*testkit.CAM) {
	fp := proxy.KeyFingerprint([]byte(researchKey))
	matches := map[string]config.Match{
		"engineers": {Agents: []string{"claude-code-eng"}},
		"research":  {KeyFingerprints: []string{string(fp[:12])}},
		"support":   {Models: []string{"*NOVA*"}},
	}
	c.Experiments = nil
	for _, name := range []string{"engineers", "research", "support"} {
		ac := c.Augmenters["cam"]
		ac.BaseURL = cams[name].URL + "/v1"
		c.Augmenters["cam-"+name] = ac
		x := config.DefaultExperiment()
		x.Name, x.Match = name, matches[name]
		x.Arms = []config.Arm{{Name: "cam", Weight: 1, Augmenter: "cam-" + name}}
		x.Adaptive.Enabled, x.Adaptive.UpdatePeriod = true, time.Hour // statistics kept; only activation reallocates
		c.Experiments = append(c.Experiments, x)
	}
}

// experimentContext is what experiment x's CAM answers for a task.
func experimentContext(x, task string) string { return "[" + x + "] playbook for: " + task }

// TestExperimentsRealAgents: one camproxy, three experiments, three real clients —
// Claude Code naming itself with ANTHROPIC_CUSTOM_HEADERS, an openai-go agent with
// the research key, a bedrockruntime client on a Nova model. Each call reaches its
// upstream with its own experiment's context, is answered (where the client shows
// headers) with X-CAM-Experiment, and is stored and recorded with its experiment. A
// reward posted for research's episode moves research's statistics only, and each
// experiment's report has its own episodes and rewards. An openai-go call none
// matches is relayed byte for byte, unanswered by X-CAM-* headers and unrecorded.
func TestExperimentsRealAgents(t *testing.T) {
	cams := map[string]*testkit.CAM{}
	for _, x := range []string{"engineers", "research", "support"} {
		cam := testkit.NewCAM()
		t.Cleanup(cam.Close)
		cam.SetContext(func(task string) string { return experimentContext(x, task) })
		cams[x] = cam
	}
	an := testkit.NewAnthropic()
	t.Cleanup(an.Close)
	b := newBedrockEnvWith(t, func(c *config.Config) {
		c.Upstreams["anthropic"].BaseURL = an.URL
		agentExperiments(c, cams)
	})
	e, ctx := b.env, context.Background()
	episodes := map[string]map[string]bool{} // experiment → its episodes as the clients or the store saw them

	// engineers: a Claude Code session with a Read tool turn.
	cc := newClaudeCode(t, e.base)
	an.Configure(func(a *testkit.Anthropic) { a.ReplyFn = claudeScript(filepath.Join(cc.work, "README.md")) })
	const ccTask = "Summarise README.md in one line."
	if out, _ := cc.run(t, []string{"ANTHROPIC_CUSTOM_HEADERS=X-CAM-Agent: claude-code-eng"}, "-p", ccTask); !strings.Contains(out, "a demo repository") {
		t.Fatalf("claude answered %q", out)
	}
	ccCalls := 0
	for _, r := range an.Requests() {
		if r.Method != http.MethodPost || !strings.HasPrefix(r.Path, "/v1/messages") {
			continue
		}
		ccCalls++
		if !strings.Contains(string(r.Body), jsonText(experimentContext("engineers", ccTask))) || strings.Count(string(r.Body), "] playbook for:") != 1 {
			t.Errorf("Claude Code call %d reached the upstream without engineers' context alone: %.400s", ccCalls, r.Body)
		}
		if r.Header.Get("X-Cam-Agent") != "" {
			t.Errorf("the agent header reached the upstream")
		}
	}
	if ccCalls < 2 {
		t.Fatalf("%d Claude Code model calls, want the Read turn's two", ccCalls)
	}

	// research: an openai-go agent, a tool call then its result.
	var sent [][]byte
	client := openai.NewClient(option.WithBaseURL(e.base+"/v1"), option.WithAPIKey(researchKey), option.WithMaxRetries(0),
		keepSent(&sent))
	const oaTask = "Find which supervisor account owns the password vault."
	params := openai.ChatCompletionNewParams{
		Model:    "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are a research harness."), openai.UserMessage(oaTask)},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "lookup", Parameters: shared.FunctionParameters{"type": "object"}})},
	}
	var raw *http.Response
	resp, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	researchEp := raw.Header.Get("X-CAM-Episode-Id")
	if raw.Header.Get("X-CAM-Experiment") != "research" || raw.Header.Get("X-CAM-Arm") != "cam" || researchEp == "" || len(resp.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("research turn 1: headers %v, message %+v", raw.Header, resp.Choices[0].Message)
	}
	assertSpliced(t, sent[0], e.up.Last().Body, oaTask, experimentContext("research", oaTask))
	msg := resp.Choices[0].Message
	params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage(`{"owner":"supervisor"}`, msg.ToolCalls[0].ID))
	if _, err := client.Chat.Completions.New(ctx, params, option.WithResponseInto(&raw)); err != nil {
		t.Fatal(err)
	}
	if raw.Header.Get("X-CAM-Experiment") != "research" || raw.Header.Get("X-CAM-Episode-Id") != researchEp {
		t.Fatalf("research turn 2: headers %v, want experiment research, episode %s", raw.Header, researchEp)
	}
	assertSpliced(t, sent[1], e.up.Last().Body, oaTask, experimentContext("research", oaTask))

	// support: a Bedrock Converse call on a Nova model.
	const brTask = "My order #881 arrived broken; I want a refund."
	if _, err := b.client.Converse(ctx, &bedrockruntime.ConverseInput{
		ModelId:  aws.String(supportModel),
		Messages: []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: brTask}}}},
	}); err != nil {
		t.Fatal(err)
	}
	if last := b.br.Last(); last.AuthError != "" || last.Model != supportModel || !strings.Contains(string(last.Body), jsonText("\n\n"+experimentContext("support", brTask))) {
		t.Fatalf("Bedrock upstream saw model %q auth error %q body %s", last.Model, last.AuthError, last.Body)
	}
	h := b.headers.last()
	supportEp := h.Get("X-CAM-Episode-Id")
	if h.Get("X-CAM-Experiment") != "support" || h.Get("X-CAM-Arm") != "cam" || supportEp == "" {
		t.Fatalf("support answer headers %v", h)
	}

	// One call per CAM: each experiment asked its own (Claude Code's session is one episode).
	for x, cam := range cams {
		if n := cam.Calls(); n != 1 {
			t.Errorf("%s's CAM was called %d times, want once", x, n)
		}
	}

	// No experiment takes it: relayed byte for byte, no X-CAM-* answer, nothing kept.
	stranger := openai.NewClient(option.WithBaseURL(e.base+"/v1"), option.WithAPIKey("sk-someone-else"), option.WithMaxRetries(0),
		option.WithHeader("X-CAM-Agent", "nobody-configured"),
		keepSent(&sent))
	const strayTask = "A task for no experiment at all."
	if _, err := stranger.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "gpt-4o", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strayTask)},
	}, option.WithResponseInto(&raw)); err != nil {
		t.Fatal(err)
	}
	if up := e.up.Last(); !bytes.Equal(up.Body, sent[len(sent)-1]) || up.Header.Get("Authorization") != "Bearer sk-someone-else" {
		t.Errorf("the unmatched call was changed: upstream got %s (auth %q), the client sent %s", up.Body, up.Header.Get("Authorization"), sent[len(sent)-1])
	}
	for k := range raw.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-cam-") {
			t.Errorf("the unmatched call's answer carries %s", k)
		}
	}

	// The store has each episode with its experiment; Claude Code's comes from it.
	for x, id := range map[string]string{"research": researchEp, "support": supportEp} {
		ep, err := e.app.Episodes.Get(ctx, id)
		if err != nil || ep.Experiment != x {
			t.Fatalf("episode %s in the store: %+v %v, want experiment %s", id, ep, err, x)
		}
		episodes[x] = map[string]bool{id: true}
	}

	// Rewards: engineers' first, then research's; support's and engineers'
	// statistics do not move for research's.
	stats := func() map[string][2]float64 {
		t.Helper()
		out := map[string][2]float64{}
		for _, x := range []string{"engineers", "research", "support"} {
			st, err := e.app.stats.Load(ctx, x, []string{"cam"})
			if err != nil {
				t.Fatal(err)
			}
			out[x] = [2]float64{st["cam"].N, st["cam"].Sum}
		}
		return out
	}
	// Claude Code shows no headers: its episode is the dashboard's, by experiment.
	var engEp string
	for _, row := range getJSON(t, e.admin+"/v1/episodes?recent=20").Get("episodes").Array() {
		switch x, id := row.Get("experiment").String(), row.Get("episode_id").String(); {
		case x == "engineers" && row.Get("task").String() == ccTask:
			engEp = id
		case x == "" || id == researchEp && x != "research" || id == supportEp && x != "support":
			t.Errorf("the dashboard lists %s", row.Raw)
		}
	}
	if engEp == "" {
		t.Fatal("the dashboard lists no engineers episode of the Claude Code task")
	}
	postFeedback(t, e.admin, engEp, 1)
	before := stats()
	if before["engineers"] != [2]float64{1, 1} || before["research"] != [2]float64{} || before["support"] != [2]float64{} {
		t.Fatalf("after engineers' reward: %v", before)
	}
	postFeedback(t, e.admin, researchEp, 0.25)
	after := stats()
	if after["research"] != [2]float64{1, 0.25} || after["engineers"] != before["engineers"] || after["support"] != before["support"] {
		t.Fatalf("research's reward moved other experiments: before %v, after %v", before, after)
	}

	// Recorded: every episode and step with its experiment, none of the stray call.
	recorded := map[string]string{} // episode → experiment
	for _, ev := range recordedEvents(t, e) {
		switch ev := ev.(type) {
		case *replay.EpisodeEvent:
			if ev.Task == strayTask || ev.Experiment == "" {
				t.Errorf("recorded %+v", ev)
			}
			recorded[ev.EpisodeID] = ev.Experiment
		case *replay.StepEvent:
			if x, ok := recorded[ev.EpisodeID]; !ok || ev.Experiment != x {
				t.Errorf("step of %s recorded with experiment %q, its episode's %q", ev.EpisodeID, ev.Experiment, x)
			}
		case *replay.RewardEvent:
			if want := map[string]string{engEp: "engineers", researchEp: "research"}[ev.EpisodeID]; ev.Experiment != want {
				t.Errorf("reward of %s recorded with experiment %q, want %q", ev.EpisodeID, ev.Experiment, want)
			}
		}
	}
	count := map[string]int{}
	for _, x := range recorded {
		count[x]++
	}
	if count["engineers"] < 1 || count["research"] != 1 || count["support"] != 1 || len(count) != 3 {
		t.Errorf("episodes recorded per experiment %v", count)
	}

	// report --experiment X: X's episodes and rewards alone, as the CLI reads them.
	wantReward := map[string]float64{"engineers": 1, "research": 0.25}
	for _, x := range []string{"engineers", "research", "support"} {
		src, err := replay.OpenSource(ctx, e.cfg.Replay.Sinks[0])
		if err != nil {
			t.Fatal(err)
		}
		rs, _, err := report.SplitStream(ctx, src, replay.ReadOptions{Select: replay.Selection{Experiment: x}}, report.Options{Experiment: x})
		if err != nil {
			t.Fatalf("report --experiment %s: %v", x, err)
		}
		var text strings.Builder
		if err := rs.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		r := rs[0]
		rewarded := 0
		if _, ok := wantReward[x]; ok {
			rewarded = 1
		}
		if len(rs) != 1 || r.Experiment != x || r.Episodes != count[x] || r.Excluded != 0 || len(r.Arms) != 1 || r.Arms[0].Rewarded != rewarded ||
			rewarded == 1 && *r.Arms[0].MeanReward != wantReward[x] || !strings.Contains(text.String(), "experiment "+x+", ") {
			t.Errorf("report --experiment %s: %d reports, %+v\n%s", x, len(rs), r, text.String())
		}
	}
}

// keepSent keeps each request body as the openai-go client put it on the wire.
func keepSent(sent *[][]byte) option.RequestOption {
	return option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		body, _ := io.ReadAll(r.Body)
		*sent = append(*sent, body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		return next(r)
	})
}
