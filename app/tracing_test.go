package app

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/camproxy/camproxy/config"
	"github.com/camproxy/camproxy/internal/testkit"
)

// TestTracingOTLP: with tracing.endpoint set, each call is a span in the agent's
// trace (W3C traceparent in, camproxy's span out to the upstream) with the GenAI
// attributes and camproxy's, and the context lookup is its child span.
func TestTracingOTLP(t *testing.T) {
	rcv := testkit.NewOTLP()
	defer rcv.Close()
	e := newEnv(t, func(c *config.Config) {
		c.Tracing.Endpoint = rcv.URL
		c.Tracing.ServiceName = "camproxy-e2e"
	})
	const traceID, agentSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	a := newAgent("Trace me: rebook flight 7", false)
	for i := range 4 {
		h := map[string]string{}
		if i%2 == 0 { // every other turn carries the agent's trace; the others start their own
			h["traceparent"] = "00-" + traceID + "-" + agentSpan + "-01"
		}
		resp, body := e.post(a.body(""), h)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		a.msgs = append(a.msgs, json.RawMessage(gjson.GetBytes(body, "choices.0.message").Raw))
		a.add(map[string]any{"role": "user", "content": "go on"})
	}
	// No deadline: a hang meets go test's -timeout.
	ctx := context.Background()
	if err := e.app.Shutdown(ctx); err != nil { // flushes the spans
		t.Fatal(err)
	}
	spans := rcv.Spans()
	var calls, augments []testkit.Span
	for _, s := range spans {
		switch {
		case strings.HasPrefix(s.Name, "chat "):
			calls = append(calls, s)
		case strings.HasPrefix(s.Name, "augment "):
			augments = append(augments, s)
		}
	}
	if len(calls) != 4 {
		t.Fatalf("%d call spans, want 4: %+v", len(calls), spans)
	}
	first := calls[0]
	for _, c := range calls {
		if c.Attrs["camproxy.turn"] == int64(1) && c.TraceID == traceID {
			first = c
		}
	}
	if first.TraceID != traceID || first.ParentID != agentSpan || first.Name != "chat gpt-4o" || first.Kind != 3 {
		t.Fatalf("first call span: %+v", first)
	}
	for k, want := range map[string]any{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o",
		"camproxy.arm": "cam", "camproxy.context.source": "miss", "http.response.status_code": int64(200)} {
		if first.Attrs[k] != want {
			t.Errorf("%s = %v, want %v", k, first.Attrs[k], want)
		}
	}
	if first.Attrs["gen_ai.usage.input_tokens"].(int64) <= 0 || first.Attrs["gen_ai.usage.output_tokens"] != int64(7) ||
		first.Attrs["camproxy.episode.id"] == "" || first.Resource["service.name"] != "camproxy-e2e" {
		t.Fatalf("first call span: %+v", first)
	}
	if len(augments) != 1 || augments[0].ParentID != first.SpanID || augments[0].TraceID != traceID ||
		augments[0].Attrs["camproxy.augmenter"] != "cam" || augments[0].Attrs["camproxy.context.source"] != "miss" {
		t.Fatalf("augment spans (one, under the first call): %+v", augments)
	}
	// The upstream got camproxy's span as its parent, not the agent's.
	if tp := e.up.Requests()[0].Header.Get("Traceparent"); tp != "00-"+traceID+"-"+first.SpanID+"-01" {
		t.Fatalf("upstream traceparent %q, want camproxy's span %s", tp, first.SpanID)
	}
	// Every later turn continues the episode: no lookup, source episode.
	for _, c := range calls {
		if c.SpanID != first.SpanID && (c.Attrs["camproxy.context.source"] != "episode" || c.Attrs["camproxy.episode.id"] != first.Attrs["camproxy.episode.id"]) {
			t.Fatalf("later call span: %+v", c)
		}
	}
}

// TestTracingOffPassesTraceparent: with tracing off, the agent's traceparent reaches
// the upstream untouched.
func TestTracingOffPassesTraceparent(t *testing.T) {
	e := newEnv(t, nil)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	e.post(newAgent("untraced", false).body(""), map[string]string{"traceparent": tp})
	if got := e.up.Last().Header.Get("Traceparent"); got != tp {
		t.Fatalf("upstream traceparent %q", got)
	}
}
