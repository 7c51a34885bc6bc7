package share_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/share"
)

// Whole is share.Whole, short.
const Whole = share.Whole

func newStore(t *testing.T, clock *limittest.Clock, stale time.Duration) *share.Store {
	t.Helper()
	s, err := share.New(memstore.New(memstore.Config{Now: clock.Now}), share.Config{Regions: 3, Stale: stale, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// admit takes n requests of key at once and returns how many passed.
func admit(t *testing.T, s limit.Store, key string, l limit.Limit, n int) int {
	t.Helper()
	got := 0
	for range n {
		d, err := s.Take(context.Background(), &limit.Request{Key: key, Limits: []limit.Limit{l}})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			got++
		}
	}
	return got
}

func TestStoreShares(t *testing.T) {
	clock := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := newStore(t, clock, time.Minute)
	l := limit.Limit{Name: "s", Count: 90, Period: time.Second}
	// Before any table: an even third.
	// Shares round down, so the even third (333333 ppm) of 90 is 29.
	if got := admit(t, s, "k:before", l, 100); got != 29 {
		t.Errorf("before a table: got %d admitted, want 29 (a third of 90, rounded down)", got)
	}
	if err := s.Set(&share.Table{Version: 1, Default: 100_000, Shares: map[share.Pair]uint32{{Key: "k:busy", Limit: "s"}: 800_000}}); err != nil {
		t.Fatal(err)
	}
	if got := admit(t, s, "k:busy", l, 100); got != 72 {
		t.Errorf("busy key: got %d admitted, want 72 (80%% of 90)", got)
	}
	if got := admit(t, s, "k:quiet", l, 100); got != 9 {
		t.Errorf("quiet key: got %d admitted, want 9 (the 10%% default)", got)
	}
	// Unconfirmed past the stale timeout, the fixed even split applies
	// (a third), where the table gave more.
	clock.Advance(time.Minute + time.Millisecond)
	if !s.Stale() {
		t.Fatal("got fresh shares past the stale timeout")
	}
	// A minute refilled the bucket; its burst is now the even split's 29.
	if got := admit(t, s, "k:busy", l, 100); got != 29 {
		t.Errorf("busy key with stale shares: got %d admitted, want 29 (the even third)", got)
	}
	if got := s.Share("k:busy", "s"); got != 333_333 {
		t.Errorf("got stale share %d, want the even split 333333", got)
	}
	if got := s.Share("k:quiet", "s"); got != 100_000 {
		t.Errorf("got stale share %d for a key not in the table, want the default 100000, below the even split", got)
	}
	s.Touch()
	if got := s.Share("k:busy", "s"); got != 800_000 {
		t.Errorf("got share %d after contact, want 800000 again", got)
	}
	// A share below the default stays when stale: this region's part of a
	// key whose traffic is elsewhere must not grow while another region
	// may still run the same table fresh.
	if err := s.Set(&share.Table{Version: 2, Default: 300_000, Shares: map[share.Pair]uint32{{Key: "k:elsewhere", Limit: "s"}: 50_000}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute + time.Millisecond)
	if got := s.Share("k:elsewhere", "s"); got != 50_000 {
		t.Errorf("got stale share %d, want the key's smaller share 50000", got)
	}
	if got := s.Share("k:other", "s"); got != 300_000 {
		t.Errorf("got stale share %d for a key not in the table, want the default 300000", got)
	}
	// A default above the even split falls to it.
	if err := s.Set(&share.Table{Version: 3, Default: 600_000}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute + time.Millisecond)
	if got := s.Share("k:other", "s"); got != 333_333 {
		t.Errorf("got stale share %d for a key under a default of 600000, want the even split 333333", got)
	}
	if err := s.Set(&share.Table{Default: Whole + 1}); err == nil {
		t.Error("got no error for a default share above the whole")
	}
}

func TestZeroShareRefuses(t *testing.T) {
	clock := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := newStore(t, clock, time.Minute)
	if err := s.Set(&share.Table{Version: 1, Default: 0}); err != nil {
		t.Fatal(err)
	}
	d, err := s.Take(context.Background(), &limit.Request{Key: "k:a",
		Limits: []limit.Limit{{Name: "s", Count: 10, Period: time.Second}, {Name: "m", Count: 100, Period: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Index != 0 || d.RetryAfter != time.Second || d.Source != limit.FromRegionShare {
		t.Errorf("got %+v, want a refusal by limit 0 for 1s from %q", d, limit.FromRegionShare)
	}
}

func TestUsage(t *testing.T) {
	clock := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := newStore(t, clock, time.Minute)
	if err := s.Set(&share.Table{Version: 1, Default: Whole, Shares: map[share.Pair]uint32{{Key: "k:table", Limit: "s"}: Whole}}); err != nil {
		t.Fatal(err)
	}
	small := limit.Limit{Name: "s", Count: 10, Period: time.Second}
	big := limit.Limit{Name: "s", Count: 10000, Period: time.Second}
	admit(t, s, "k:small", small, 15) // 150% of its rate asked, 10 admitted
	admit(t, s, "k:big", big, 100)    // 1% of its rate
	admit(t, s, "k:table", big, 1)    // 0.01%, but in the table
	clock.Advance(2 * time.Second)
	u := s.Usage(1)
	if u.Span != 2*time.Second || u.Total != 116 {
		t.Errorf("got span %v total %d, want 2s and 116", u.Span, u.Total)
	}
	want := []share.PairUsage{
		{Pair: share.Pair{Key: "k:small", Limit: "s"}, Asked: 15, Admitted: 10},
		{Pair: share.Pair{Key: "k:table", Limit: "s"}, Asked: 1, Admitted: 1},
	}
	if len(u.Pairs) != len(want) || u.Pairs[0] != want[0] || u.Pairs[1] != want[1] {
		t.Errorf("got pairs %+v, want %+v", u.Pairs, want)
	}
	if u := s.Usage(10); u.Total != 0 || len(u.Pairs) != 0 {
		t.Errorf("got %+v after a drain, want nothing", u)
	}
}

// TestGranterConformance runs the granter suite through a whole share:
// the layer must keep every promise of the store below it. (The store
// suite is not run: it checks how a gcra limit carries its debt across a
// rate change, and a split gcra limit is a token bucket by design.)
func TestGranterConformance(t *testing.T) {
	limittest.RunGranter(t, func(t *testing.T, now func() time.Time) limit.Granter {
		s, err := share.NewGranter(memstore.New(memstore.Config{Now: now}), share.Config{Regions: 1, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestGCRAAsTokenBucket checks that a split gcra limit admits what the
// token bucket of the same rate and burst admits, request by request.
func TestGCRAAsTokenBucket(t *testing.T) {
	clock := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := newStore(t, clock, time.Minute)
	if err := s.Set(&share.Table{Version: 1, Default: 500_000}); err != nil {
		t.Fatal(err)
	}
	model := memstore.New(memstore.Config{Now: clock.Now})
	gcra := limit.Limit{Name: "s", Count: 20, Period: time.Second, Burst: 8, Algorithm: limit.GCRA}
	bucket := limit.Limit{Name: "s", Count: 10, Period: time.Second, Burst: 4}
	for i := range 200 {
		got := admit(t, s, "k:g", gcra, 1)
		want := admit(t, model, "k:g", bucket, 1)
		if got != want {
			t.Fatalf("request %d: got %d admitted, want %d as the token bucket", i, got, want)
		}
		clock.Advance(time.Duration(i%7) * 13 * time.Millisecond)
	}
}

// TestStaleDownTableUsesEvenSplit: a table made while this region was
// counted down gives it nothing (default 0); once stale it must not go on
// refusing everything, but fall back to the even split a gateway uses
// before its first table.
func TestStaleDownTableUsesEvenSplit(t *testing.T) {
	clock := limittest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := newStore(t, clock, time.Minute)
	if err := s.Set(&share.Table{Version: 1, Default: 0, Shares: map[share.Pair]uint32{{Key: "k:busy", Limit: "s"}: 0}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute + time.Millisecond)
	for _, key := range []string{"k:busy", "k:other"} {
		if got, want := s.Share(key, "s"), uint32(share.Whole/3); got != want {
			t.Errorf("%s: got stale share %d of a table made while the region was down, want the even split %d", key, got, want)
		}
	}
	l := limit.Limit{Name: "s", Count: 90, Period: time.Second}
	if got := admit(t, s, "k:other", l, 100); got != 29 {
		t.Errorf("got %d admitted on a stale down table, want 29 (a third of 90, rounded down)", got)
	}
}

// TestCostAboveShareIsNotNever: a request whose cost fits the whole
// limit's burst but not this region's share can pass after a rebalance (or
// in another region), so it must not be told limit.Never, which callers
// take as "refuse for good"; a cost above the whole burst still is.
func TestCostAboveShareIsNotNever(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		l          limit.Limit
		cost       int64
		wantRetry  time.Duration
		wantSource limit.Source
	}{
		{"fits the whole burst, period shorter than the interval", limit.Limit{Name: "s", Count: 100, Period: time.Second}, 50, time.Second, limit.FromRegionShare},
		{"fits the whole burst, period longer than the interval", limit.Limit{Name: "m", Count: 100, Period: time.Minute}, 50, 10 * time.Second, limit.FromRegionShare},
		{"fits the whole window", limit.Limit{Name: "w", Count: 100, Period: time.Second, Algorithm: limit.FixedWindow}, 50, time.Second, limit.FromRegionShare},
		{"above the whole burst", limit.Limit{Name: "s", Count: 100, Period: time.Second}, 101, limit.Never, limit.FromMemory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := memstore.New(memstore.Config{})
			g, err := share.NewGranter(ms, share.Config{Regions: 3})
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Set(&share.Table{Version: 1, Default: 300_000}); err != nil {
				t.Fatal(err)
			}
			req := &limit.Request{Key: "k:a", Cost: tc.cost, Limits: []limit.Limit{tc.l}}
			d, err := g.Take(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || d.RetryAfter != tc.wantRetry || d.Source != tc.wantSource {
				t.Errorf("Take of cost %d at a 30%% share: got allowed %v, retry after %v, source %q; want refused, %v, %q",
					tc.cost, d.Allowed, d.RetryAfter, d.Source, tc.wantRetry, tc.wantSource)
			}
			n, d, err := g.TakeUpTo(ctx, req, tc.cost)
			if err != nil {
				t.Fatal(err)
			}
			if n != 0 || d.RetryAfter != tc.wantRetry || d.Source != tc.wantSource {
				t.Errorf("TakeUpTo of cost %d at a 30%% share: got %d granted, retry after %v, source %q; want 0, %v, %q",
					tc.cost, n, d.RetryAfter, d.Source, tc.wantRetry, tc.wantSource)
			}
		})
	}
}
