// Package tracing adds OpenTelemetry traces to sluice: a span for each
// rate-limit decision around a limit.Store ([Store]), a server span for
// each request that continues the trace the client sent ([Handler]), and
// the trace context passed on to the upstream in the traceparent header
// ([Transport]). [FromEnv] builds the TracerProvider from the standard
// OTEL_* environment variables, or none when they configure no exporter.
//
// Each wrapper takes a trace.TracerProvider; nil means no tracing at all,
// and the wrapper then only passes calls through. Spans never carry an API
// key or a client address: a trace is no place for them.
package tracing

import (
	"cmp"
	"context"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/limit"
)

// ScopeName is the instrumentation scope of sluice's spans.
const ScopeName = "github.com/sluice-rl/sluice/tracing"

// The names of the spans sluice starts.
const (
	// DecisionSpan is one limit.Store Take: a rate-limit decision.
	DecisionSpan = "sluice.decision"
	// GrantSpan is one limit.Granter TakeUpTo: a batch of tokens for a lease.
	GrantSpan = "sluice.grant"
	// RequestSpan is one request through the gateway.
	RequestSpan = "sluice.request"
	// UpstreamSpan is the upstream call of a request, to its response
	// headers.
	UpstreamSpan = "sluice.upstream"
)

// Store returns a limit.Store that records a DecisionSpan for each Take of
// inner, as a child of the span in the call's context (with a nil tp, inner
// itself): the number of limits and the cost, then whether the request was allowed, where the
// answer came from (the Source), and for a refusal the limit that refused
// and the retry time; a store error marks the span failed. When inner is
// a limit.Granter the result is one too, with a GrantSpan for each
// TakeUpTo. The result is safe for concurrent use when inner is.
func Store(inner limit.Store, tp trace.TracerProvider) limit.Store {
	if tp == nil {
		return inner
	}
	s := &store{inner: inner, tracer: tp.Tracer(ScopeName)}
	if g, ok := inner.(limit.Granter); ok {
		return &granter{store: s, inner: g}
	}
	return s
}

type store struct {
	inner  limit.Store
	tracer trace.Tracer
}

// Unwrap returns the traced store, so that a caller can reach what the
// store offers beside limit.Store (a pipeline's quotas and slots).
func (s *store) Unwrap() limit.Store { return s.inner }

var (
	_ limit.Store   = (*store)(nil)
	_ limit.Granter = (*granter)(nil)
)

// start starts a span of a call with req; the attributes are only made
// for a span that records (sampled), to keep unsampled calls cheap.
func (s *store) start(ctx context.Context, name string, req *limit.Request) (context.Context, trace.Span) {
	ctx, span := s.tracer.Start(ctx, name)
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("sluice.limits", len(req.Limits)), attribute.Int64("sluice.cost", req.EffectiveCost()))
	}
	return ctx, span
}

// end records d or err on span and ends it.
func end(span trace.Span, req *limit.Request, d limit.Decision, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return
	}
	span.SetAttributes(attribute.Bool("sluice.allowed", d.Allowed), attribute.String("sluice.source", string(d.Source)))
	if !d.Allowed && d.Index >= 0 && d.Index < len(req.Limits) {
		span.SetAttributes(attribute.String("sluice.limit", req.Limits[d.Index].Name),
			attribute.Int64("sluice.retry_after_ms", d.RetryAfter.Milliseconds()))
	}
}

func (s *store) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	ctx, span := s.start(ctx, DecisionSpan, req)
	d, err := s.inner.Take(ctx, req)
	end(span, req, d, err)
	return d, err
}

type granter struct {
	*store
	inner limit.Granter
}

func (g *granter) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error) {
	ctx, span := g.start(ctx, GrantSpan, req)
	n, d, err := g.inner.TakeUpTo(ctx, req, want)
	if span.IsRecording() {
		span.SetAttributes(attribute.Int64("sluice.want", want))
		if err == nil {
			span.SetAttributes(attribute.Int64("sluice.granted", n))
		}
	}
	end(span, req, d, err)
	return n, d, err
}

// Handler returns h with a RequestSpan around each request: a server span
// that continues the trace the request's headers carry (read with prop;
// nil means W3C trace context, traceparent and tracestate), so that the
// decision and upstream spans below it join the client's trace. It
// records the method, the path without its query, and the status.
func Handler(h http.Handler, tp trace.TracerProvider, prop propagation.TextMapPropagator) http.Handler {
	if tp == nil {
		return h
	}
	t, prop := tp.Tracer(ScopeName), orTraceContext(prop)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.Start(ctx, RequestSpan, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r.WithContext(ctx))
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(status))
		}
	})
}

// statusWriter remembers the status a handler wrote. Unwrap lets
// http.ResponseController reach the writer's Flush and deadlines, which a
// streaming proxy needs.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Transport returns rt (nil means http.DefaultTransport) with an
// UpstreamSpan around each round trip, to the response headers, and the
// span's trace context written into the request's headers with prop (nil
// means W3C trace context): the upstream's own spans then join the trace.
// The request given is not changed; a copy with the headers goes to rt.
func Transport(rt http.RoundTripper, tp trace.TracerProvider, prop propagation.TextMapPropagator) http.RoundTripper {
	rt = cmp.Or(rt, http.DefaultTransport)
	if tp == nil {
		return rt
	}
	return &transport{rt: rt, tracer: tp.Tracer(ScopeName), prop: orTraceContext(prop)}
}

type transport struct {
	rt     http.RoundTripper
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, span := t.tracer.Start(r.Context(), UpstreamSpan, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("http.request.method", r.Method), attribute.String("server.address", r.URL.Host)))
	defer span.End()
	out := r.Clone(ctx)
	t.prop.Inject(ctx, propagation.HeaderCarrier(out.Header))
	resp, err := t.rt.RoundTrip(out)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, strconv.Itoa(resp.StatusCode))
	}
	return resp, nil
}

func orTraceContext(p propagation.TextMapPropagator) propagation.TextMapPropagator {
	if p == nil {
		return propagation.TraceContext{}
	}
	return p
}
