package share_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/share"
)

// redisStore is a redisstore.Store on a redis-server of the test's own.
func redisStore(t *testing.T) *redisstore.Store {
	t.Helper()
	rs, err := redisstore.New(t.Context(), redisstore.Config{Addrs: []string{redistest.Standalone(t).Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rs.Close)
	return rs
}

// TestOrgLimitScaled takes two keys of one org through a region's share
// over real Redis: the org's limit is cut to the share the table gives it
// under its store name (the org's store key, "NAME~org"), as the balancer
// sees it in Usage, and binds both keys together; each key's own limit is
// cut to its own share.
func TestOrgLimitScaled(t *testing.T) {
	set, err := rules.Parse("org.yaml", []byte(`
keys:
  a1: {plan: pro, org: acme}
  a2: {plan: pro, org: acme}
rules:
  - scope: plan
    match: {plan: pro}
    limits: [{name: h, rate: 100, per: 1h}]
  - scope: org
    match: {org: acme}
    limits: [{name: h, rate: 30, per: 1h}]
`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := share.New(redisStore(t), share.Config{Regions: 2})
	if err != nil {
		t.Fatal(err)
	}
	// 30% of the org's limit here: 9 of 30; the keys get the default half.
	if err := s.Set(&share.Table{Version: 1, Default: Whole / 2, Shares: map[share.Pair]uint32{{Key: "o:acme", Limit: "h~org"}: 300_000}}); err != nil {
		t.Fatal(err)
	}
	admitted := map[string]int{}
	for i := range 40 {
		key := []string{"a1", "a2"}[i%2]
		res := set.Resolve(time.Now(), rules.Query{APIKey: key})
		req := limit.Request{Key: res.StoreKey("k:" + key), Cost: res.Cost, Limits: res.AppendStoreLimits(nil, key)}
		d, err := s.Take(t.Context(), &req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted[key]++
		} else if d.Index != 1 {
			t.Errorf("take %d of %s refused by limit %d, want the org's (1)", i, key, d.Index)
		}
	}
	if n := admitted["a1"] + admitted["a2"]; n != 9 || admitted["a1"] == 0 || admitted["a2"] == 0 {
		t.Errorf("admitted %v (%d in all), want 9 (30%% of the org's 30) between both keys", admitted, n)
	}
	u := s.Usage(0)
	found := false
	for _, p := range u.Pairs {
		found = found || p.Key == "o:acme" && p.Limit == "h~org" && p.Admitted == 9
	}
	if !found {
		t.Errorf("usage %+v: want the org's limit under o:acme, h~org, with 9 admitted", u.Pairs)
	}
}

// TestGiveBackScaled gives back a region's grants on real Redis: the
// give-back reaches the bucket the scaled take drew from, and never lifts
// it above the region's share of the burst, however much is given.
func TestGiveBackScaled(t *testing.T) {
	rs := redisStore(t)
	s, err := share.New(rs, share.Config{Regions: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Set(&share.Table{Version: 1, Default: Whole / 4}); err != nil {
		t.Fatal(err)
	}
	for _, l := range []limit.Limit{
		{Name: "tb", Count: 40, Period: time.Hour},
		{Name: "gcra", Count: 40, Period: time.Hour, Algorithm: limit.GCRA},
		{Name: "fw", Count: 40, Period: time.Hour, Algorithm: limit.FixedWindow},
		{Name: "sw", Count: 40, Period: time.Hour, Algorithm: limit.SlidingWindow},
	} {
		t.Run(string(l.Alg()), func(t *testing.T) {
			req := &limit.Request{Key: "k:giver", Limits: []limit.Limit{l}}
			// A quarter of 40 here: 10 pass.
			if got := admit(t, s, req.Key, l, 12); got != 10 {
				t.Fatalf("got %d admitted, want 10 (a quarter of 40)", got)
			}
			// Three given back: three more pass, and no fourth.
			for range 3 {
				if err := s.GiveBack(t.Context(), req); err != nil {
					t.Fatal(err)
				}
			}
			if got := admit(t, s, req.Key, l, 5); got != 3 {
				t.Errorf("after giving back 3: got %d admitted, want 3", got)
			}
			// Given back far more than was taken: still the share's 10 at
			// most, not the whole limit's 40.
			for range 30 {
				if err := s.GiveBack(t.Context(), req); err != nil {
					t.Fatal(err)
				}
			}
			if got := admit(t, s, req.Key, l, 45); got != 10 {
				t.Errorf("after giving back 30: got %d admitted, want 10 (never above the share)", got)
			}
		})
	}
}

// TestGiveBackWithoutGiver: a Store over an inner store that cannot give
// back, and no Config.GiveBack, says so.
func TestGiveBackWithoutGiver(t *testing.T) {
	s, err := share.New(noGiver{}, share.Config{Regions: 2})
	if err != nil {
		t.Fatal(err)
	}
	req := &limit.Request{Key: "k:x", Limits: []limit.Limit{{Name: "s", Count: 10, Period: time.Second}}}
	if err := s.GiveBack(context.Background(), req); err == nil {
		t.Error("GiveBack with nothing to give back to: got nil, want an error")
	}
}

type noGiver struct{}

func (noGiver) Take(context.Context, *limit.Request) (limit.Decision, error) {
	return limit.Decision{Allowed: true}, nil
}
