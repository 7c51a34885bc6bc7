package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/quota"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/tracing"
)

// TestQuotaHeaders sends a key with a daily quota of 3 through a gateway
// whose pipeline (on real Redis) is wrapped in tracing, as the sluice
// binary wraps it when tracing is on: the quota headers count down, the
// fourth request is refused naming the quota, and the shared counter holds
// the three admitted once flushed.
func TestQuotaHeaders(t *testing.T) {
	srv := redistest.Standalone(t)
	p, err := pipeline.New(t.Context(), pipeline.Config{Redis: redisstore.Config{Addrs: []string{srv.Addr()}},
		Fleet: limit.Fleet{Gateways: 1}, Quota: quota.Config{Interval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	set, err := rules.Parse("q.yaml", []byte(`
keys:
  key_q: {plan: pro}
rules:
  - scope: plan
    match: {plan: pro}
    limits: [{name: s, rate: 100, per: 1s}]
    quotas: [{name: daily, count: 3, per: day}]
`))
	if err != nil {
		t.Fatal(err)
	}
	l, err := gateway.New(gateway.Config{Store: tracing.Store(p, noop.NewTracerProvider()), Rules: gateway.StaticRules(set)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(l.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	t.Cleanup(hs.Close)
	for i, want := range []struct {
		code      int
		remaining string
	}{{200, "2"}, {200, "1"}, {200, "0"}, {429, "0"}} {
		req, _ := http.NewRequest("GET", hs.URL+"/x", nil)
		req.Header.Set("X-API-Key", "key_q")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var prob gateway.Problem
		json.NewDecoder(resp.Body).Decode(&prob)
		resp.Body.Close()
		if resp.StatusCode != want.code || resp.Header.Get("X-Quota-Remaining") != want.remaining || resp.Header.Get("X-Quota-Limit") != "3" {
			t.Errorf("request %d: got %d, X-Quota-Remaining %q, X-Quota-Limit %q; want %d, %q, 3",
				i, resp.StatusCode, resp.Header.Get("X-Quota-Remaining"), resp.Header.Get("X-Quota-Limit"), want.code, want.remaining)
		}
		if want.code == 429 && (prob.Limit != "daily" || resp.Header.Get("Retry-After") == "") {
			t.Errorf("refusal: %+v, Retry-After %q; want the daily quota named and a Retry-After", prob, resp.Header.Get("Retry-After"))
		}
	}
	if err := p.Quotas().Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	q := quota.Quota{Name: "daily", Count: 3, Period: quota.Day}
	id, _, _ := q.Window(time.Now())
	got, err := p.Redis().ReadCounts(t.Context(), "k:key_q", []string{q.CounterName(id)})
	if err != nil || got[0] != 3 {
		t.Errorf("shared counter: %v, %v; want 3", got, err)
	}
}
