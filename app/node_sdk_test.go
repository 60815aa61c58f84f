package app

import (
	"context"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/internal/testkit"
	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/replay"
)

// TestNodeBedrockSDK: @aws-sdk/client-bedrock-runtime, unmodified (it speaks HTTP/2 to
// an http:// endpoint), does Converse then ConverseStream through camproxy.
func TestNodeBedrockSDK(t *testing.T) {
	b := newBedrockEnv(t)
	const task = "Rebook Mia onto the next flight to Boston."
	out := gjson.ParseBytes(nodeScript(t, "bedrock-converse.mjs", "CAMPROXY_BASE_URL="+b.base, "CAMPROXY_TASK="+task,
		"AWS_ACCESS_KEY_ID=AKIDTHENODEAGENT", "AWS_SECRET_ACCESS_KEY=node-agent-secret", "AWS_REGION=us-east-1"))
	if out.Get("toolUse.name").String() == "" || out.Get("toolUse.input.query").String() != "flight status" {
		t.Fatalf("tool use: %s", out.Get("toolUse").Raw)
	}
	events := out.Get("stream.events").Array()
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, e.String())
	}
	k := strings.Join(kinds, ",")
	if !strings.HasPrefix(k, "messageStart") || !strings.HasSuffix(k, "messageStop,metadata") || out.Get("stream.error").String() != "" {
		t.Fatalf("stream events %s (error %s)", k, out.Get("stream.error").String())
	}
	if h := out.Get("headers").Array(); len(h) < 2 || h[0].String() != "miss" || h[1].String() != "episode" {
		t.Fatalf("X-CAM-Context per call: %s", out.Get("headers").Raw)
	}
	for _, r := range b.br.Requests() {
		if r.AuthError != "" {
			t.Fatalf("Bedrock refused camproxy's signature: %s", r.AuthError)
		}
		if !strings.Contains(gjson.GetBytes(r.Body, "messages.0.content.0.text").String(), "Guidance for: "+task) {
			t.Fatalf("context not spliced: %s", r.Body)
		}
	}
}

// TestNodeAnthropicSDK: @anthropic-ai/sdk, streaming and not, through camproxy.
func TestNodeAnthropicSDK(t *testing.T) {
	t.Parallel() // its own fakes, dirs and processes (TestMain: agentParallel)
	e, an := newAnthropicEnv(t, nil)
	const task = "Change the shipping address of order 77."
	out := gjson.ParseBytes(nodeScript(t, "anthropic-messages.mjs", "CAMPROXY_BASE_URL="+e.base, "CAMPROXY_TASK="+task, "ANTHROPIC_API_KEY=sk-ant-node"))
	if out.Get("toolUse.name").String() == "" || out.Get("stream.error").String() != "" {
		t.Fatalf("anthropic sdk: %s", out.Raw)
	}
	if h := out.Get("headers").Array(); len(h) < 2 || h[0].String() != "miss" || h[1].String() != "episode" {
		t.Fatalf("X-CAM-Context per call: %s", out.Get("headers").Raw)
	}
	for _, r := range an.Requests() {
		if !strings.Contains(string(r.Body), "Guidance for: "+task) || r.Header.Get("X-Api-Key") != "sk-ant-node" {
			t.Fatalf("upstream call: %s %v", r.Body, r.Header)
		}
	}
}

// TestStrandsAgent: a real Strands agent with one tool completes a multi-turn task
// through camproxy's Bedrock route and, separately, its OpenAI route. Both episodes are
// recorded with the same normalised conversation and one context each.
func TestStrandsAgent(t *testing.T) {
	b := newBedrockEnv(t)
	const task = "Is flight UA12 on time?"
	const answer = "UA12 is on time; it leaves from gate B12."
	b.br.Configure(func(br *testkit.Bedrock) {
		br.ReplyFn = func(kind, model string, body gjson.Result) testkit.BedrockReply {
			r := testkit.DefaultBedrockReply(kind, model, body)
			if r.Content != "" {
				r.Content = answer
			}
			return r
		}
	})
	b.up.Configure(func(u *testkit.Upstream) {
		u.Reply = func(body gjson.Result) testkit.Reply {
			r := testkit.DefaultReply(body)
			if r.Content != "" {
				r.Content = answer
			}
			return r
		}
	})
	runs := map[string]gjson.Result{}
	for _, kind := range []string{"bedrock", "openai"} {
		base := b.base
		if kind == "openai" {
			base += "/v1"
		}
		runs[kind] = gjson.ParseBytes(nodeScript(t, "strands-agent.mjs", "CAMPROXY_MODEL_KIND="+kind, "CAMPROXY_BASE_URL="+base,
			"CAMPROXY_TASK="+task, "CAMPROXY_FOLLOWUP=", "AWS_ACCESS_KEY_ID=AKIDSTRANDS", "AWS_SECRET_ACCESS_KEY=strands-secret", "AWS_REGION=us-east-1"))
		if runs[kind].Get("toolCalls").Int() < 1 || runs[kind].Get("final").String() == "" || len(runs[kind].Get("toolErrors").Array()) > 0 {
			t.Fatalf("%s agent: %s", kind, runs[kind].Raw)
		}
	}
	ctx := context.Background() // no deadline of its own: a hang meets go test's -timeout
	if err := b.app.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	src, _ := replay.OpenSource(ctx, b.cfg.Replay.Sinks[0])
	buf, err := replay.Read(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	byProto := map[string]*replay.Episode{}
	for _, ep := range buf.Episodes {
		if byProto[ep.Protocol] != nil {
			t.Fatalf("two %s episodes: the agent's turns were not stitched into one", ep.Protocol)
		}
		byProto[ep.Protocol] = ep
	}
	br, oa := byProto["bedrock"], byProto["openai"]
	if br == nil || oa == nil {
		t.Fatalf("episodes by protocol: %v", byProto)
	}
	for _, ep := range []*replay.Episode{br, oa} {
		if ep.Steps < 2 || !strings.Contains(ep.Context, "Guidance for: "+task) {
			t.Fatalf("%s episode: %d steps, context %q", ep.Protocol, ep.Steps, ep.Context)
		}
	}
	// Same conversation in the same shape, whichever API carried it (ids differ by provider).
	if len(br.Messages) != len(oa.Messages) {
		t.Fatalf("bedrock recorded %d messages, openai %d:\n%+v\n%+v", len(br.Messages), len(oa.Messages), br.Messages, oa.Messages)
	}
	for i := range br.Messages {
		x, y := stripIDs(br.Messages[i]), stripIDs(oa.Messages[i])
		if !sameMessage(x, y) {
			t.Fatalf("message %d differs:\nbedrock %+v\nopenai  %+v", i, x, y)
		}
	}
}

func stripIDs(m protocol.Message) protocol.Message {
	m.ToolCallID = ""
	m.Name = ""
	calls := make([]protocol.ToolCall, len(m.ToolCalls))
	for i, c := range m.ToolCalls {
		calls[i] = protocol.ToolCall{Name: c.Name, Arguments: c.Arguments}
	}
	m.ToolCalls = calls
	return m
}
