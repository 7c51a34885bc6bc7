package tracing_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/tracing"
)

// BenchmarkStore is a decision on memstore, directly and through Store
// with a provider that samples nothing and with one that records every
// span. Compare each with direct from the same run.
func BenchmarkStore(b *testing.B) {
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	always := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(tracetest.NewNoopExporter())))
	defer never.Shutdown(context.Background())
	defer always.Shutdown(context.Background())
	for _, bc := range []struct {
		name string
		tp   trace.TracerProvider // nil: the bare store
		wrap bool
	}{
		{"direct", nil, false},
		{"sampled never", never, true},
		{"sampled always", always, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var s limit.Store = memstore.New(memstore.Config{})
			if bc.wrap {
				s = tracing.Store(s, bc.tp)
			}
			lim := []limit.Limit{{Name: "s", Count: 1 << 40, Period: time.Second}}
			reqs := make([]limit.Request, 1024)
			for i := range reqs {
				reqs[i] = limit.Request{Key: "k:" + strconv.Itoa(i), Limits: lim}
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				if _, err := s.Take(ctx, &reqs[i&1023]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
