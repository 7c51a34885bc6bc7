package limittest

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// OwnClockFactory returns an empty store that reads its own clock: real
// time, as in production (Redis's, for the Redis store).
type OwnClockFactory func(t *testing.T) limit.Store

// RunOwnClock runs the conformance suite against stores on their own
// clocks, so that the paths a test clock bypasses (a clock read from
// Redis, or from a bucket's expiry) are held to it too.
//
// Real time passes between two takes, by an amount the test cannot know,
// and on a loaded machine it may be long. So these cases use limits that
// refill in hours or days, which no pause between takes can change, and
// wait for a refill with real sleeps of a few tens of milliseconds, checking
// only what holds however long the sleep overshoots. The cases of Run that
// set the clock to the millisecond are skipped in this run alone, each
// with its reason; Run keeps them.
func RunOwnClock(t *testing.T, newStore OwnClockFactory) {
	t.Run("BurstThenRefuse", func(t *testing.T) { ownBurstThenRefuse(t, newStore) })
	t.Run("Refill", func(t *testing.T) { ownRefill(t, newStore) })
	t.Run("AllOrNothing", func(t *testing.T) { ownAllOrNothing(t, newStore) })
	t.Run("Cost", func(t *testing.T) { ownCost(t, newStore) })
	t.Run("KeysIsolated", func(t *testing.T) { ownKeysIsolated(t, newStore) })
	t.Run("Concurrent", func(t *testing.T) { ownConcurrent(t, newStore) })
	t.Run("Shadow", func(t *testing.T) { ownShadow(t, newStore) })
	for _, c := range []struct{ name, why string }{
		{"MatchesModel", "it compares each decision with the model at the instant the store decided, which only a settable clock tells the test"},
		{"Windows", "it steps the clock to window boundaries to the millisecond"},
		{"MixedAllOrNothing", "it steps the clock to the millisecond between takes"},
		{"ConcurrentAlgorithms", "its limits refill within the test's run time, so the exact count it checks would depend on the machine's speed"},
		{"MatchesModelMixed", "it compares each decision with the model at the instant the store decided, which only a settable clock tells the test"},
		{"RateChange", "it checks refills to the millisecond after a rate change"},
		{"MatchesModelShadow", "it compares each decision with the model at the instant the store decided, which only a settable clock tells the test"},
	} {
		t.Run(c.name, func(t *testing.T) { t.Skip("on the store's own clock: " + c.why) })
	}
}

// ownBurstThenRefuse: every algorithm, fresh and then existing, on limits
// no pause can refill: the burst passes with exact counts left, the next
// request is refused with a wait within the limit's period.
func ownBurstThenRefuse(t *testing.T, newStore OwnClockFactory) {
	s := newStore(t)
	for _, alg := range limit.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			// A day's window starts at midnight UTC; a run that crosses it
			// is a few milliseconds in a day.
			l := limit.Limit{Name: "d", Count: 20, Period: 24 * time.Hour, Algorithm: alg}
			req := &limit.Request{Key: uniqueKey(t, "k"), Limits: []limit.Limit{l}}
			for i := range 20 {
				d := take(t, s, req)
				if !d.Allowed || d.Remaining != int64(19-i) {
					t.Fatalf("request %d of a burst of 20: allowed %v remaining %d, want allowed with %d left", i+1, d.Allowed, d.Remaining, 19-i)
				}
				if d.ResetAfter <= 0 || d.ResetAfter > 2*l.Period {
					t.Fatalf("request %d: reset after %v, want within (0, %v]", i+1, d.ResetAfter, 2*l.Period)
				}
			}
			d := take(t, s, req)
			if d.Allowed || d.Remaining != 0 {
				t.Fatalf("request 21 of a burst of 20: allowed %v remaining %d, want refused with 0 left", d.Allowed, d.Remaining)
			}
			if d.RetryAfter <= 0 || d.RetryAfter > 2*l.Period {
				t.Errorf("request 21: retry after %v, want within (0, %v]", d.RetryAfter, 2*l.Period)
			}
		})
	}
}

// ownRefill waits, for real, as long as a refused request was told to,
// and finds the token back; then the bucket of one is empty again.
func ownRefill(t *testing.T, newStore OwnClockFactory) {
	s := newStore(t)
	for _, alg := range []limit.Algorithm{limit.TokenBucket, limit.GCRA} {
		t.Run(string(alg), func(t *testing.T) {
			// One token every 40 ms, and a request a take at a time: a
			// take slower than 40 ms on a loaded machine refills early,
			// so the test waits for a refusal rather than expecting one.
			req := &limit.Request{Key: uniqueKey(t, "k"), Limits: []limit.Limit{{Name: "t", Count: 1, Period: 40 * time.Millisecond, Algorithm: alg}}}
			var d limit.Decision
			for range 100 {
				if d = take(t, s, req); !d.Allowed {
					break
				}
			}
			if d.Allowed {
				t.Fatal("100 requests on one token per 40ms: all allowed, want a refusal")
			}
			if d.RetryAfter <= 0 || d.RetryAfter > 40*time.Millisecond {
				t.Fatalf("refused: retry after %v, want within (0, 40ms]", d.RetryAfter)
			}
			time.Sleep(d.RetryAfter + 10*time.Millisecond)
			if d := take(t, s, req); !d.Allowed {
				t.Fatalf("after the retry wait: refused (%+v), want the token back", d)
			}
		})
	}
}

// ownAllOrNothing: a refusal by one limit takes nothing from the other.
func ownAllOrNothing(t *testing.T, newStore OwnClockFactory) {
	s := newStore(t)
	key := uniqueKey(t, "k")
	day := limit.Limit{Name: "d", Count: 100, Period: 24 * time.Hour}
	both := &limit.Request{Key: key, Limits: []limit.Limit{{Name: "h", Count: 5, Period: time.Hour}, day}}
	for i := range 15 {
		d := take(t, s, both)
		if d.Allowed != (i < 5) || !d.Allowed && d.Index != 0 {
			t.Fatalf("request %d on 5 an hour and 100 a day: allowed %v by limit %d, want allowed %v (refused by limit 0)", i+1, d.Allowed, d.Index, i < 5)
		}
	}
	if d := take(t, s, &limit.Request{Key: key, Limits: []limit.Limit{day}}); d.Remaining != 94 {
		t.Errorf("day limit after 5 allowed and 10 refused: remaining %d, want 94 (refusals take nothing)", d.Remaining)
	}
}

// ownCost: a cost is taken whole or not at all, and one above a limit's
// capacity is refused for good, by every algorithm.
func ownCost(t *testing.T, newStore OwnClockFactory) {
	s := newStore(t)
	for _, alg := range limit.Algorithms {
		l := limit.Limit{Name: "c", Count: 12, Period: 24 * time.Hour, Algorithm: alg}
		req := &limit.Request{Key: uniqueKey(t, string(alg)), Cost: 13, Limits: []limit.Limit{l}}
		if d := take(t, s, req); d.Allowed || d.RetryAfter != limit.Never || d.Remaining != 12 {
			t.Errorf("%s: cost 13 on a capacity of 12: allowed %v retry %v remaining %d, want refused, Never, 12 left", alg, d.Allowed, d.RetryAfter, d.Remaining)
		}
		req.Cost = 5
		for i, want := range []int64{7, 2, -1} {
			d := take(t, s, req)
			if d.Allowed != (want >= 0) || want >= 0 && d.Remaining != want {
				t.Errorf("%s: cost-5 request %d on a capacity of 12: allowed %v remaining %d, want %d left (-1: refused)", alg, i+1, d.Allowed, d.Remaining, want)
			}
		}
	}
}

// ownKeysIsolated: no key reaches another's bucket, however it is spelt.
func ownKeysIsolated(t *testing.T, newStore OwnClockFactory) {
	s := newStore(t)
	prefix := uniqueKey(t, "")
	l := []limit.Limit{{Name: "h", Count: 1, Period: time.Hour, Burst: 2}}
	for _, k := range hostileKeys {
		take(t, s, &limit.Request{Key: prefix + k, Limits: l})
	}
	for _, k := range hostileKeys {
		if d := take(t, s, &limit.Request{Key: prefix + k, Limits: l}); !d.Allowed || d.Remaining != 0 {
			t.Errorf("key %q: second request allowed %v remaining %d, want allowed with 0 left (another key spent its tokens?)", k, d.Allowed, d.Remaining)
		}
	}
}

// ownConcurrent: concurrent requests admit exactly the burst.
func ownConcurrent(t *testing.T, newStore OwnClockFactory) {
	s := newStore(t)
	req := limit.Request{Key: uniqueKey(t, "k"), Limits: []limit.Limit{{Name: "h", Count: 1, Period: time.Hour, Burst: 50}, {Name: "d", Count: 1000, Period: 24 * time.Hour}}}
	if got := admitConcurrently(t, s, req, 16, 20); got != 50 {
		t.Errorf("320 concurrent requests on a burst of 50 refilling one an hour: %d admitted, want exactly 50", got)
	}
}

// ownShadow: shadow limits beside an enforced one of the same name never
// refuse, count on buckets of their own, and take the cost only when they
// all allow it.
func ownShadow(t *testing.T, newStore OwnClockFactory) {
	s := newStore(t)
	key := uniqueKey(t, "k")
	enforced := limit.Limit{Name: "h", Count: 1, Period: time.Hour, Burst: 3}
	tight := limit.Limit{Name: "h", Count: 1, Period: time.Hour, Shadow: true}
	other := limit.Limit{Name: "d", Count: 2, Period: 24 * time.Hour, Shadow: true}
	req := &limit.Request{Key: key, Limits: []limit.Limit{enforced, tight, other}}
	for i, w := range []struct {
		allowed         bool
		remaining       int64
		shadowAllowed   bool
		shadowRemaining int64
	}{
		{true, 2, true, 0},   // both shadow limits take
		{true, 1, false, 0},  // h (shadow) would refuse, so d takes nothing either
		{true, 0, false, 0},  // again; h (enforced) is empty now
		{false, 0, false, 0}, // refused by h, and h (shadow) would have too
	} {
		d := take(t, s, req)
		if d.Allowed != w.allowed || d.Remaining != w.remaining || d.Index != 0 || !d.Shadow.Checked ||
			d.Shadow.Allowed != w.shadowAllowed || d.Shadow.Index != 1 || d.Shadow.Remaining != w.shadowRemaining ||
			!w.shadowAllowed && (d.Shadow.RetryAfter <= 0 || d.Shadow.RetryAfter > time.Hour) {
			t.Fatalf("request %d: got %+v, want allowed %v with %d left at index 0, shadow checked, allowed %v with %d left at index 1 (a wait within an hour when refused)",
				i+1, d, w.allowed, w.remaining, w.shadowAllowed, w.shadowRemaining)
		}
	}
	// d took only the first request's token: one left, then none.
	alone := &limit.Request{Key: key, Limits: []limit.Limit{other}}
	for i, want := range []bool{true, false} {
		if d := take(t, s, alone); !d.Allowed || d.Index != -1 || !d.Shadow.Checked || d.Shadow.Allowed != want || d.Shadow.Index != 0 {
			t.Fatalf("the shadow limit d alone, take %d: got %+v, want allowed, index -1, shadow allowed %v at index 0", i+1, d, want)
		}
	}
}
