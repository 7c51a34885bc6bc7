// Package otlptest is an in-process OpenTelemetry collector for tests: it
// takes OTLP trace exports over HTTP (http/protobuf) and gRPC and keeps
// the spans, so a test can check what a process exported.
package otlptest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one exported span, as the collector keeps it.
type Span struct {
	// Service is the resource's service.name.
	Service string
	Name    string
	// TraceID, SpanID and ParentSpanID are in hex; ParentSpanID is empty
	// for a root span.
	TraceID, SpanID, ParentSpanID string
	// Attributes are the span's string, integer and boolean attributes.
	Attributes map[string]any
}

// Collector keeps the spans it is sent. Its zero value is ready; it is
// safe for concurrent use.
type Collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []Span
}

// Spans returns a copy of the spans received so far, in order.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

func (c *Collector) keep(req *coltracepb.ExportTraceServiceRequest) {
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
				sp := Span{Service: service, Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()),
					SpanID: hex.EncodeToString(s.GetSpanId()), ParentSpanID: hex.EncodeToString(s.GetParentSpanId()),
					Attributes: map[string]any{}}
				for _, kv := range s.GetAttributes() {
					v := kv.GetValue()
					switch {
					case v.GetStringValue() != "":
						sp.Attributes[kv.GetKey()] = v.GetStringValue()
					case v.GetIntValue() != 0:
						sp.Attributes[kv.GetKey()] = v.GetIntValue()
					default:
						sp.Attributes[kv.GetKey()] = v.GetBoolValue()
					}
				}
				c.spans = append(c.spans, sp)
			}
		}
	}
}

// Export implements the OTLP gRPC trace service.
func (c *Collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.keep(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// ServeHTTP takes an OTLP/HTTP export: a protobuf ExportTraceServiceRequest
// POSTed to /v1/traces.
func (c *Collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err != nil || r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "want a protobuf ExportTraceServiceRequest POSTed to /v1/traces", http.StatusBadRequest)
		return
	}
	c.keep(&req)
	b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

// StartHTTP serves c over OTLP/HTTP on the loopback until the test ends,
// and returns its URL: a value for OTEL_EXPORTER_OTLP_ENDPOINT.
func (c *Collector) StartHTTP(t testing.TB) string {
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return srv.URL
}

// StartGRPC serves c over OTLP/gRPC on the loopback until the test ends,
// and returns its URL: a value for OTEL_EXPORTER_OTLP_ENDPOINT with
// OTEL_EXPORTER_OTLP_PROTOCOL=grpc.
func (c *Collector) StartGRPC(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return "http://" + ln.Addr().String()
}
