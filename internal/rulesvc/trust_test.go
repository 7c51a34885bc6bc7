package rulesvc_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/rulesapi"
	"github.com/sluice-rl/sluice/internal/rulesvc"
	"github.com/sluice-rl/sluice/internal/rulesync"
)

// Issue 21: with the shared gateway token, two made-up gateways reporting
// 2^40 requests a second, all refused or none, decided the canary for the
// whole fleet. Their reports are now refused as more than a gateway can
// serve, and a gateway's weight is capped anyway: the canary of three real
// gateways decides as it would without them, either way.
func TestFakeGatewaysCannotDecideTheCanary(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		rate        int64 // the free plan's new limit a second, burst 1
		fakeRefused int64
		wantState   string
	}{
		// Without the fix, the rest looked like it refused everything, so
		// a canary refusing nearly everything was promoted.
		{"loud fakes cannot promote a refusing change", 1, 1 << 40, "halted"},
		// Without the fix, the rest looked like it refused nothing, so a
		// canary refusing as much as the real rest was halted.
		{"quiet fakes cannot halt a harmless change", 5000, 0, "promoted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The canary's defaults: window, threshold, samples, gateways.
			r := startReplica(t, newSchema(t), rulesvc.Config{Refresh: 200 * time.Millisecond})
			base := r.srv.URL
			// One key in four is refused by its own rule, so the real
			// fleet refuses about a quarter of its requests whatever the
			// plan's limit.
			keys := []string{"key_free_0", "key_free_1", "key_free_2", "key_blocked"}
			for _, k := range keys {
				mustCall(t, base, "PUT", "/admin/v1/keys/"+k, map[string]any{"plan": "free"}, 200, nil)
			}
			mustCall(t, base, "POST", "/admin/v1/rules", map[string]any{"scope": "key", "match": map[string]any{"key": "key_blocked"},
				"limits": []map[string]any{{"name": "blocked", "rate": 1, "per": "1h"}}}, 201, nil)
			var plan struct{ After rulesvc.RuleView }
			mustCall(t, base, "POST", "/admin/v1/rules", map[string]any{"scope": "plan", "match": map[string]any{"plan": "free"},
				"limits": []map[string]any{{"name": "s", "rate": 10000, "per": "1s"}}}, 201, &plan)
			mustCall(t, base, "POST", "/admin/v1/rollout/promote", map[string]any{"reason": "the test's starting rules"}, 200, nil)
			stable := plan.After.Version

			f := startCanaryFleet(t, base, 3)
			f.keys = keys
			var all []*rulesync.Client
			for _, id := range f.ids {
				all = append(all, f.clients[id])
			}
			waitVersion(t, stable, all...)
			waitFleet(t, base, 3)

			// Two made-up gateways, registered with the shared token,
			// report every second for the stable version.
			var mu sync.Mutex
			answers := map[string]int{}
			stopFakes := make(chan struct{})
			var fakes sync.WaitGroup
			for _, id := range []string{"fake-1", "fake-2"} {
				if code, raw := pollIn(t, base, gatewayToken, id, "eu"); code != 200 {
					t.Fatalf("poll of %s: got %d %s", id, code, raw)
				}
				body := fmt.Sprintf(`{"gateway":%q,"region":"eu","versions":[{"version":%d,"requests":%d,"refused":%d}]}`,
					id, stable, int64(1<<40), tt.fakeRefused)
				fakes.Go(func() {
					for {
						code, raw := call(t, base, gatewayToken, "POST", rulesapi.ReportPath, body, nil)
						mu.Lock()
						answers[fmt.Sprintf("%d %s", code, strings.TrimSpace(raw))]++
						mu.Unlock()
						select {
						case <-stopFakes:
							return
						case <-time.After(time.Second):
						}
					}
				})
			}
			stopDrive := f.drive(t)
			time.Sleep(time.Second) // the rest's baseline

			var res struct{ Snapshot rulesvc.Published }
			mustCall(t, base, "PUT", fmt.Sprintf("/admin/v1/rules/%d", plan.After.ID), map[string]any{"scope": "plan",
				"match": map[string]any{"plan": "free"}, "limits": []map[string]any{{"name": "s", "rate": tt.rate, "per": "1s", "burst": 1}}},
				200, &res)
			v := res.Snapshot.Version
			ro := rolloutOf(t, base, v)
			if len(ro.Canaries) != 1 || !slices.Contains(f.ids, ro.Canaries[0]) {
				t.Fatalf("got canaries %v, want one of the real gateways %v", ro.Canaries, f.ids)
			}
			eventually(t, 30*time.Second, "the rollout decided", func() bool { return rolloutOf(t, base, v).State != "canary" })
			stopDrive()
			close(stopFakes)
			fakes.Wait()
			ro = rolloutOf(t, base, v)
			if ro.State != tt.wantState || ro.Compared == nil || !*ro.Compared {
				t.Errorf("got state %q compared %v reason %q, want %s after a comparison", ro.State, ro.Compared, ro.Reason, tt.wantState)
			}
			t.Logf("version %d %s: %s", v, ro.State, ro.Reason)
			for a, n := range answers {
				if !strings.HasPrefix(a, "400 ") || !strings.Contains(a, "more than the 100000 a second one gateway can decide") {
					t.Errorf("a made-up gateway's report got %q (%d times), want 400 saying it is more than a gateway can serve", a, n)
				}
			}
		})
	}
}

// A report naming another region than the gateway's polls, or a version
// the service never made, is refused with a clear error and stores
// nothing.
func TestReportsOfAnotherRegionOrNoVersionAreRefused(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{Canary: rulesvc.Canary{Disabled: true}})
	base := r.srv.URL
	stable := firstRules(t, base)
	if code, raw := pollIn(t, base, gatewayToken, "gw-eu", "eu"); code != 200 {
		t.Fatalf("poll: got %d %s", code, raw)
	}
	report := func(region string, v int64) string {
		return fmt.Sprintf(`{"gateway":"gw-eu","region":%q,"versions":[{"version":%d,"requests":10,"refused":1}]}`, region, v)
	}
	tests := []struct {
		name, body string
		want       int
		wantErr    string
	}{
		{"another region", report("us", stable), 400, `"region: the report names region \"us\", but gateway \"gw-eu\" polls as region \"eu\""`},
		{"no region", report("", stable), 400, `polls as region \"eu\"`},
		{"a version never made", report("eu", stable+100), 400,
			fmt.Sprintf(`"versions[0].version: snapshot version %d does not exist`, stable+100)},
		{"its own region and a real version", report("eu", stable), 204, ""},
	}
	for _, tt := range tests {
		code, raw := call(t, base, gatewayToken, "POST", rulesapi.ReportPath, tt.body, nil)
		if code != tt.want || !strings.Contains(raw, tt.wantErr) {
			t.Errorf("%s: got %d %s, want %d with %s", tt.name, code, raw, tt.want, tt.wantErr)
		}
	}
}

// pollIn polls once, without waiting, as gateway id in region.
func pollIn(t *testing.T, base, token, id, region string) (int, string) {
	t.Helper()
	return call(t, base, token, "GET", fmt.Sprintf("/v1/snapshot?wait=0s&gateway=%s&region=%s", id, region), nil, nil)
}

// A gateway token bound to one gateway ID and region polls and reports as
// that gateway only: one leaked token speaks for one gateway.
func TestPerGatewayTokens(t *testing.T) {
	t.Parallel()
	const eu1 = "token-of-gw-eu-1-0123456789"
	tokens := append([]rulesvc.Token{{Name: "gw-eu-1", Secret: eu1, Role: rulesvc.RoleGateway, Gateway: "gw-eu-1", Region: "eu"}},
		testTokens...)
	r := startReplica(t, newSchema(t), rulesvc.Config{Tokens: tokens})
	base := r.srv.URL
	pollAs := func(id, region string) (int, string) { return pollIn(t, base, eu1, id, region) }
	if code, raw := pollAs("gw-eu-1", "eu"); code != 200 {
		t.Fatalf("its own gateway: got %d %s, want 200", code, raw)
	}
	for _, tt := range []struct{ id, region, want string }{
		{"gw-eu-2", "eu", `token gw-eu-1 is bound to gateway \"gw-eu-1\"; it cannot poll or report as \"gw-eu-2\"`},
		{"gw-eu-1", "us", `token gw-eu-1 is bound to region \"eu\"`},
	} {
		if code, raw := pollAs(tt.id, tt.region); code != http.StatusForbidden || !strings.Contains(raw, tt.want) {
			t.Errorf("poll as %s in %s: got %d %s, want 403 with %s", tt.id, tt.region, code, raw, tt.want)
		}
	}
	code, raw := call(t, base, eu1, "POST", rulesapi.ReportPath, `{"gateway":"gw-other","region":"eu","versions":[]}`, nil)
	if code != http.StatusForbidden || !strings.Contains(raw, "bound to gateway") {
		t.Errorf("report as another gateway: got %d %s, want 403", code, raw)
	}
	if code, raw := call(t, base, eu1, "POST", rulesapi.ReportPath, `{"gateway":"gw-eu-1","region":"eu","versions":[]}`, nil); code != 204 {
		t.Errorf("report as its own gateway: got %d %s, want 204", code, raw)
	}
	// A bound token with room for more gateways is a mistake in the file.
	_, err := rulesvc.New(t.Context(), rulesvc.Config{Postgres: postgresDSN(), TrustedNetwork: true,
		Tokens: []rulesvc.Token{{Name: "x", Secret: eu1, Role: rulesvc.RoleGateway, Gateway: "gw-1", MaxGateways: 5}}})
	if err == nil || !strings.Contains(err.Error(), `bound to gateway "gw-1", so max_gateways 5 cannot be above 1`) {
		t.Errorf("got %v, want a refusal of max_gateways above 1 on a bound token", err)
	}
}
