package main

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/otlptest"
	"github.com/sluice-rl/sluice/tracing"
)

// A gateway told by OTEL_* where to send traces exports one trace per
// request: its request span continues the client's, the decision and the
// upstream call are its children, and the upstream gets a traceparent of
// the same trace whose parent is the upstream span. Without OTEL_* the
// client's traceparent reaches the upstream unchanged.
func TestGatewayTraces(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("traceparent"))
		mu.Unlock()
	}))
	defer upstream.Close()
	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	traceparent := "00-" + clientTrace + "-" + clientSpan + "-01"
	send := func(url string) {
		resp, _ := get(t, "GET", url+"/v1/things", "X-API-Key", "demo", "traceparent", traceparent)
		if resp.StatusCode != 200 {
			t.Fatalf("got %d, want 200", resp.StatusCode)
		}
	}
	lastSeen := func() string {
		mu.Lock()
		defer mu.Unlock()
		return seen[len(seen)-1]
	}

	plain := sluice.Start(t, "gateway", "--listen", "127.0.0.1:0", "--upstream", upstream.URL)
	send(plain.URL)
	if got := lastSeen(); got != traceparent {
		t.Errorf("without OTEL_*: upstream got traceparent %q, want the client's %q", got, traceparent)
	}

	c := &otlptest.Collector{}
	gw := sluice.StartEnv(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + c.StartHTTP(t), "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SERVICE_NAME="},
		"gateway", "--listen", "127.0.0.1:0", "--upstream", upstream.URL)
	send(gw.URL)
	byName := map[string]otlptest.Span{}
	deadline := time.Now().Add(30 * time.Second)
	for len(byName) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("collector got %+v, want a request, a decision and an upstream span", c.Spans())
		}
		time.Sleep(20 * time.Millisecond)
		for _, s := range c.Spans() {
			byName[s.Name] = s
		}
	}
	req, dec, up := byName[tracing.RequestSpan], byName[tracing.DecisionSpan], byName[tracing.UpstreamSpan]
	if req.TraceID != clientTrace || req.ParentSpanID != clientSpan || req.Service != "sluice-gateway" {
		t.Errorf("request span %+v: want trace %s, parent %s, service sluice-gateway", req, clientTrace, clientSpan)
	}
	for _, s := range []otlptest.Span{dec, up} {
		if s.TraceID != clientTrace || s.ParentSpanID != req.SpanID {
			t.Errorf("%s span %+v: want trace %s under the request span %s", s.Name, s, clientTrace, req.SpanID)
		}
	}
	if dec.Attributes["sluice.allowed"] != true || dec.Attributes["sluice.source"] != "memory" {
		t.Errorf("decision span attributes %v: want allowed, from memory", dec.Attributes)
	}
	if got, want := lastSeen(), "00-"+clientTrace+"-"+up.SpanID+"-01"; got != want {
		t.Errorf("upstream got traceparent %q, want %q", got, want)
	}
}
