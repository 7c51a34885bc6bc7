package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/rules"
)

// explainRules are a plan, an endpoint of cost 2, a default limit, the
// plan's limit, and an emergency override of key_pro expiring at %s.
const explainRules = `
keys:
  key_pro: {plan: pro, org: acme}
endpoints:
  - {name: search, method: GET, path: /v1/search, cost: 2}
rules:
  - scope: default
    limits: [{name: second, rate: 100, per: 1s}]
  - scope: plan
    match: {plan: pro}
    limits: [{name: pro-minute, rate: 6000, per: 1m}]
  - scope: key
    match: {key: key_pro}
    expires_at: %s
    reason: incident 23
    limits: [{name: second, rate: 80, per: 1s}]
`

// TestExplainRunningGateway asks a running gateway, over real Redis, why
// key_pro is limited after five requests: the override with its reason
// and expiry displaces the default, the region's quarter share makes the
// plan's limit the tightest, and the override's bucket shows the ten
// tokens spent, read without taking.
func TestExplainRunningGateway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newRedisStore(t, []string{redistest.Standalone(t).Addr()}, nil)
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	set, err := rules.Parse("explain.yaml", fmt.Appendf(nil, explainRules, expires.Format(time.RFC3339)))
	if err != nil {
		t.Fatal(err)
	}
	src := gateway.StaticRules(set)
	lim, err := gateway.New(gateway.Config{Rules: src, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(lim.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	t.Cleanup(api.Close)
	explain, err := gateway.Explain(gateway.ExplainConfig{Rules: src, Store: store, Source: "explain.yaml",
		Share: func(key, name string) (limit.Fraction, bool) {
			return limit.Fraction{Num: 1, Den: 4}, name == "pro-minute"
		}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(gateway.ExplainPath, explain)
	metrics := httptest.NewServer(mux)
	t.Cleanup(metrics.Close)

	for range 5 {
		if resp, body := doURL(t, "GET", api.URL+"/v1/search", "X-API-Key", "key_pro"); resp.StatusCode != 200 {
			t.Fatalf("request: got %d %s", resp.StatusCode, body)
		}
	}
	e, err := (&admin.Client{BaseURL: metrics.URL}).Explain(ctx, "key_pro", "GET", "/v1/search")
	if err != nil {
		t.Fatal(err)
	}
	if e.Plan != "pro" || e.Org != "acme" || e.Cost != 2 || e.Endpoint != "search" {
		t.Errorf("got plan %q org %q cost %d endpoint %q, want pro acme 2 search", e.Plan, e.Org, e.Cost, e.Endpoint)
	}
	tests := []struct {
		name     string
		scope    rules.Scope
		inForce  bool
		override bool
	}{
		{"second", rules.ScopeDefault, false, false},
		{"pro-minute", rules.ScopePlan, true, false},
		{"second", rules.ScopeKey, true, true},
	}
	if len(e.Limits) != len(tests) {
		t.Fatalf("got %d limits %+v, want %d", len(e.Limits), e.Limits, len(tests))
	}
	for i, tt := range tests {
		l := e.Limits[i]
		if l.Name != tt.name || l.Rule.Scope != tt.scope || l.InForce != tt.inForce || l.Rule.Override != tt.override || l.Rule.Source != "explain.yaml" {
			t.Errorf("limit %d: got %s %s in force %v override %v source %q, want %s %s %v %v explain.yaml",
				i, l.Name, l.Rule.Scope, l.InForce, l.Rule.Override, l.Rule.Source, tt.name, tt.scope, tt.inForce, tt.override)
		}
	}
	ov, plan := e.Limits[2], e.Limits[1]
	if ov.Rule.Reason != "incident 23" || !ov.Rule.ExpiresAt.Equal(expires) {
		t.Errorf("override: got reason %q expiry %v, want incident 23, %v", ov.Rule.Reason, ov.Rule.ExpiresAt, expires)
	}
	if ov.State == nil || ov.State.Remaining < 70 || ov.State.Remaining >= 80 || ov.State.Source != limit.FromRedis {
		t.Errorf("override state: got %+v, want 70 to 79 of 80 left, from redis", ov.State)
	}
	if plan.Share == nil || plan.Share.Fraction != 0.25 || !plan.Tightest || e.Tightest != "pro-minute" {
		t.Errorf("plan: got share %+v tightest %v (explanation: %q), want a quarter, the tightest", plan.Share, plan.Tightest, e.Tightest)
	}
	if e.Limits[0].State != nil {
		t.Errorf("displaced default: got state %+v, want none read", e.Limits[0].State)
	}

	for _, q := range []string{"key=key_pro&path=/v1/search.", "key=&path=/v1/search", "key=key_pro"} {
		if resp, body := doURL(t, "GET", metrics.URL+gateway.ExplainPath+"?"+q); resp.StatusCode != 400 {
			t.Errorf("explain?%s: got %d %s, want 400", q, resp.StatusCode, body)
		}
	}
}
