package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/redisstore"
)

// TestSettle settles estimates up and down, into debt and back (a window:
// up to its limit and down to zero), for every algorithm, on a standalone
// server and a cluster, and requires every answer and debt memstore's
// Settle gives on the same clock.
func TestSettle(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	ctx := context.Background()
	for _, tg := range []struct {
		name  string
		addrs []string
	}{{"Standalone", []string{standalone.Addr()}}, {"Cluster", cluster.Addrs()}} {
		t.Run(tg.name, func(t *testing.T) {
			red := newStore(t, redisstore.Config{Addrs: tg.addrs, Now: clock})
			mem := memstore.New(memstore.Config{Now: clock})
			for _, alg := range limit.Algorithms {
				req := &limit.Request{Key: uniqueKey(t), Cost: 3, Limits: []limit.Limit{
					{Name: "a", Count: 10, Period: time.Second, Algorithm: alg},
					{Name: "b", Count: 100, Period: time.Minute, Burst: 20, Algorithm: alg},
				}}
				// Each step: a take of the estimate (3), then a settle by
				// delta, then the clock moves on.
				for step, st := range []struct {
					delta int64
					wait  time.Duration
				}{{+4, 0}, {-2, 0}, {-3, 0}, {+9, 0}, {+5, 100 * time.Millisecond}, {-10, time.Second}, {+20, 1500 * time.Millisecond}, {0, 0}} {
					got, want := take(t, red, req), take(t, mem, req)
					if got != want {
						t.Fatalf("%s step %d take: redis %+v, memory %+v", alg, step, got, want)
					}
					if !got.Allowed {
						now = now.Add(st.wait)
						continue
					}
					rs, err := red.Settle(ctx, req, st.delta)
					if err != nil {
						t.Fatalf("%s step %d: redis: %v", alg, step, err)
					}
					ms, err := mem.Settle(ctx, req, st.delta)
					if err != nil {
						t.Fatalf("%s step %d: memory: %v", alg, step, err)
					}
					if rs != ms {
						t.Fatalf("%s step %d settle %+d: redis %+v, memory %+v", alg, step, st.delta, rs, ms)
					}
					now = now.Add(st.wait)
				}
			}
		})
	}
}

// TestSettleDebtOnRedisClock settles into debt under Redis's own clock
// (no test clock): the bucket refuses at once, says it holds nothing, and
// its value tells the time by its expiry as take.lua reads it.
func TestSettleDebtOnRedisClock(t *testing.T) {
	ctx := context.Background()
	red := newStore(t, redisstore.Config{Addrs: []string{standalone.Addr()}})
	req := &limit.Request{Key: uniqueKey(t), Cost: 4, Limits: []limit.Limit{{Name: "a", Count: 10, Period: time.Second}}}
	if d := take(t, red, req); !d.Allowed {
		t.Fatalf("estimate refused: %+v", d)
	}
	st, err := red.Settle(ctx, req, 56) // 60 of a bucket of 10: 50 short, kept to one burst, 10
	if err != nil {
		t.Fatal(err)
	}
	if st.Debt != 10 {
		t.Errorf("got debt %d, want 10, one burst", st.Debt)
	}
	d := take(t, red, &limit.Request{Key: req.Key, Limits: req.Limits})
	if d.Allowed || d.Remaining != 0 {
		t.Errorf("a take right after: got %+v, want refused with nothing left", d)
	}
}

// TestSettleWindowOnRedisClock settles sliding and fixed windows under
// Redis's own clock: the rest taken and the unused part given back
// exactly, never above the limit nor below zero, and a sliding window's
// state still expires when it stops weighing, its window's start plus two
// periods, which the next take tells the time by.
func TestSettleWindowOnRedisClock(t *testing.T) {
	ctx := context.Background()
	red := newStore(t, redisstore.Config{Addrs: []string{standalone.Addr()}})
	for _, alg := range []limit.Algorithm{limit.SlidingWindow, limit.FixedWindow, limit.SlidingLog} {
		t.Run(string(alg), func(t *testing.T) {
			l := limit.Limit{Name: "w", Count: 10, Period: time.Hour, Algorithm: alg}
			req := &limit.Request{Key: uniqueKey(t), Cost: 2, Limits: []limit.Limit{l}}
			left := func() int64 {
				t.Helper()
				d := take(t, red, &limit.Request{Key: req.Key, Cost: 11, Limits: req.Limits})
				return d.Remaining
			}
			take(t, red, req)
			for _, st := range []struct{ delta, wantDebt, wantLeft int64 }{
				{+3, 0, 5},   // the rest taken
				{-1, 0, 6},   // the unused part given back
				{+9, 3, 0},   // never above the limit
				{-20, 0, 10}, // never below zero
			} {
				got, err := red.Settle(ctx, req, st.delta)
				if err != nil {
					t.Fatal(err)
				}
				if got.Debt != st.wantDebt || left() != st.wantLeft {
					t.Errorf("settle %+d: debt %d, %d left; want debt %d, %d left", st.delta, got.Debt, left(), st.wantDebt, st.wantLeft)
				}
			}
			if alg != limit.SlidingWindow {
				return
			}
			rkey := red.RedisKey(req.Key, &l)
			take(t, red, req)
			red.Settle(ctx, req, 1)
			ws := readBucket(t, rkey).credits
			if at := redisInt(t, "PEXPIRETIME", rkey); at != ws+2*time.Hour.Milliseconds() {
				t.Errorf("after a settle, expires at %d, want the window's start %d plus two periods", at, ws)
			}
		})
	}
}
