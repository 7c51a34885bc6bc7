package guard_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/rules"
)

// orgFallbackRules gives org acme 30 an hour over keys of 100 each, and
// org beta a fail-closed limit.
const orgFallbackRules = `
keys:
  a1: {plan: pro, org: acme}
  a2: {plan: pro, org: acme}
  b1: {plan: pro, org: beta}
rules:
  - scope: plan
    match: {plan: pro}
    limits: [{name: h, rate: 100, per: 1h}]
  - scope: org
    match: {org: acme}
    limits: [{name: org-h, rate: 30, per: 1h}]
  - scope: org
    match: {org: beta}
    fail_mode: closed
    limits: [{name: org-h, rate: 30, per: 1h}]
`

// TestOrgLocalFallback takes an org's keys through the production stack
// on real Redis, one gateway of three (leases off, so every answer is the
// guard's or Redis's), and kills Redis: the org's bucket is then counted
// in memory at this gateway's share of what Redis last said it had left,
// both keys drawing on it, and an org rule that fails closed refuses.
func TestOrgLocalFallback(t *testing.T) {
	set, err := rules.Parse("org.yaml", []byte(orgFallbackRules))
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Standalone(t)
	p, err := pipeline.New(t.Context(), pipeline.Config{Redis: redisstore.Config{Addrs: []string{srv.Addr()}},
		Fleet: limit.Fleet{Gateways: 3}, NoLeases: true, Guard: guard.Config{Timeout: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	take := func(key string) (limit.Decision, error) {
		res := set.Resolve(time.Now(), rules.Query{APIKey: key})
		if res.Org == "" || res.OrgLimits != 1 {
			t.Fatalf("key %s: resolved %+v, want one org limit", key, res)
		}
		req := limit.Request{Key: res.StoreKey("k:" + key), Cost: res.Cost, Limits: res.AppendStoreLimits(nil, key)}
		return p.Take(t.Context(), &req)
	}

	// 15 of acme's 30 spent through Redis, by both keys, and one of beta's.
	for i := range 15 {
		if d, err := take([]string{"a1", "a2"}[i%2]); err != nil || !d.Allowed || d.Source != limit.FromRedis {
			t.Fatalf("take %d through Redis: %+v, %v", i, d, err)
		}
	}
	if d, err := take("b1"); err != nil || !d.Allowed {
		t.Fatalf("beta through Redis: %+v, %v", d, err)
	}

	srv.Kill()
	// Until the guard judges the node down, a call fails (the gateway lets
	// it through open or, for beta, refuses): wait for local answers.
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := take("b1")
		if d.Source == limit.FromFailClosed {
			if !errors.Is(err, guard.ErrUnavailable) || d.Allowed || d.Index != 1 {
				t.Errorf("beta during the outage: %+v, %v; want refused by its org limit (1), wrapping ErrUnavailable", d, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fail-closed answer within 10 s of killing Redis: last %+v, %v", d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The org had 15 left; this gateway's share of it is 15 × 2/3 = 10
	// (guard: 2/N of the last word), drawn by both keys together, each far
	// from its own 100.
	admitted := map[string]int{}
	for i := range 40 {
		key := []string{"a1", "a2"}[i%2]
		d, err := take(key)
		if err != nil || d.Source != limit.FromLocalFallback {
			t.Fatalf("take %d of %s during the outage: %+v, %v; want a local answer", i, key, d, err)
		}
		if d.Allowed {
			admitted[key]++
		} else if d.Index != 1 {
			t.Errorf("take %d of %s refused by limit %d, want the org's (1)", i, key, d.Index)
		}
	}
	if n := admitted["a1"] + admitted["a2"]; n != 10 || admitted["a1"] == 0 || admitted["a2"] == 0 {
		t.Errorf("admitted locally %v (%d in all), want 10 between both keys", admitted, n)
	}
}
