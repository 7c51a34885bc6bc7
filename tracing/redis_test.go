package tracing_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/internal/otlptest"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/tracing"
)

// TestRedisSpanUnderTheDecision takes through a real Redis with both
// wrappers, exports over OTLP to an in-process collector, and finds the
// take's FCALL as a child of its decision span, in the same trace, naming
// the command and never the key.
func TestRedisSpanUnderTheDecision(t *testing.T) {
	srv := redistest.Standalone(t)
	c := &otlptest.Collector{}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.StartHTTP(t))
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tp, err := tracing.FromEnv(ctx, "sluice-gateway")
	if err != nil || tp == nil {
		t.Fatalf("FromEnv: got %v, %v; want a provider", tp, err)
	}
	rs, err := redisstore.New(ctx, redisstore.Config{Addrs: []string{srv.Addr()},
		Wrap: func(c rueidis.Client) rueidis.Client { return tracing.Redis(c, tp) }})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	s := tracing.Store(rs, tp)
	const key = "k:secret_api_key"
	if d, err := s.Take(ctx, &limit.Request{Key: key, Limits: []limit.Limit{{Name: "s", Count: 5, Period: time.Second}}}); err != nil || !d.Allowed {
		t.Fatalf("take: got %+v, %v; want allowed", d, err)
	}
	if err := tp.Shutdown(ctx); err != nil { // flushes the batch
		t.Fatal(err)
	}
	var decision *otlptest.Span
	spans := c.Spans()
	for i := range spans {
		if spans[i].Name == tracing.DecisionSpan {
			decision = &spans[i]
		}
	}
	if decision == nil {
		t.Fatalf("collector got %+v, want a %s", spans, tracing.DecisionSpan)
	}
	var takes int
	for _, sp := range spans {
		if sp.Name != tracing.RedisSpan || sp.ParentSpanID != decision.SpanID {
			continue
		}
		takes++
		if sp.TraceID != decision.TraceID {
			t.Errorf("redis span in trace %s, its decision in %s", sp.TraceID, decision.TraceID)
		}
		if op := sp.Attributes["db.operation.name"]; op != "FCALL" && op != "EVALSHA" {
			t.Errorf("redis span's operation %v, want the take's FCALL or EVALSHA", op)
		}
		for k, v := range sp.Attributes {
			if s, ok := v.(string); ok && s == key {
				t.Errorf("redis span attribute %s holds the API key", k)
			}
		}
	}
	if takes != 1 {
		t.Errorf("got %d redis spans under the decision, want 1 (all spans: %+v)", takes, spans)
	}
}

// TestRedisWithoutProviderIsTheClient: no provider, no wrapper.
func TestRedisWithoutProviderIsTheClient(t *testing.T) {
	var c rueidis.Client
	if got := tracing.Redis(c, nil); got != c {
		t.Errorf("Redis(c, nil) = %v, want c itself", got)
	}
}
