package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/rules"
)

// planRules limit plan pro by its own rule; keys on plan trial get only
// the default, and so does a request without a key.
const planRules = `
keys:
  key_pro: {plan: pro}
  key_trial: {plan: trial}
  key_free: {plan: free}
rules:
  - scope: default
    limits: [{name: h, rate: 1, per: 1h}]
  - scope: plan
    match: {plan: pro}
    limits: [{name: pro_h, rate: 1, per: 1h}]
  - scope: plan
    match: {plan: pro}
    mode: shadow
    limits: [{name: pro_shadow, rate: 5, per: 1h}]
`

// TestDecisionsByPlan checks the plan label: a plan a rule names is its
// own value; every other plan shares "other" and requests without a known
// key "none", so the label has as many values as the rules name plans,
// plus two, however many plans the key directory holds.
func TestDecisionsByPlan(t *testing.T) {
	g := newTestGateway(t, planRules, nil)
	for _, key := range []string{"key_pro", "key_trial", "key_free", "unknown_key", ""} {
		for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
			var hdr []string
			if key != "" {
				hdr = []string{"X-API-Key", key}
			}
			if resp, _ := g.do(t, "GET", "/", hdr...); resp.StatusCode != want {
				t.Fatalf("key %q request %d: status %d, want %d", key, i+1, resp.StatusCode, want)
			}
		}
	}
	tests := []struct {
		plan, outcome string
		want          float64
	}{
		{"pro", "allowed", 1},
		{"pro", "refused", 1},
		{"pro", "shadow_allowed", 2},
		{"other", "allowed", 2}, // trial and free
		{"other", "refused", 2},
		{"none", "allowed", 2}, // an unknown key and no key
		{"none", "refused", 2},
		{"trial", "allowed", 0},
		{"free", "refused", 0},
	}
	for _, tt := range tests {
		labels := map[string]string{"plan": tt.plan, "outcome": tt.outcome}
		if got := testutil.ToFloat64(counterFrom(t, g.reg, "sluice_gateway_decisions_total", labels)); got != tt.want {
			t.Errorf("decisions%v = %v, want %v", labels, got, tt.want)
		}
	}
}

// BenchmarkCheckMetrics measures what the metrics add to a check, the plan
// label's lookup included: the same check of a key on a plan a rule names,
// without and with a Registerer, in one run.
func BenchmarkCheckMetrics(b *testing.B) {
	set, err := rules.Parse("plans.yaml", []byte(`
keys:
  key_bench: {plan: bench}
rules:
  - scope: plan
    match: {plan: bench}
    limits: [{name: s, rate: 1000000000, per: 1s}]
`))
	if err != nil {
		b.Fatal(err)
	}
	for _, withMetrics := range []bool{false, true} {
		name := "without"
		var reg prometheus.Registerer
		if withMetrics {
			name = "with"
		}
		b.Run(name, func(b *testing.B) {
			if withMetrics {
				reg = prometheus.NewRegistry()
			}
			// A limit that never refuses, so that every check is an
			// allowed decision on plan bench.
			lim, err := gateway.New(gateway.Config{Rules: gateway.StaticRules(set), Registerer: reg})
			if err != nil {
				b.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("X-API-Key", "key_bench")
			checkLoop(b, lim, r)
		})
	}
}

// checkLoop runs lim.Check on r for the benchmark, into a response whose
// header map is reused, so that only the limiter's own cost is measured.
func checkLoop(b *testing.B, lim *gateway.Limiter, r *http.Request) {
	w := &reusedWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		if err := lim.Check(w, r); err != nil {
			b.Fatal(err)
		}
	}
}
