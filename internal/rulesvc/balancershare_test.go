package rulesvc_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/internal/balancer"
	"github.com/sluice-rl/sluice/internal/balancersvc"
	"github.com/sluice-rl/sluice/internal/rulesvc"
	"github.com/sluice-rl/sluice/rules"
)

// TestExplainRegionShareFromBalancer asks the service for a key's limits
// in one region, with a real balancer of two regions behind it: explain
// shows the region's share the balancer gives, and the limit it makes; a
// region the balancer does not know is an error.
func TestExplainRegionShareFromBalancer(t *testing.T) {
	t.Parallel()
	const opToken, fleetToken = "operator-token-0123456789", "fleet-token-0123456789"
	bal, err := balancersvc.New(balancersvc.Config{CoreConfig: balancer.CoreConfig{Regions: []string{"us", "eu"}}, Interval: 100 * time.Millisecond,
		Token: fleetToken, Tokens: []balancersvc.Token{{Name: "ops", Secret: opToken}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); bal.Run(ctx) }()
	bsrv := httptest.NewServer(bal.Handler())
	t.Cleanup(func() { cancel(); <-done; bsrv.Close() })

	// Each region's gateway reports, as gateways do every interval: the
	// balancer plans once it has reports, and a report that arrives
	// before its first round may age out, so they are sent again until
	// the shares are there.
	report := func() {
		for _, region := range []string{"us", "eu"} {
			if code, raw := call(t, bsrv.URL, fleetToken, "POST", balancer.ReportPath,
				balancer.Report{Region: region, Gateway: "gw-" + region, SpanMillis: 100}, nil); code/100 != 2 {
				t.Fatalf("report of %s: got %d %s", region, code, raw)
			}
		}
	}
	report()
	r := startReplica(t, newSchema(t), rulesvc.Config{Canary: rulesvc.Canary{Disabled: true},
		Balancer: &rulesvc.BalancerShares{URL: bsrv.URL, Token: opToken}})
	base := r.srv.URL
	mustCall(t, base, "POST", "/admin/v1/rules", rules.Rule{Scope: rules.ScopeDefault,
		Limits: []rules.Limit{{Name: "s", Rate: 100, Per: rules.Duration(time.Second)}}}, 201, nil)
	// The share is the balancer's, as its own answer says. The balancer
	// replans every interval, so the two are read until they are of one
	// plan.
	var e admin.Explanation
	var want float64
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, raw := call(t, base, readToken, "GET", "/admin/v1/explain?key=key_a&path=/v1/x&region=eu", nil, &e)
		var ks balancer.KeyShares
		bcode, braw := call(t, bsrv.URL, opToken, "GET", balancer.KeyPath+"k:key_a", nil, &ks)
		want = ks.Defaults["eu"].Fraction
		if code == 200 && bcode == 200 && len(e.Limits) == 1 && e.Limits[0].Share != nil && e.Limits[0].Share.Fraction == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("explain with eu's share: got %d %s %+v; balancer %d %s", code, raw, e.Limits, bcode, braw)
		}
		time.Sleep(50 * time.Millisecond)
		report()
	}
	if got := e.Limits[0].Share.Count * int64(time.Second) / int64(e.Limits[0].Share.Per); float64(got) > 100*want || float64(got) < 100*want-1 {
		t.Errorf("eu's part of 100 a second: got %d a second, want %v", got, 100*want)
	}
	for q, want := range map[string]int{"region=mars": 502, "region=": 200} {
		if code, raw := call(t, base, readToken, "GET", "/admin/v1/explain?key=key_a&path=/v1/x&"+q, nil, nil); code != want {
			t.Errorf("explain?%s: got %d %s, want %d", q, code, raw, want)
		}
	}
}
