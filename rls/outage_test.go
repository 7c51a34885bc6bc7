package rls_test

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/pipeline"
)

func TestRedisDownFallsBackLocallyAndFailClosedRefuses(t *testing.T) {
	// The gateway's stack (leases over the guard over Redis) with a breaker
	// that opens on the first failure and stays open. With Redis killed,
	// ordinary descriptors are limited locally at this process's share
	// (slack 1, one process: the whole limit), and a request with a
	// fail_mode closed descriptor is OVER_LIMIT, with a Retry-After.
	srv := redistest.Standalone(t)
	l := pipelineStore(t, []string{srv.Addr()}, pipeline.Config{Guard: guard.Config{Timeout: time.Second, DownAfter: time.Second, TripAfter: 1, Pause: time.Hour, Slack: 1}})
	s := serve(t, `
domain: outage
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: login
    rate_limit: {unit: hour, requests_per_unit: 100, fail_mode: closed}
`, l)
	runSteps(t, s, "outage", []step{
		{descs: ds(desc("login", "alice")), want: "OK: OK"},
		{descs: ds(desc("user", "bob")), want: "OK: OK"},
	})
	srv.Kill()
	resps := runSteps(t, s, "outage", []step{
		{descs: ds(desc("login", "alice")), want: "OVER_LIMIT: OVER_LIMIT"},
		// Each descriptor is its own key: the user's hit, granted by the
		// local fallback, stays taken (only Redis's grants are given back;
		// see docs/envoy.md), so carol has one hit left.
		{descs: ds(desc("user", "carol"), desc("login", "carol")), want: "OVER_LIMIT: OK OVER_LIMIT"},
		{descs: ds(desc("user", "carol")), want: "OK: OK"},
		{descs: ds(desc("user", "carol")), want: "OVER_LIMIT: OVER_LIMIT"},
	})
	retry := ""
	for _, h := range resps[0].GetResponseHeadersToAdd() {
		if h.GetKey() == "Retry-After" {
			retry = h.GetValue()
		}
	}
	if retry == "" {
		t.Errorf("fail-closed refusal headers: got %v, want a Retry-After", resps[0].GetResponseHeadersToAdd())
	}
}
