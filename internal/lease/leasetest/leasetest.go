// Package leasetest is the conformance suite for stores that hand out
// partial grants, the TakeUpTo that token leases draw their batches with.
// The in-process store and the Redis store both pass it, so a lease behaves
// the same whichever store it draws from.
package leasetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
)

// Granter is a store that can take up to a number of tokens at once.
type Granter interface {
	TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error)
}

// Factory returns a store that reads time from now. Keys are unique to each
// test, so a store shared between calls is fine.
type Factory func(t *testing.T, now func() time.Time) Granter

// start is where every suite clock begins.
var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Run runs the conformance suite against the stores newStore makes.
func Run(t *testing.T, newStore Factory) {
	t.Run("Grants", func(t *testing.T) { testGrants(t, newStore) })
	t.Run("Refill", func(t *testing.T) { testRefill(t, newStore) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, newStore) })
	t.Run("MatchesModel", func(t *testing.T) { testMatchesModel(t, newStore) })
	t.Run("Rejects", func(t *testing.T) { testRejects(t, newStore) })
}

func testRejects(t *testing.T, newStore Factory) {
	s := newStore(t, limittest.NewClock(start).Now)
	ok := []limit.Limit{perSecond("s", 10, 10)}
	for _, tc := range []struct {
		name string
		req  limit.Request
		want int64
	}{
		{"no limits", limit.Request{Key: "k"}, 1},
		{"negative cost", limit.Request{Key: "k", Cost: -1, Limits: ok}, 1},
		{"want zero", limit.Request{Key: "k", Limits: ok}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _, err := s.TakeUpTo(context.Background(), &tc.req, tc.want)
			if err == nil || g != 0 {
				t.Errorf("got granted %d, error %v; want 0 and an error", g, err)
			}
		})
	}
}

func perSecond(name string, rate, burst int64) limit.Limit {
	return limit.Limit{Name: name, Count: rate, Period: time.Second, Burst: burst}
}

func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("%s/%d", t.Name(), rand.Uint64())
}

func takeUpTo(t *testing.T, s Granter, req *limit.Request, want int64) (int64, limit.Decision) {
	t.Helper()
	g, d, err := s.TakeUpTo(context.Background(), req, want)
	if err != nil {
		t.Fatalf("TakeUpTo(%q, want %d): %v", req.Key, want, err)
	}
	return g, d
}

func testGrants(t *testing.T, newStore Factory) {
	for _, tc := range []struct {
		name      string
		limits    []limit.Limit
		spent     int64 // tokens taken one by one first
		cost      int64
		want      int64
		granted   int64
		allowed   bool
		remaining int64
		retry     time.Duration
	}{
		{name: "full bucket gives all asked", limits: []limit.Limit{perSecond("s", 10, 10)},
			want: 4, granted: 4, allowed: true, remaining: 6},
		{name: "asking past the burst gives the burst", limits: []limit.Limit{perSecond("s", 10, 10)},
			want: 50, granted: 10, allowed: true, remaining: 0},
		{name: "nearly empty bucket gives what is left", limits: []limit.Limit{perSecond("s", 10, 10)},
			spent: 8, want: 5, granted: 2, allowed: true, remaining: 0},
		{name: "empty bucket refuses with the wait for one token", limits: []limit.Limit{perSecond("s", 10, 10)},
			spent: 10, want: 5, granted: 0, allowed: false, remaining: 0, retry: 100 * time.Millisecond},
		{name: "tightest limit decides", limits: []limit.Limit{perSecond("s", 10, 10), {Name: "m", Count: 4, Period: time.Minute}},
			want: 6, granted: 4, allowed: true, remaining: 0},
		{name: "want below cost means cost", limits: []limit.Limit{perSecond("s", 10, 10)},
			cost: 3, want: 1, granted: 3, allowed: true, remaining: 7},
		{name: "fewer left than the cost takes nothing", limits: []limit.Limit{perSecond("s", 10, 10)},
			spent: 8, cost: 3, want: 5, granted: 0, allowed: false, remaining: 2, retry: 100 * time.Millisecond},
		{name: "cost fits, extra is partial", limits: []limit.Limit{perSecond("s", 10, 10)},
			spent: 5, cost: 3, want: 8, granted: 5, allowed: true, remaining: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := limittest.NewClock(start)
			s := newStore(t, clk.Now)
			key := uniqueKey(t)
			for range tc.spent {
				if g, _ := takeUpTo(t, s, &limit.Request{Key: key, Limits: tc.limits}, 1); g != 1 {
					t.Fatalf("spending token: granted %d, want 1", g)
				}
			}
			g, d := takeUpTo(t, s, &limit.Request{Key: key, Cost: tc.cost, Limits: tc.limits}, tc.want)
			if g != tc.granted || d.Allowed != tc.allowed || d.Remaining != tc.remaining || d.RetryAfter != tc.retry {
				t.Errorf("got granted %d allowed %v remaining %d retry %v, want granted %d allowed %v remaining %d retry %v",
					g, d.Allowed, d.Remaining, d.RetryAfter, tc.granted, tc.allowed, tc.remaining, tc.retry)
			}
		})
	}
}

func testRefill(t *testing.T, newStore Factory) {
	clk := limittest.NewClock(start)
	s := newStore(t, clk.Now)
	req := &limit.Request{Key: uniqueKey(t), Limits: []limit.Limit{perSecond("s", 10, 10)}}
	if g, _ := takeUpTo(t, s, req, 10); g != 10 {
		t.Fatalf("full bucket of 10: granted %d, want 10", g)
	}
	clk.Advance(350 * time.Millisecond)
	if g, _ := takeUpTo(t, s, req, 10); g != 3 {
		t.Errorf("350ms after emptying a 10/s bucket: granted %d, want 3", g)
	}
}

func testConcurrent(t *testing.T, newStore Factory) {
	clk := limittest.NewClock(start)
	s := newStore(t, clk.Now)
	req := limit.Request{Key: uniqueKey(t), Limits: []limit.Limit{perSecond("s", 1, 100), {Name: "m", Count: 1000, Period: time.Minute}}}
	var granted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			r := req
			for range 10 {
				g, _, err := s.TakeUpTo(context.Background(), &r, 7)
				if err != nil {
					t.Error(err)
					return
				}
				granted.Add(g)
			}
		})
	}
	wg.Wait()
	if got := granted.Load(); got != 100 {
		t.Errorf("80 concurrent grants of up to 7 on a burst of 100 with the clock stopped: %d granted in all, want exactly 100", got)
	}
}

// testMatchesModel drives random grants through the store and through
// limit.Evaluate on plain memory, for every algorithm, and requires the same
// grant and decision at every step.
func testMatchesModel(t *testing.T, newStore Factory) {
	for _, alg := range limit.Algorithms {
		l := limit.Limit{Name: "a", Count: 9, Period: time.Second, Burst: 12, Algorithm: alg}
		if l.Validate() != nil {
			continue // not implemented yet: nothing to compare
		}
		t.Run(string(alg), func(t *testing.T) {
			clk := limittest.NewClock(start)
			s := newStore(t, clk.Now)
			rng := rand.New(rand.NewPCG(3, 4))
			key := uniqueKey(t)
			limits := []limit.Limit{l, {Name: "m", Count: 40, Period: time.Minute}, {Name: "t", Count: 3, Period: 250 * time.Millisecond, Burst: 5}}
			m := model{}
			for step := range 300 {
				clk.Advance(time.Duration(rng.IntN(300)) * time.Millisecond)
				req := &limit.Request{Key: key, Cost: int64(1 + rng.IntN(2)), Limits: limits[:1+rng.IntN(len(limits))]}
				want := int64(1 + rng.IntN(8))
				wg, wd := m.takeUpTo(clk.Now().UnixMilli(), req, want)
				g, d := takeUpTo(t, s, req, want)
				if g != wg || d != wd {
					t.Fatalf("step %d (cost %d, want %d, %d limits): store granted %d %+v, model granted %d %+v",
						step, req.EffectiveCost(), want, len(req.Limits), g, d, wg, wd)
				}
			}
		})
	}
}

// model is the reference: every limit's free tokens read at once, the
// smallest granted, all by limit.Evaluate over a map.
type model map[string]limit.State

func (m model) eval(now int64, req *limit.Request, cost int64) []limit.Outcome {
	outs := make([]limit.Outcome, len(req.Limits))
	for i := range req.Limits {
		st := m[req.Limits[i].BucketID()]
		outs[i] = limit.Evaluate(&req.Limits[i], &st, now, cost)
	}
	return outs
}

func (m model) takeUpTo(now int64, req *limit.Request, want int64) (int64, limit.Decision) {
	cost := req.EffectiveCost()
	grant := max(want, cost)
	for _, o := range m.eval(now, req, grant) {
		if !o.Allowed {
			grant = min(grant, o.Remaining)
		}
	}
	if grant >= cost {
		outs := m.eval(now, req, grant)
		if d := limit.Decide(outs); d.Allowed {
			for i := range req.Limits {
				m[req.Limits[i].BucketID()] = outs[i].Next
			}
			return grant, d
		}
	}
	outs := m.eval(now, req, cost)
	d := limit.Decide(outs)
	if !d.Allowed {
		return 0, d
	}
	for i := range req.Limits {
		m[req.Limits[i].BucketID()] = outs[i].Next
	}
	return cost, d
}
