package otlptest_test

import (
	"bytes"
	"net/http"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/internal/otlptest"
)

func TestCollectorKeepsWhatItIsSent(t *testing.T) {
	c := &otlptest.Collector{}
	url := c.StartHTTP(t)
	str := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	body, _ := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "svc")}},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{Name: "op", TraceId: bytes.Repeat([]byte{1}, 16),
			SpanId: bytes.Repeat([]byte{2}, 8), Attributes: []*commonpb.KeyValue{str("a", "b")}}}}},
	}}})
	for _, tt := range []struct {
		path string
		body []byte
		want int
	}{
		{"/v1/traces", body, 200},
		{"/v1/traces", []byte("not protobuf"), 400},
		{"/v1/metrics", body, 400},
	} {
		resp, err := http.Post(url+tt.path, "application/x-protobuf", bytes.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("POST %s: got %d, want %d", tt.path, resp.StatusCode, tt.want)
		}
	}
	got := c.Spans()
	if len(got) != 1 || got[0].Service != "svc" || got[0].Name != "op" || got[0].TraceID != "01010101010101010101010101010101" ||
		got[0].ParentSpanID != "" || got[0].Attributes["a"] != "b" {
		t.Errorf("got %+v, want the one span sent", got)
	}
}
