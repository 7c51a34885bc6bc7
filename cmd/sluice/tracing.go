package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"time"

	"github.com/redis/rueidis"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/tracing"
)

// gatewayTracing is the gateway's OpenTelemetry tracing, configured by the
// OTEL_* environment (tracing.FromEnv). Without an exporter configured,
// its zero value, each method returns what it is given.
type gatewayTracing struct{ tp *sdktrace.TracerProvider }

// startGatewayTracing reads the OTEL_* environment and returns the
// gateway's tracing and what flushes and stops it.
func startGatewayTracing(ctx context.Context, logger *slog.Logger) (gatewayTracing, func(), error) {
	tp, err := tracing.FromEnv(ctx, "sluice-gateway")
	if err != nil || tp == nil {
		return gatewayTracing{}, func() {}, err
	}
	logger.LogAttrs(ctx, slog.LevelInfo, "tracing: exporting spans over OTLP, as the OTEL_* environment says")
	return gatewayTracing{tp}, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			logger.LogAttrs(ctx, slog.LevelWarn, "tracing: spans not flushed at exit", slog.Any("err", err))
		}
	}, nil
}

// store returns s with a span for each decision.
func (g gatewayTracing) store(s limit.Store) limit.Store {
	if g.tp == nil {
		return s
	}
	return tracing.Store(s, g.tp)
}

// redis returns c with a span for each Redis command, under the decision
// span of the take that sent it.
func (g gatewayTracing) redis(c rueidis.Client) rueidis.Client {
	if g.tp == nil {
		return c
	}
	return tracing.Redis(c, g.tp)
}

// limited returns h, the limiter in front of next, with a server span for
// each request that continues the client's trace, and next's upstream
// calls passing the trace on in traceparent.
func (g gatewayTracing) limited(h func(next http.Handler) http.Handler, next http.Handler) http.Handler {
	if g.tp == nil {
		return h(next)
	}
	if p, ok := next.(*httputil.ReverseProxy); ok {
		p.Transport = tracing.Transport(p.Transport, g.tp, nil)
	}
	return tracing.Handler(h(next), g.tp, nil)
}
