package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// FromEnv returns a TracerProvider configured the standard way, by the
// OTEL_* environment variables, or nil when they ask for no traces: which
// is the default, so that a gateway sends nothing anywhere unless told to.
//
//   - OTEL_TRACES_EXPORTER: otlp, or none. Unset means otlp when an OTLP
//     endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), else none.
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL:
//     http/protobuf (the default) or grpc.
//   - OTEL_SDK_DISABLED=true: none.
//
// The exporter reads its endpoint, headers, TLS and timeout variables
// itself, the SDK its sampler (OTEL_TRACES_SAMPLER, _ARG) and batching
// (OTEL_BSP_*), and the resource OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES; service names the service when
// OTEL_SERVICE_NAME does not. An unknown value is an error naming the
// variable. The caller owns the provider: its Shutdown flushes and stops
// the export.
func FromEnv(ctx context.Context, service string) (*sdktrace.TracerProvider, error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	exporter := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	if exporter == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	switch exporter {
	case "", "otlp":
	case "none":
		return nil, nil
	default:
		return nil, fmt.Errorf("tracing: $OTEL_TRACES_EXPORTER=%q: want otlp or none", exporter)
	}
	protoVar := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	proto := os.Getenv(protoVar)
	if proto == "" {
		protoVar = "OTEL_EXPORTER_OTLP_PROTOCOL"
		proto = os.Getenv(protoVar)
	}
	var exp sdktrace.SpanExporter
	var err error
	switch proto {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("tracing: $%s=%q: want http/protobuf or grpc", protoVar, proto)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: resource from $OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
