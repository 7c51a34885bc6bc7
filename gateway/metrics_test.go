package gateway_test

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
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
