package tracing_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/otlptest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/tracing"
)

// FromEnv sends a decision's span to an in-process collector over each
// protocol the OTEL_* variables choose, under the service name they give.
func TestFromEnvExportsToACollector(t *testing.T) {
	for _, proto := range []string{"", "http/protobuf", "grpc"} {
		t.Run("protocol "+proto, func(t *testing.T) {
			c := &otlptest.Collector{}
			endpoint := c.StartHTTP(t)
			if proto == "grpc" {
				endpoint = c.StartGRPC(t)
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", proto)
			t.Setenv("OTEL_SERVICE_NAME", "gw-eu-1")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tp, err := tracing.FromEnv(ctx, "sluice-gateway")
			if err != nil || tp == nil {
				t.Fatalf("FromEnv: got %v, %v; want a provider", tp, err)
			}
			s := tracing.Store(memstore.New(memstore.Config{}), tp)
			if _, err := s.Take(ctx, &limit.Request{Key: "k:a", Limits: []limit.Limit{{Name: "s", Count: 1, Period: time.Second}}}); err != nil {
				t.Fatal(err)
			}
			if err := tp.Shutdown(ctx); err != nil { // flushes the batch
				t.Fatal(err)
			}
			if got := c.Spans(); len(got) != 1 || got[0].Service != "gw-eu-1" || got[0].Name != tracing.DecisionSpan {
				t.Errorf("collector got %+v, want one %s of service gw-eu-1", got, tracing.DecisionSpan)
			}
		})
	}
}

func TestFromEnvChoices(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    bool   // a provider
		wantErr string // in the error
	}{
		{"nothing set: no traces", nil, false, ""},
		{"endpoint set", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"}, true, ""},
		{"exporter otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"exporter none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, false, ""},
		{"SDK disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, ""},
		{"unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, `$OTEL_TRACES_EXPORTER="zipkin": want otlp or none`},
		{"unknown protocol", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, false,
			`$OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/json": want http/protobuf or grpc`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
				t.Setenv(k, tt.env[k])
			}
			tp, err := tracing.FromEnv(context.Background(), "sluice")
			if tp != nil {
				defer tp.Shutdown(context.Background())
			}
			switch {
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("got error %v, want one holding %q", err, tt.wantErr)
			case tt.wantErr == "" && err != nil:
				t.Errorf("got error %v", err)
			case (tp != nil) != tt.want:
				t.Errorf("got provider %v, want one: %v", tp, tt.want)
			}
		})
	}
}
