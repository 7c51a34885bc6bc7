package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/rules"
)

// TestExplainReadsAnOrgKeysBuckets: a key under an org rule keeps its
// buckets under its org's store key, its own limit and the org's renamed
// apart. Explain reads both there: after three requests through the store
// as the gateway sends them, the key's own limit and the org's each show
// three tokens gone.
func TestExplainReadsAnOrgKeysBuckets(t *testing.T) {
	set, err := rules.Parse("org.yaml", []byte(`
keys:
  a1: {plan: pro, org: acme}
rules:
  - scope: default
    limits: [{name: s, rate: 10, per: 1h}]
  - scope: org
    match: {org: acme}
    limits: [{name: s, rate: 50, per: 1h}]
`))
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New(memstore.Config{})
	ctx := context.Background()
	now := time.Now()
	info, known := set.Key("a1")
	res := set.Resolve(now, rules.Query{APIKey: "a1", LookedUp: true, Info: info, Known: known})
	if res.Org != "acme" {
		t.Fatalf("resolved org %q, want acme", res.Org)
	}
	// As the gateway sends it (gateway.Limiter.Check).
	req := limit.Request{Key: res.StoreKey("k:a1"), Cost: 1, Limits: res.AppendStoreLimits(nil, "a1")}
	for range 3 {
		if d, err := store.Take(ctx, &req); err != nil || !d.Allowed {
			t.Fatalf("take: got %+v, %v; want allowed", d, err)
		}
	}
	e, err := admin.Build(ctx, admin.ExplainInput{Set: set, Now: now, Key: "a1", Method: "GET", Path: "/", Store: store})
	if err != nil || e.StateError != "" {
		t.Fatalf("Build: %v, state error %q", err, e.StateError)
	}
	want := map[rules.Scope]int64{rules.ScopeDefault: 7, rules.ScopeOrg: 47}
	seen := 0
	for _, l := range e.Limits {
		w, ok := want[l.Rule.Scope]
		if !ok || !l.InForce {
			continue
		}
		seen++
		if l.State == nil || l.State.Remaining != w {
			t.Errorf("%s limit %q: state %+v, want %d remaining after three requests", l.Rule.Scope, l.Name, l.State, w)
		}
	}
	if seen != 2 {
		t.Errorf("explained %d limits in force of the key and its org, want 2: %+v", seen, e.Limits)
	}
}
