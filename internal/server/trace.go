// Traces: OpenTelemetry spans for the decisions and their store calls,
// exported over OTLP/HTTP. Only this file knows OpenTelemetry: the engine
// emits through its small Tracer hook.

package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice/internal/engine"
)

// TracingOptions configure the traces.
type TracingOptions struct {
	// Endpoint is the OTLP/HTTP collector's URL, such as
	// http://127.0.0.1:4318; spans are posted to its /v1/traces, or to
	// the URL's own path if it has one. Required.
	Endpoint string
	// SampleRatio is the share of requests traced that arrive without a
	// trace (0 to 1); a request whose caller sampled its trace (a W3C
	// traceparent header or gRPC metadata) is traced as the caller says.
	// Default 0.01.
	SampleRatio float64
	// ServiceName is the service.name of the spans. Default "sluice".
	ServiceName string
}

// tracing is the server's tracer provider and what the faces use of it.
type tracing struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	// hook is the engine's Tracer.
	hook engine.Tracer
	prop propagation.TextMapPropagator
}

// newTracing starts a tracer provider that exports to o.Endpoint.
func newTracing(o TracingOptions, backend string) (*tracing, error) {
	u, err := url.Parse(o.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server: tracing endpoint %q: want an http:// or https:// URL", o.Endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, fmt.Errorf("server: tracing: %w", err)
	}
	ratio := o.SampleRatio
	if ratio == 0 {
		ratio = 0.01
	}
	name := o.ServiceName
	if name == "" {
		name = "sluice"
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", name))),
	)
	t := tp.Tracer("github.com/sluicehq/sluice")
	return &tracing{tp: tp, tracer: t, hook: otelTracer{t, backend}, prop: propagation.TraceContext{}}, nil
}

// shutdown exports the spans still buffered, waiting at most 5 s.
func (t *tracing) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return t.tp.Shutdown(ctx)
}

// handler traces each request h serves as a span named sluice.request,
// continuing the caller's trace (W3C traceparent) and passing the
// request's own to the upstream.
func (t *tracing) handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.tracer.Start(ctx, "sluice.request", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method)))
		defer span.End()
		if span.SpanContext().IsValid() {
			t.prop.Inject(ctx, propagation.HeaderCarrier(r.Header))
		}
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// unary continues, in the rate-limit service's calls, the trace of the
// caller's gRPC metadata (traceparent).
func (t *tracing) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = t.prop.Extract(ctx, metadataCarrier(md))
	}
	return h(ctx, req)
}

// metadataCarrier reads gRPC metadata as a propagation.TextMapCarrier.
type metadataCarrier metadata.MD

func (m metadataCarrier) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (m metadataCarrier) Set(key, value string) { metadata.MD(m).Set(key, value) }
func (m metadataCarrier) Keys() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// otelTracer is the engine's Tracer over OpenTelemetry; store spans get
// the attribute sluice.store, the backend.
type otelTracer struct {
	t       trace.Tracer
	backend string
}

func (o otelTracer) Start(ctx context.Context, name string) (context.Context, engine.Span) {
	ctx, s := o.t.Start(ctx, name)
	if strings.HasPrefix(name, engine.SpanStore) {
		s.SetAttributes(attribute.String("sluice.store", o.backend))
	}
	return ctx, otelSpan{s}
}

type otelSpan struct{ s trace.Span }

func (s otelSpan) SetStrings(key string, values ...string) {
	if len(values) == 1 {
		s.s.SetAttributes(attribute.String(key, values[0]))
		return
	}
	s.s.SetAttributes(attribute.StringSlice(key, values))
}

func (s otelSpan) End(err error) {
	if err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}
