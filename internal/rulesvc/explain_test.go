package rulesvc_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/internal/keyhash"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/internal/rulesapi"
	"github.com/sluice-rl/sluice/internal/rulesvc"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/rules"
)

// TestExplain asks the service why a key on the pro plan is limited on
// /v1/search while an emergency override is in place: every matching rule
// with its source, the override's reason and expiry, the region share, the
// tightest limit, the key's buckets in a real Redis (read, never taken
// from), and the refusal a gateway reported.
func TestExplain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := redisstore.New(ctx, redisstore.Config{Addrs: []string{redistest.Standalone(t).Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	share := func(key, name string) (limit.Fraction, bool) {
		return limit.Fraction{Num: 1, Den: 4}, name == "pro-minute"
	}
	r := startReplica(t, newSchema(t), rulesvc.Config{Store: store, Share: share, Canary: rulesvc.Canary{Disabled: true}})
	base := r.srv.URL
	c := &admin.Client{BaseURL: base, Token: readToken}
	w := &admin.Client{BaseURL: base, Token: writeToken}

	mustCall(t, base, "PUT", "/admin/v1/keys/key_pro", rules.KeyInfo{Plan: "pro", Org: "acme"}, 200, nil)
	mustCall(t, base, "PUT", "/admin/v1/endpoints/search", rules.Endpoint{Method: "GET", Path: "/v1/search", Cost: 2}, 200, nil)
	lim := func(name string, rate int64, per time.Duration) []rules.Limit {
		return []rules.Limit{{Name: name, Rate: rules.Rate(rate), Per: rules.Duration(per)}}
	}
	mustCreate := func(r rules.Rule) admin.RuleView {
		t.Helper()
		ch, err := w.CreateRule(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return *ch.After
	}
	def := mustCreate(rules.Rule{Scope: rules.ScopeDefault, Limits: lim("second", 100, time.Second)})
	pro := mustCreate(rules.Rule{Scope: rules.ScopePlan, Match: rules.Match{Plan: "pro"}, Limits: lim("pro-minute", 6000, time.Minute)})
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	ov, err := w.SetOverride(ctx, "key_pro", admin.Override{Limits: lim("second", 80, time.Second), ExpiresAt: expires, Reason: "incident 23"})
	if err != nil {
		t.Fatal(err)
	}

	// The key spends 10 tokens of its override (5 requests of cost 2)
	// through the store, as a gateway would.
	var sn rulesapi.Snapshot
	if code, raw := call(t, base, gatewayToken, "GET", rulesapi.SnapshotPath+"?gateway=gw-1&region=eu&wait=1ms", nil, &sn); code != 200 {
		t.Fatalf("poll: got %d %s", code, raw)
	}
	var doc rules.Document
	if err := json.Unmarshal(sn.Document, &doc); err != nil {
		t.Fatal(err)
	}
	set, err := rules.Compile(doc, sn.Version)
	if err != nil {
		t.Fatal(err)
	}
	res := set.Resolve(time.Now(), rules.Query{APIKey: "key_pro", Endpoint: "search"})
	for _, l := range res.Limits {
		if l.Name != "second" {
			continue
		}
		for range 5 {
			if d, err := store.Take(ctx, &limit.Request{Key: "k:key_pro", Cost: res.Cost, Limits: []limit.Limit{l}}); err != nil || !d.Allowed {
				t.Fatalf("take: %+v, %v", d, err)
			}
		}
	}
	took := time.Now()
	// A gateway reports a refusal of the key by the override.
	rep := rulesapi.Report{Gateway: "gw-1", Region: "eu", Versions: []rulesapi.VersionReport{{Version: sn.Version, Requests: 10, Refused: 4,
		Refusals: []rulesapi.RefusalReport{{Rule: ov.After.ID, Limit: "second", Refused: 4,
			TopKeys: []rulesapi.KeyCount{{Key: keyhash.Of("k:key_pro"), Count: 4}}}}}}}
	if code, raw := call(t, base, gatewayToken, "POST", rulesapi.ReportPath, rep, nil); code/100 != 2 {
		t.Fatalf("report: got %d %s", code, raw)
	}

	e, err := c.Explain(ctx, "key_pro", "GET", "/v1/search")
	// At 80 a second the 10 tokens are back within 125 ms: on a loaded
	// machine the explain may come after that, and then shows a full
	// bucket, which is its true state.
	refilled := time.Since(took) >= 100*time.Millisecond
	if err != nil {
		t.Fatal(err)
	}
	if e.Plan != "pro" || e.Org != "acme" || !e.Known || e.Endpoint != "search" || e.Cost != 2 {
		t.Errorf("got plan %q org %q known %v endpoint %q cost %d, want pro acme true search 2", e.Plan, e.Org, e.Known, e.Endpoint, e.Cost)
	}
	byRule := map[int64]admin.ExplainedLimit{}
	for _, l := range e.Limits {
		byRule[l.Rule.ID] = l
	}
	tests := []struct {
		rule     int64
		inForce  bool
		override bool
	}{{def.ID, false, false}, {pro.ID, true, false}, {ov.After.ID, true, true}}
	for _, tt := range tests {
		l, ok := byRule[tt.rule]
		if !ok {
			t.Errorf("rule %d: not listed in %+v", tt.rule, e.Limits)
			continue
		}
		if l.InForce != tt.inForce || l.Rule.Override != tt.override || l.Rule.Source != "rules service" || l.Rule.Version == 0 {
			t.Errorf("rule %d: got in force %v override %v source %q version %d, want %v %v \"rules service\" >0",
				tt.rule, l.InForce, l.Rule.Override, l.Rule.Source, l.Rule.Version, tt.inForce, tt.override)
		}
	}
	o := byRule[ov.After.ID]
	if o.Rule.Reason != "incident 23" || !o.Rule.ExpiresAt.Equal(expires) {
		t.Errorf("override: got reason %q expires %v, want incident 23, %v", o.Rule.Reason, o.Rule.ExpiresAt, expires)
	}
	// 10 tokens taken, some refilled since at 80 a second.
	if o.State == nil || o.State.Remaining < 70 || o.State.Remaining > 80 || o.State.Remaining == 80 && !refilled {
		t.Errorf("override state: got %+v, want 70 to 79 of 80 tokens left (80 only if 100 ms have passed: %v)", o.State, refilled)
	}
	// A quarter of 6000 a minute is 25 a second: the region's share of the
	// plan's limit is tighter than the override's 80 a second.
	p := byRule[pro.ID]
	if p.Share == nil || p.Share.Fraction != 0.25 || p.Share.Count*int64(time.Minute)/int64(p.Share.Per) != 1500 {
		t.Errorf("pro share: got %+v, want a quarter, 1500 a minute", p.Share)
	}
	if e.Tightest != "pro-minute" || !p.Tightest || o.Tightest {
		t.Errorf("tightest: got %q (plan marked %v, override %v), want pro-minute, the plan's", e.Tightest, p.Tightest, o.Tightest)
	}
	if lr := e.LastRefusal; lr == nil || lr.Rule != ov.After.ID || lr.Limit != "second" || lr.RulesVersion != sn.Version {
		t.Errorf("last refusal: got %+v, want rule %d limit second version %d", lr, ov.After.ID, sn.Version)
	}
	if len(e.Refused) != 1 || e.Refused[0].Rule != ov.After.ID || len(e.Refused[0].Keys) != 1 || e.Refused[0].Keys[0].Key != keyhash.Of("k:key_pro") {
		t.Errorf("busiest refused of the listed rules: got %+v, want the override's, with key_pro's hash", e.Refused)
	}
	// Reading the state took nothing.
	e2, err := c.Explain(ctx, "key_pro", "GET", "/v1/search")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range e2.Limits {
		if l.Rule.ID == ov.After.ID && (l.State == nil || l.State.Remaining < 70) {
			t.Errorf("second explain: override state %+v, want at least the 70 tokens left before", l.State)
		}
	}
	refused, err := c.Refused(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(refused) != 1 || refused[0].Rule != ov.After.ID || len(refused[0].Keys) != 1 || refused[0].Keys[0].Count != 4 {
		t.Errorf("refused: got %+v, want the override's one key, 4 refusals", refused)
	}

	for _, bad := range []string{"key=&path=/v1/search", "key=key_pro&path=v1", "key=key_pro&path=/v1/search."} {
		if code, raw := call(t, base, readToken, "GET", "/admin/v1/explain?"+bad, nil, nil); code != 400 {
			t.Errorf("explain?%s: got %d %s, want 400", bad, code, raw)
		}
	}
}
