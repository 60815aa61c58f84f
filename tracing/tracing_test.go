package tracing

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/camproxy/camproxy/internal/testkit"
)

func TestExportAndPropagate(t *testing.T) {
	rcv := testkit.NewOTLP()
	defer rcv.Close()
	tr, err := New(Options{Endpoint: rcv.URL, ServiceName: "camproxy-test", SampleRatio: 1, Version: "v9"})
	if err != nil {
		t.Fatal(err)
	}
	// An agent's traceparent is followed: the span is its child, in its trace.
	in := http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	ctx := tr.Propagator.Extract(context.Background(), HeaderCarrier{GetFn: in.Get})
	ctx, span := tr.Tracer.Start(ctx, "chat gpt-4o", trace.WithSpanKind(trace.SpanKindClient))
	span.SetAttributes(OperationName.String("chat"), InputTokens.Int(12))
	out := http.Header{}
	tr.Propagator.Inject(ctx, HeaderCarrier{SetFn: out.Set})
	span.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Spans()
	if len(spans) != 1 {
		t.Fatalf("%d spans exported", len(spans))
	}
	s := spans[0]
	if s.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || s.ParentID != "00f067aa0ba902b7" || s.Name != "chat gpt-4o" ||
		s.Attrs["gen_ai.operation.name"] != "chat" || s.Attrs["gen_ai.usage.input_tokens"] != int64(12) ||
		s.Resource["service.name"] != "camproxy-test" || s.Resource["service.version"] != "v9" || s.Kind != 3 {
		t.Fatalf("span %+v", s)
	}
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + s.SpanID + "-01"; out.Get("Traceparent") != want {
		t.Fatalf("propagated %q, want %q", out.Get("Traceparent"), want)
	}
}

func TestDisabledAndBadEndpoint(t *testing.T) {
	tr, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.Tracer.Start(context.Background(), "x")
	if span.SpanContext().IsValid() {
		t.Fatal("tracing off still makes real spans")
	}
	span.End()
	if _, err := New(Options{Endpoint: "collector:4318"}); err == nil {
		t.Fatal("an endpoint without a scheme was accepted")
	}
}
