package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/rules"
)

// TestOrgThroughGateway sends two keys of one org through the middleware
// (in-process store): each key has 3, the org 4 in all, and headers and
// the refusal name the limits as written, not as stored.
func TestOrgThroughGateway(t *testing.T) {
	set, err := rules.Parse("org.yaml", []byte(`
keys:
  k1: {plan: pro, org: acme}
  k2: {plan: pro, org: acme}
rules:
  - scope: plan
    match: {plan: pro}
    limits: [{name: h, rate: 3, per: 1h}]
  - scope: org
    match: {org: acme}
    limits: [{name: org-h, rate: 4, per: 1h}]
`))
	if err != nil {
		t.Fatal(err)
	}
	l, err := gateway.New(gateway.Config{Rules: gateway.StaticRules(set)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(l.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	t.Cleanup(hs.Close)
	send := func(key string) *http.Response {
		req, _ := http.NewRequest("GET", hs.URL+"/x", nil)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for i, tt := range []struct {
		key    string
		code   int
		policy string // the limit RateLimit-Policy names
	}{
		{"k1", 200, "h"}, {"k1", 200, "h"}, {"k1", 200, "h"}, {"k1", 429, "h"}, // k1's own 3
		{"k2", 200, "org-h"}, {"k2", 429, "org-h"}, // the org's fourth, then none
	} {
		resp := send(tt.key)
		if p := resp.Header.Get("Ratelimit-Policy"); resp.StatusCode != tt.code || !strings.Contains(p, `"`+tt.policy+`"`) {
			t.Errorf("request %d (%s): got %d, policy %q; want %d naming %q", i, tt.key, resp.StatusCode, p, tt.code, tt.policy)
		}
	}
}
