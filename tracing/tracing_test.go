package tracing_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/tracing"
)

// newProvider returns a provider that hands each ended span to an
// in-process exporter at once.
func newProvider(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, exp
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// byName returns the exported spans called name.
func byName(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// A request that carries the client's traceparent through a gateway: its
// server span continues the client's trace, the decision and the upstream
// call are its children, and the upstream receives a traceparent of the
// same trace whose parent is the upstream span. A refused request has a
// decision span saying which limit refused, and no upstream span.
func TestDecisionAndUpstreamJoinTheClientTrace(t *testing.T) {
	tp, exp := newProvider(t)
	var mu sync.Mutex
	var got []string // traceparent headers the upstream received
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("traceparent"))
		mu.Unlock()
	}))
	defer upstream.Close()

	set, err := rules.Parse("t.yaml", []byte("rules:\n  - scope: default\n    limits: [{name: per_minute, rate: 1, per: 1m}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := gateway.New(gateway.Config{Rules: gateway.StaticRules(set), Store: tracing.Store(memstore.New(memstore.Config{}), tp)})
	if err != nil {
		t.Fatal(err)
	}
	proxy := gateway.NewProxy(mustURL(t, upstream.URL), nil)
	proxy.Transport = tracing.Transport(proxy.Transport, tp, nil)
	srv := httptest.NewServer(tracing.Handler(lim.Middleware(proxy), tp, nil))
	defer srv.Close()

	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for i, want := range []int{200, 429} {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/things?secret=1", nil)
		req.Header.Set("X-API-Key", "key_1")
		req.Header.Set("traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("request %d: got %d, want %d", i, resp.StatusCode, want)
		}
	}

	reqs, decisions, ups := byName(exp, tracing.RequestSpan), byName(exp, tracing.DecisionSpan), byName(exp, tracing.UpstreamSpan)
	if len(reqs) != 2 || len(decisions) != 2 || len(ups) != 1 {
		t.Fatalf("got %d request, %d decision and %d upstream spans, want 2, 2 and 1", len(reqs), len(decisions), len(ups))
	}
	for i, r := range reqs {
		if r.SpanContext.TraceID().String() != clientTrace || r.Parent.SpanID().String() != clientSpan || !r.Parent.IsRemote() {
			t.Errorf("request span %d: got trace %s parent %s, want the client's %s and %s", i, r.SpanContext.TraceID(), r.Parent.SpanID(), clientTrace, clientSpan)
		}
		if d := decisions[i]; d.Parent.SpanID() != r.SpanContext.SpanID() || d.SpanContext.TraceID() != r.SpanContext.TraceID() {
			t.Errorf("decision span %d: got parent %s, want the request span %s", i, d.Parent.SpanID(), r.SpanContext.SpanID())
		}
		if a := attrs(r); a["url.path"].AsString() != "/v1/things" {
			t.Errorf("request span %d: url.path %q, want the path without its query", i, a["url.path"].AsString())
		}
	}
	if a := attrs(reqs[1]); a["http.response.status_code"].AsInt64() != 429 {
		t.Errorf("refused request span: status %v, want 429", a["http.response.status_code"])
	}
	allowed, refused := attrs(decisions[0]), attrs(decisions[1])
	if !allowed["sluice.allowed"].AsBool() || allowed["sluice.source"].AsString() != string(limit.FromMemory) ||
		allowed["sluice.limits"].AsInt64() != 1 || allowed["sluice.cost"].AsInt64() != 1 {
		t.Errorf("allowed decision: got %v", decisions[0].Attributes)
	}
	if refused["sluice.allowed"].AsBool() || refused["sluice.limit"].AsString() != "per_minute" || refused["sluice.retry_after_ms"].AsInt64() <= 0 {
		t.Errorf("refused decision: got %v, want the limit that refused and a retry time", decisions[1].Attributes)
	}
	up := ups[0]
	if up.Parent.SpanID() != reqs[0].SpanContext.SpanID() || up.SpanKind != trace.SpanKindClient {
		t.Errorf("upstream span: got parent %s kind %v, want the first request span %s, client", up.Parent.SpanID(), up.SpanKind, reqs[0].SpanContext.SpanID())
	}
	want := "00-" + clientTrace + "-" + up.SpanContext.SpanID().String() + "-01"
	if len(got) != 1 || got[0] != want {
		t.Errorf("upstream got traceparent %q, want %q: the client's trace, the upstream span as parent", got, want)
	}
	for _, s := range exp.GetSpans() {
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.Emit(), "key_1") {
				t.Errorf("span %s attribute %s holds the API key", s.Name, kv.Key)
			}
		}
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// failing is a store whose every call fails: a fault to inject.
type failing struct{}

func (failing) Take(context.Context, *limit.Request) (limit.Decision, error) {
	return limit.Decision{}, errors.New("redis: connection refused")
}

func TestStoreSpans(t *testing.T) {
	lim := []limit.Limit{{Name: "s", Count: 2, Period: time.Second}}
	tests := []struct {
		name       string
		store      limit.Store
		grant      bool
		wantSpan   string
		wantStatus codes.Code
		wantAttr   map[string]string
	}{
		{"allowed", memstore.New(memstore.Config{}), false, tracing.DecisionSpan, codes.Unset,
			map[string]string{"sluice.allowed": "true", "sluice.source": "memory"}},
		{"store error", failing{}, false, tracing.DecisionSpan, codes.Error, map[string]string{}},
		{"grant", memstore.New(memstore.Config{}), true, tracing.GrantSpan, codes.Unset,
			map[string]string{"sluice.want": "2", "sluice.granted": "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, exp := newProvider(t)
			s := tracing.Store(tt.store, tp)
			req := &limit.Request{Key: "k:a", Limits: lim}
			if tt.grant {
				g, ok := s.(limit.Granter)
				if !ok {
					t.Fatalf("Store over a Granter: got %T, want a limit.Granter", s)
				}
				if _, _, err := g.TakeUpTo(context.Background(), req, 2); err != nil {
					t.Fatal(err)
				}
			} else {
				_, _ = s.Take(context.Background(), req)
			}
			spans := exp.GetSpans()
			if len(spans) != 1 || spans[0].Name != tt.wantSpan || spans[0].Status.Code != tt.wantStatus {
				t.Fatalf("got spans %+v, want one %s with status %v", spans, tt.wantSpan, tt.wantStatus)
			}
			a := attrs(spans[0])
			for k, v := range tt.wantAttr {
				if got := a[attribute.Key(k)].Emit(); got != v {
					t.Errorf("attribute %s: got %q, want %q", k, got, v)
				}
			}
		})
	}
	if _, ok := tracing.Store(failing{}, nil).(limit.Granter); ok {
		t.Error("Store over a plain Store: got a Granter, which it cannot be")
	}
}

// Without a provider the wrappers pass everything through untouched.
func TestNoProviderPassesThrough(t *testing.T) {
	var seen string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = r.Header.Get("traceparent") })
	srv := httptest.NewServer(tracing.Handler(h, nil, nil))
	defer srv.Close()
	client := &http.Client{Transport: tracing.Transport(nil, nil, nil)}
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if seen != req.Header.Get("traceparent") {
		t.Errorf("traceparent: got %q, want the client's, unchanged", seen)
	}
	if _, err := tracing.Store(memstore.New(memstore.Config{}), nil).Take(context.Background(),
		&limit.Request{Key: "k:a", Limits: []limit.Limit{{Name: "s", Count: 1, Period: time.Second}}}); err != nil {
		t.Fatal(err)
	}
}
