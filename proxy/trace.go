package proxy

import (
	"context"
	"net/http"
	"strconv"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/camproxy/camproxy/protocol"
	"github.com/camproxy/camproxy/tracing"
)

// requestCarrier reads and writes the client request's headers for the propagator.
func requestCarrier(h *fasthttp.RequestHeader) tracing.HeaderCarrier {
	return tracing.HeaderCarrier{
		GetFn: func(k string) string { return string(h.Peek(k)) },
		SetFn: func(k, v string) { h.Set(k, v) },
	}
}

// startSpan opens the call's span, a child of the agent's trace when its request
// carries a traceparent. With tracing off it is a no-op span.
func (s *Server) startSpan(fc *fasthttp.RequestCtx, rt *route, v *protocol.View) (context.Context, trace.Span) {
	if !s.tr.Enabled { // no header parsing, no span: the agent's traceparent passes through as it is
		ctx := context.Background()
		return ctx, trace.SpanFromContext(ctx) // OpenTelemetry's shared no-op span
	}
	ctx := s.tr.Propagator.Extract(context.Background(), requestCarrier(&fc.Request.Header))
	ctx, span := s.tr.Tracer.Start(ctx, "chat "+v.Model, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		p := rt.Provider.GenAI
		span.SetAttributes(tracing.OperationName.String("chat"), tracing.Provider.String(p), tracing.System.String(p),
			tracing.RequestModel.String(v.Model))
	}
	return ctx, span
}

// propagate makes the upstream request carry the call span's context instead of
// the agent's: the upstream's spans nest under camproxy's. A no-op span leaves the
// agent's traceparent as it is.
func propagate(ctx context.Context, s *Server, fc *fasthttp.RequestCtx) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		s.tr.Propagator.Inject(ctx, requestCarrier(&fc.Request.Header))
	}
}

// endSpan closes the call's span with what the call came to.
func endSpan(span trace.Span, c *call, status int, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(tracing.StatusCode.Int(status), tracing.InputTokens.Int64(c.usage.InputTokens),
		tracing.OutputTokens.Int64(c.usage.OutputTokens), tracing.Episode.String(c.ep.ID), tracing.Arm.String(c.ep.Arm),
		tracing.ContextSource.String(c.source), tracing.AugmentMs.Float64(float64(c.augment.Microseconds())/1000),
		tracing.Turn.Int(c.index+1))
	switch {
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(tracing.ErrorType.String(errorType(err, status)))
	case status >= 400:
		span.SetStatus(codes.Error, http.StatusText(status))
		span.SetAttributes(tracing.ErrorType.String(strconv.Itoa(status)))
	}
	span.End()
}

func errorType(err error, status int) string {
	if e, ok := err.(*Error); ok && e.Type != "" {
		return e.Type
	}
	if status == 499 {
		return "client_gone"
	}
	return "upstream_stream"
}

// augmentSpan is the child span of a context lookup (cache, then the augmenter).
func (s *Server) augmentSpan(parent context.Context, name string) trace.Span {
	if !s.tr.Enabled { // no span options built for a no-op span
		return trace.SpanFromContext(context.Background())
	}
	_, span := s.tr.Tracer.Start(parent, "augment "+name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String("camproxy.augmenter", name)))
	return span
}
