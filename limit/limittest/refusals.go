package limittest

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// RunRefusals runs the cases of limits whose refusals count
// (limit.Limit.CountRefusals) and of limit.Request.Refused against the
// stores newStore makes: a store that honours them passes. memstore and
// redisstore do; a store that ignores them answers as if refusals were
// free, and fails.
func RunRefusals(t *testing.T, newStore Factory) {
	for _, alg := range []limit.Algorithm{limit.TokenBucket, limit.GCRA} {
		t.Run(string(alg), func(t *testing.T) {
			t.Run("IgnoringClientStaysOut", func(t *testing.T) { testIgnoringClientStaysOut(t, newStore, alg) })
			t.Run("WaitingClientPasses", func(t *testing.T) { testWaitingClientPasses(t, newStore, alg) })
			t.Run("RefusedCharged", func(t *testing.T) { testRefusedCharged(t, newStore, alg) })
		})
	}
	t.Run("ChargeOutlastsAnotherLimit", func(t *testing.T) { testChargeOutlastsAnotherLimit(t, newStore) })
}

// A request refused by two limits, a token bucket whose refusals count (10
// a second, bursts of 1) and a fixed window (1 per 150 ms): the window's
// wait is the longer before the charge, the bucket's after it. The answer
// waits the longest of every limit's wait after the charge, so a client
// that waits RetryAfter passes rather than being refused (and charged)
// again.
func testChargeOutlastsAnotherLimit(t *testing.T, newStore Factory) {
	clk := NewClock(start)
	s := newStore(t, clk.Now)
	b := perSecond("b", 10, 1)
	b.CountRefusals = true
	w := limit.Limit{Name: "w", Count: 1, Period: 150 * time.Millisecond, Algorithm: limit.FixedWindow}
	req := &limit.Request{Key: uniqueKey(t, "k"), Limits: []limit.Limit{b, w}}
	if d := take(t, s, req); !d.Allowed {
		t.Fatalf("a fresh key: %+v, want allowed", d)
	}
	clk.Advance(10 * time.Millisecond)
	d := take(t, s, req)
	if d.Allowed || d.Index != 0 {
		t.Fatalf("10 ms later: %+v, want refused, the charged bucket deciding", d)
	}
	if r, ok := d.Result(0); ok && r.RetryAfter != d.RetryAfter {
		t.Errorf("the bucket's own wait %v, the answer's %v: want the same", r.RetryAfter, d.RetryAfter)
	}
	clk.Advance(d.RetryAfter)
	if d2 := take(t, s, req); !d2.Allowed {
		t.Errorf("after waiting RetryAfter (%v): %+v, want allowed", d.RetryAfter, d2)
	}
}

// counting is 10 a second in bursts of 10 whose refusals count: a token
// refills every 100 ms.
func counting(alg limit.Algorithm) limit.Limit {
	l := perSecond("s", 10, 10)
	l.Algorithm, l.CountRefusals = alg, true
	return l
}

// drained returns a request of cost 1 on a fresh key of l, after taking
// its whole burst at the clock's time.
func drained(t *testing.T, s limit.Store, l limit.Limit) *limit.Request {
	t.Helper()
	req := &limit.Request{Key: uniqueKey(t, "k"), Cost: l.EffectiveBurst(), Limits: []limit.Limit{l}}
	if d := take(t, s, req); !d.Allowed {
		t.Fatalf("taking the whole burst of a fresh key: %+v, want allowed", d)
	}
	req.Cost = 1
	return req
}

// A client that ignores 429 and retries every 50 ms, twice the rate a
// token refills, is refused every time for two seconds, where with free
// refusals it would pass every other try; once it stops and waits the
// last refusal's RetryAfter, it passes. The charge on refusal is the
// store's: no other call is made.
func testIgnoringClientStaysOut(t *testing.T, newStore Factory, alg limit.Algorithm) {
	clk := NewClock(start)
	s := newStore(t, clk.Now)
	req := drained(t, s, counting(alg))
	var last limit.Decision
	for i := range 40 {
		clk.Advance(50 * time.Millisecond)
		last = take(t, s, req)
		if last.Allowed {
			t.Fatalf("retry %d, %v after draining, every 50 ms: allowed, want refused (refusals count)", i+1, time.Duration(i+1)*50*time.Millisecond)
		}
		if last.RetryAfter <= 0 || last.RetryAfter > 2100*time.Millisecond {
			t.Fatalf("retry %d: RetryAfter %v, want from 1 ms to one burst's refill and a token's (2.1s)", i+1, last.RetryAfter)
		}
	}
	clk.Advance(last.RetryAfter)
	if d := take(t, s, req); !d.Allowed {
		t.Errorf("after stopping and waiting the last RetryAfter %v: %+v, want allowed", last.RetryAfter, d)
	}
}

// A client that waits a refusal's RetryAfter passes, and one that comes
// back a millisecond early is refused (and charged again).
func testWaitingClientPasses(t *testing.T, newStore Factory, alg limit.Algorithm) {
	clk := NewClock(start)
	s := newStore(t, clk.Now)
	req := drained(t, s, counting(alg))
	d := take(t, s, req)
	if d.Allowed || d.RetryAfter != 200*time.Millisecond {
		t.Fatalf("a refusal of an empty bucket that counts: %+v, want refused with 200ms to wait (a token of debt, then the token)", d)
	}
	clk.Advance(d.RetryAfter - time.Millisecond)
	if early := take(t, s, req); early.Allowed {
		t.Fatalf("1 ms before RetryAfter: allowed, want refused")
	}
	clk.Advance(300 * time.Millisecond) // the early retry's own charge: a token more
	if d := take(t, s, req); !d.Allowed {
		t.Errorf("after waiting out both refusals' charges: %+v, want allowed", d)
	}
}

// Request.Refused is charged to the limits that count refusals before the
// request is decided, and to no other limit.
func testRefusedCharged(t *testing.T, newStore Factory, alg limit.Algorithm) {
	clk := NewClock(start)
	s := newStore(t, clk.Now)
	free := perSecond("m", 100, 100)
	free.Algorithm = alg
	req := &limit.Request{Key: uniqueKey(t, "k"), Cost: 1, Refused: 5, Limits: []limit.Limit{counting(alg), free}}
	d := take(t, s, req)
	if !d.Allowed {
		t.Fatalf("a fresh key with 5 refused to charge and 1 to take: %+v, want allowed", d)
	}
	if r, _ := d.Result(0); r.Remaining != 4 {
		t.Errorf("counting limit: remaining %d, want 4 (10 less 5 charged and 1 taken)", r.Remaining)
	}
	if r, _ := d.Result(1); r.Remaining != 99 {
		t.Errorf("limit whose refusals are free: remaining %d, want 99 (only the take)", r.Remaining)
	}
	// More refused than the burst: at most one burst of debt.
	req.Refused = 1000
	d = take(t, s, req)
	if d.Allowed || d.RetryAfter != 1100*time.Millisecond {
		t.Errorf("1000 refused on 4 left: %+v, want refused with 1.1s to wait (a burst of debt, then the token)", d)
	}
}
