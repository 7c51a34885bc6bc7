package tracing_test

import (
	"context"
	"fmt"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/tracing"
)

// A store wrapped by Store records a span for each decision. In a program,
// tracing.FromEnv gives the provider from the OTEL_* variables.
func ExampleStore() {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	store := tracing.Store(memstore.New(memstore.Config{}), tp)
	req := &limit.Request{Key: "k:key_8f3", Limits: []limit.Limit{{Name: "s", Count: 1, Period: time.Minute}}}
	for range 2 {
		store.Take(context.Background(), req)
	}
	for _, s := range exp.GetSpans() {
		fmt.Print(s.Name)
		for _, kv := range s.Attributes {
			fmt.Printf(" %s=%s", kv.Key, kv.Value.Emit())
		}
		fmt.Println()
	}
	// Output:
	// sluice.decision sluice.limits=1 sluice.cost=1 sluice.allowed=true sluice.source=memory
	// sluice.decision sluice.limits=1 sluice.cost=1 sluice.allowed=false sluice.source=memory sluice.limit=s sluice.retry_after_ms=60000
}
