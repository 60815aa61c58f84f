// Package tracing owns camproxy's OpenTelemetry traces: an OTLP/HTTP exporter
// (off unless configured), the W3C trace-context propagator, and the attribute
// names — GenAI semantic conventions plus camproxy's own — that the data plane puts
// on its spans.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// GenAI semantic-convention attributes
// (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/).
const (
	OperationName = attribute.Key("gen_ai.operation.name")
	Provider      = attribute.Key("gen_ai.provider.name")
	System        = attribute.Key("gen_ai.system") // the older name of gen_ai.provider.name; both are set
	RequestModel  = attribute.Key("gen_ai.request.model")
	ResponseModel = attribute.Key("gen_ai.response.model")
	InputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	OutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
	ErrorType     = attribute.Key("error.type")
	StatusCode    = attribute.Key("http.response.status_code")
)

// camproxy's own attributes.
const (
	Episode       = attribute.Key("camproxy.episode.id")
	Turn          = attribute.Key("camproxy.turn")
	Arm           = attribute.Key("camproxy.arm")
	ContextSource = attribute.Key("camproxy.context.source")
	AugmentMs     = attribute.Key("camproxy.augment.ms")
	Augmenter     = attribute.Key("camproxy.augmenter")
)

// Options configures the exporter (config.Tracing).
type Options struct {
	Endpoint    string            // OTLP/HTTP base URL, e.g. http://otel-collector:4318; "" = tracing off
	Headers     map[string]string // sent with every export (an API key of a hosted backend)
	ServiceName string
	SampleRatio float64 // of root spans; a sampled parent is always followed
	Version     string  // service.version
}

// Tracing is the tracer provider the data plane uses. The zero of a disabled one
// costs a no-op tracer.
type Tracing struct {
	Enabled    bool // false: spans are no-ops and callers may skip propagation
	Tracer     trace.Tracer
	Propagator propagation.TextMapPropagator
	shutdown   func(context.Context) error
}

// Disabled is tracing off: spans are no-ops, nothing is propagated.
func Disabled() *Tracing {
	return &Tracing{Tracer: noop.NewTracerProvider().Tracer("camproxy"), Propagator: propagation.TraceContext{},
		shutdown: func(context.Context) error { return nil }}
}

// New starts an OTLP/HTTP exporter with a batch processor, or returns Disabled
// when o.Endpoint is empty.
func New(o Options) (*Tracing, error) {
	if o.Endpoint == "" {
		return Disabled(), nil
	}
	u, err := url.Parse(o.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("tracing: endpoint %q: want http(s)://host:port", o.Endpoint)
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(o.Endpoint + "/v1/traces"), otlptracehttp.WithHeaders(o.Headers)}
	if u.Path != "" && u.Path != "/" {
		opts[0] = otlptracehttp.WithEndpointURL(o.Endpoint) // a full path was given: use it as is
	}
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", o.ServiceName), attribute.String("service.version", o.Version)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SampleRatio))),
	)
	return &Tracing{Enabled: true, Tracer: tp.Tracer("github.com/camproxy/camproxy"), Propagator: propagation.TraceContext{}, shutdown: tp.Shutdown}, nil
}

// Shutdown flushes the spans not yet exported.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if err := t.shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing: flush: %w", err)
	}
	return nil
}

// HeaderCarrier adapts a header getter/setter (fasthttp's, net/http's) to the
// propagator.
type HeaderCarrier struct {
	GetFn func(key string) string
	SetFn func(key, value string)
}

func (c HeaderCarrier) Get(key string) string {
	if c.GetFn == nil {
		return ""
	}
	return c.GetFn(key)
}

func (c HeaderCarrier) Set(key, value string) {
	if c.SetFn != nil {
		c.SetFn(key, value)
	}
}

func (c HeaderCarrier) Keys() []string { return nil } // only needed by baggage-style propagators
