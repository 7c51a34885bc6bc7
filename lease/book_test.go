package lease

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

func TestBookDemand(t *testing.T) {
	for _, tc := range []struct {
		name  string
		times []int64 // request times, ms
		want  int64   // demand after the last
	}{
		{"first request", []int64{0}, 1},
		{"same window adds up", []int64{0, 10, 20, 99}, 4},
		{"next window remembers the busier previous one", []int64{0, 10, 20, 99, 100}, 4},
		{"a skipped window forgets", []int64{0, 10, 20, 99, 250}, 1},
		{"current window overtakes", []int64{0, 100, 110, 120}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b book
			var got int64
			for _, at := range tc.times {
				got = b.seen(1_000_000+at, 100, 1)
			}
			if got != tc.want {
				t.Errorf("got demand %d, want %d", got, tc.want)
			}
		})
	}
}

func TestBookLease(t *testing.T) {
	var b book
	b.add(0, 10, 1000, limit.Decision{Allowed: true, Remaining: 50, ResetAfter: time.Second})
	for _, tc := range []struct {
		at, cost  int64
		ok        bool
		tokens    int64
		remaining int64
	}{
		{0, 1, true, 9, 59},
		{500, 4, true, 5, 55},
		{999, 6, false, 5, 55},
		{999, 5, true, 0, 50},
		{1000, 1, false, 0, 50},
	} {
		ok := b.spendUpTo(tc.at, tc.cost, tc.cost) > 0
		if ok != tc.ok || b.tokens != tc.tokens {
			t.Fatalf("spend %d at %dms: got ok %v with %d left, want ok %v with %d left", tc.cost, tc.at, ok, b.tokens, tc.ok, tc.tokens)
		}
		if ok {
			if d := b.leased(tc.at); d.Remaining != tc.remaining || !d.Allowed {
				t.Errorf("spend %d at %dms: got remaining %d, want %d", tc.cost, tc.at, d.Remaining, tc.remaining)
			}
		}
	}
	b.add(1500, 3, 2500, limit.Decision{Allowed: true})
	if b.spendUpTo(2499, 3, 3) == 0 || b.spendUpTo(2499, 1, 1) > 0 {
		t.Error("renewed lease of 3: want exactly 3 spendable before it expires")
	}
	b.add(3000, 4, 4000, limit.Decision{Allowed: true})
	if b.spendUpTo(4000, 1, 1) > 0 {
		t.Error("a lease is spendable at its expiry, want expired tokens dropped")
	}
	if got := b.takeDropped(); got != 4 {
		t.Errorf("got %d tokens dropped, want 4", got)
	}
}

func TestBookDeny(t *testing.T) {
	for _, tc := range []struct {
		name      string
		retry     time.Duration
		deniedFor int64
	}{
		{"retry time", 120 * time.Millisecond, 120},
		{"never: remembered for the ttl", limit.Never, 1000},
		{"no wait: nothing remembered", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b book
			b.deny(0, 2, 1000, limit.Decision{RetryAfter: tc.retry}, 0)
			for _, c := range []struct {
				at, cost int64
				want     bool
			}{
				{0, 2, tc.deniedFor > 0},
				{max(tc.deniedFor-1, 0), 3, tc.deniedFor > 0},
				{0, 1, false},
				{tc.deniedFor, 2, false},
			} {
				if got := b.refused(c.at, c.cost); got != c.want {
					t.Errorf("cost %d at %dms: got refused %v, want %v", c.cost, c.at, got, c.want)
				}
			}
		})
	}
}
