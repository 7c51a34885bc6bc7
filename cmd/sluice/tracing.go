package main

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/tracing"
)

// startGatewayTracing reads the OTEL_* environment and returns the
// gateway's tracer provider and what flushes and stops it. Without an
// exporter configured the provider is nil, and package tracing's wrappers
// return what they are given.
func startGatewayTracing(ctx context.Context, logger *slog.Logger) (trace.TracerProvider, func(), error) {
	tp, err := tracing.FromEnv(ctx, "sluice-gateway")
	if err != nil || tp == nil {
		// Not tp itself: a nil *TracerProvider is a non-nil interface.
		return nil, func() {}, err
	}
	logger.LogAttrs(ctx, slog.LevelInfo, "tracing: exporting spans over OTLP, as the OTEL_* environment says")
	return tp, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			logger.LogAttrs(ctx, slog.LevelWarn, "tracing: spans not flushed at exit", slog.Any("err", err))
		}
	}, nil
}
