package rulesvc_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/internal/rulesvc"
	"github.com/sluice-rl/sluice/quota"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/rules"
)

// usageCounts is a Redis store on a server of the test's own, for the
// usage endpoint.
func usageCounts(t *testing.T) *redisstore.Store {
	t.Helper()
	rs, err := redisstore.New(t.Context(), redisstore.Config{Addrs: []string{redistest.Standalone(t).Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	return rs
}

// TestUsage publishes a rule with a daily and a Berlin monthly quota,
// counts requests of a key as a gateway's batcher does, and reads them
// back through GET /admin/v1/usage/{key}; a key with control characters is
// refused.
func TestUsage(t *testing.T) {
	t.Parallel()
	rs := usageCounts(t)
	r := startReplica(t, newSchema(t), rulesvc.Config{Counts: rs, Canary: rulesvc.Canary{Disabled: true}})
	base := r.srv.URL
	if code, raw := call(t, base, writeToken, "PUT", "/admin/v1/keys/key_pro", rules.KeyInfo{Plan: "pro", Org: "acme"}, nil); code != 200 {
		t.Fatalf("put key: %d %s", code, raw)
	}
	rule := rules.Rule{Scope: rules.ScopePlan, Match: rules.Match{Plan: "pro"}, Quotas: []rules.Quota{
		{Name: "daily", Count: 100, Per: quota.Day}, {Name: "monthly", Count: 1000, Per: quota.Month, Zone: "Europe/Berlin"}}}
	if code, raw := call(t, base, writeToken, "POST", "/admin/v1/rules", rule, nil); code != 201 {
		t.Fatalf("post rule: %d %s", code, raw)
	}
	// The key's org has a quota of its own, and a shadow rule tries a
	// tighter daily one.
	for _, rule := range []rules.Rule{
		{Scope: rules.ScopeOrg, Match: rules.Match{Org: "acme"}, Quotas: []rules.Quota{{Name: "org-daily", Count: 50, Per: quota.Day}}},
		{Scope: rules.ScopePlan, Match: rules.Match{Plan: "pro"}, Mode: rules.Shadow, Quotas: []rules.Quota{{Name: "daily", Count: 5, Per: quota.Day}}},
	} {
		if code, raw := call(t, base, writeToken, "POST", "/admin/v1/rules", rule, nil); code != 201 {
			t.Fatalf("post rule: %d %s", code, raw)
		}
	}
	// A gateway's batcher counts 7 requests and flushes them.
	berlin, _ := time.LoadLocation("Europe/Berlin")
	b, err := quota.New(counter{rs}, quota.Config{Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	qs := []quota.Quota{{Name: "daily", Count: 100, Period: quota.Day}, {Name: "monthly", Count: 1000, Period: quota.Month, Location: berlin},
		{Name: "org-daily", Count: 50, Period: quota.Day, Key: "o:acme"}, {Name: "daily", Count: 5, Period: quota.Day, Shadow: true}}
	for range 7 {
		if _, err := b.Take(t.Context(), "k:key_pro", qs, 1); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()

	// The service loads the newest version once PostgreSQL notifies it.
	var u rulesvc.Usage
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		u = rulesvc.Usage{}
		if code, raw := call(t, base, writeToken, "GET", "/admin/v1/usage/key_pro", nil, &u); code != 200 {
			t.Fatalf("usage: %d %s", code, raw)
		}
		if len(u.Quotas) == 4 || time.Now().After(end) {
			break
		}
	}
	if len(u.Quotas) != 4 {
		t.Fatalf("got %d quotas (%+v), want 4", len(u.Quotas), u)
	}
	for i, want := range []struct {
		name, org string
		shadow    bool
		used      int64
	}{{"daily", "", false, 7}, {"monthly", "", false, 7}, {"org-daily", "acme", false, 7}, {"daily", "", true, 5}} {
		q := u.Quotas[i]
		if q.Name != want.name || q.Org != want.org || q.Shadow != want.shadow || q.Used != want.used || q.Remaining != q.Count-want.used {
			t.Errorf("quota %d: %+v; want %s (org %q, shadow %v) with %d used", i, q, want.name, want.org, want.shadow, want.used)
		}
	}
	if u.Quotas[1].Zone != "Europe/Berlin" {
		t.Errorf("monthly quota zone %q, want Europe/Berlin", u.Quotas[1].Zone)
	}
	if code, _ := call(t, base, writeToken, "GET", "/admin/v1/usage/bad%01key", nil, nil); code != 400 {
		t.Errorf("key with a control character: got %d, want 400", code)
	}
}

// counter adds a batcher's counts to Redis as the pipeline does.
type counter struct{ rs *redisstore.Store }

func (c counter) AddCounts(ctx context.Context, adds []quota.Add) ([]int64, error) {
	cs := make([]redisstore.Count, len(adds))
	for i, a := range adds {
		cs[i] = redisstore.Count{Key: a.Key, Counter: a.Counter, Delta: a.Delta, ExpireAt: a.ExpireAt}
	}
	if err := c.rs.AddCounts(ctx, cs); err != nil {
		return nil, err
	}
	out := make([]int64, len(cs))
	for i := range cs {
		out[i] = cs[i].Total
	}
	return out, nil
}

// TestOrgRuleStored stores an org rule through the admin API and finds it
// in the rule set the gateways are served, and refuses a malformed one.
func TestOrgRuleStored(t *testing.T) {
	t.Parallel()
	r := startReplica(t, newSchema(t), rulesvc.Config{})
	base := r.srv.URL
	lim := []rules.Limit{{Name: "s", Rate: 100, Per: rules.Duration(time.Second)}}
	org := rules.Rule{Scope: rules.ScopeOrg, Match: rules.Match{Org: "acme"}, Limits: lim}
	var created struct {
		After rules.Rule `json:"after"`
	}
	if code, raw := call(t, base, writeToken, "POST", "/admin/v1/rules", org, &created); code != 201 {
		t.Fatalf("post org rule: %d %s", code, raw)
	}
	var got rules.Rule
	if code, raw := call(t, base, writeToken, "GET", "/admin/v1/rules/"+strconv.FormatInt(created.After.ID, 10), nil, &got); code != 200 ||
		got.Scope != rules.ScopeOrg || got.Match.Org != "acme" {
		t.Fatalf("get org rule: %d %s", code, raw)
	}
	bad := rules.Rule{Scope: rules.ScopeOrg, Match: rules.Match{Org: "acme", Plan: "pro"}, Limits: lim}
	if code, _ := call(t, base, writeToken, "POST", "/admin/v1/rules", bad, nil); code != 422 {
		t.Errorf("org rule with a plan: got %d, want 422", code)
	}
}
