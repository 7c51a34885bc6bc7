package tracing_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/tracing"
)

// collector is an in-process OTLP receiver: it keeps the service name and
// span names of what it is sent.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []string // "service/span"
}

func (c *collector) keep(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, service+"/"+s.GetName())
			}
		}
	}
}

func (c *collector) got() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.spans, " ")
}

// Export implements the OTLP gRPC trace service.
func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.keep(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// serveHTTP runs c as an OTLP/HTTP receiver and returns its URL.
func (c *collector) serveHTTP(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "want an ExportTraceServiceRequest on /v1/traces", http.StatusBadRequest)
			return
		}
		c.keep(&req)
		b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// serveGRPC runs c as an OTLP/gRPC receiver and returns its URL.
func (c *collector) serveGRPC(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return "http://" + ln.Addr().String()
}

// FromEnv sends a decision's span to an in-process collector over each
// protocol the OTEL_* variables choose, under the service name they give.
func TestFromEnvExportsToACollector(t *testing.T) {
	for _, proto := range []string{"", "http/protobuf", "grpc"} {
		t.Run("protocol "+proto, func(t *testing.T) {
			c := &collector{}
			endpoint := c.serveHTTP(t)
			if proto == "grpc" {
				endpoint = c.serveGRPC(t)
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
			if got, want := c.got(), "gw-eu-1/"+tracing.DecisionSpan; got != want {
				t.Errorf("collector got %q, want %q", got, want)
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
