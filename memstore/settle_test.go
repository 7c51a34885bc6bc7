package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/limit/limittest"
	"github.com/sluice-rl/sluice/memstore"
)

// TestSettle takes an estimate, settles to the true cost, and checks what
// the key has left: the rest taken exactly, debt when it was short, and
// the unused part given back never above the burst.
func TestSettle(t *testing.T) {
	ctx := context.Background()
	tb := limit.Limit{Name: "tb", Count: 10, Period: time.Second, Burst: 10}
	gc := limit.Limit{Name: "gcra", Count: 10, Period: time.Second, Burst: 10, Algorithm: limit.GCRA}
	tests := []struct {
		name      string
		lim       limit.Limit
		estimate  int64
		actual    int64
		wantLeft  int64 // tokens a take finds right after
		wantDebt  int64
		wantAfter time.Duration // how long until one token passes again; 0: at once
	}{
		{"rest taken", tb, 2, 5, 5, 0, 0},
		{"unused given back", tb, 6, 1, 9, 0, 0},
		{"all given back, never above the burst", tb, 3, 0, 10, 0, 0},
		{"debt", tb, 4, 15, 0, 5, 600 * time.Millisecond},
		{"debt kept to one burst", tb, 4, 40, 0, 10, 1100 * time.Millisecond},
		{"gcra rest taken", gc, 2, 5, 5, 0, 0},
		{"gcra unused given back", gc, 6, 1, 9, 0, 0},
		{"gcra debt", gc, 4, 15, 0, 5, 600 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := limittest.NewClock(time.Unix(1_700_000_000, 0))
			s := memstore.New(memstore.Config{Now: clock.Now})
			req := &limit.Request{Key: "k:a", Cost: tt.estimate, Limits: []limit.Limit{tt.lim}}
			if d, err := s.Take(ctx, req); err != nil || !d.Allowed {
				t.Fatalf("estimate: %+v, %v", d, err)
			}
			got, err := s.Settle(ctx, req, tt.actual-tt.estimate)
			if err != nil {
				t.Fatal(err)
			}
			if got.Debt != tt.wantDebt {
				t.Errorf("got debt %d, want %d", got.Debt, tt.wantDebt)
			}
			left := peekLeft(t, s, tt.lim)
			if left != tt.wantLeft {
				t.Errorf("got %d tokens left, want %d", left, tt.wantLeft)
			}
			if tt.wantAfter > 0 {
				clock.Advance(tt.wantAfter - time.Millisecond)
				if d, _ := s.Take(ctx, &limit.Request{Key: "k:a", Limits: []limit.Limit{tt.lim}}); d.Allowed {
					t.Errorf("a token passed %v after the settle, before the debt was paid", tt.wantAfter-time.Millisecond)
				}
				clock.Advance(time.Millisecond)
				if d, _ := s.Take(ctx, &limit.Request{Key: "k:a", Limits: []limit.Limit{tt.lim}}); !d.Allowed {
					t.Errorf("no token passed %v after the settle: got %+v", tt.wantAfter, d)
				}
			}
		})
	}
}

// peekLeft reads a limit's tokens without taking: a take of more than it
// ever holds is refused and changes nothing.
func peekLeft(t *testing.T, s *memstore.Store, l limit.Limit) int64 {
	t.Helper()
	d, err := s.Take(context.Background(), &limit.Request{Key: "k:a", Cost: l.EffectiveBurst() + 1, Limits: []limit.Limit{l}})
	if err != nil || d.Allowed {
		t.Fatalf("peek: %+v, %v", d, err)
	}
	return d.Remaining
}

// TestSettleWindows settles the window algorithms: the rest taken and
// the unused part given back exactly, the count never above the limit
// (what did not fit is reported, not kept) nor below zero.
func TestSettleWindows(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.SlidingLog} {
		t.Run(string(alg), func(t *testing.T) {
			s := memstore.New(memstore.Config{Now: limittest.NewClock(time.Unix(1_700_000_000, 0)).Now})
			l := limit.Limit{Name: "w", Count: 10, Period: time.Minute, Algorithm: alg}
			req := &limit.Request{Key: "k:a", Cost: 2, Limits: []limit.Limit{l}}
			if d, err := s.Take(ctx, req); err != nil || !d.Allowed {
				t.Fatalf("estimate: %+v, %v", d, err)
			}
			for _, st := range []struct{ delta, wantDebt, wantLeft int64 }{
				{+3, 0, 5},   // the rest taken
				{-1, 0, 6},   // the unused part given back
				{+9, 3, 0},   // never above the limit
				{+1, 1, 0},   // a full window takes nothing
				{-20, 0, 10}, // never below zero
			} {
				got, err := s.Settle(ctx, req, st.delta)
				if err != nil {
					t.Fatal(err)
				}
				if left := peekLeft(t, s, l); got.Debt != st.wantDebt || left != st.wantLeft {
					t.Errorf("settle %+d: debt %d, %d left; want debt %d, %d left", st.delta, got.Debt, left, st.wantDebt, st.wantLeft)
				}
			}
		})
	}
}
