package limit

import (
	"math/rand/v2"
	"testing"
	"time"
)

// admission is one allowed request of a property run.
type admission struct{ at, cost int64 }

// checker drives one limit through requests as a store would, and checks
// after every answer what the limit's algorithm promises: the shape of the
// outcome, that RetryAfter and Remaining are exact, that the state may be
// dropped after its TTL, and that admissions never exceed the algorithm's
// definition.
type checker struct {
	l    Limit
	st   State
	hist []admission
}

// evaluate answers one request without storing anything.
func (c *checker) evaluate(t testing.TB, now, cost int64) Outcome {
	t.Helper()
	l := &c.l
	o := Evaluate(l, &c.st, now, cost)
	capacity := l.EffectiveBurst()
	if o.Remaining < 0 || o.Remaining > capacity {
		t.Fatalf("%v at %d cost %d: remaining %d, want 0 to %d", c.l, now, cost, o.Remaining, capacity)
	}
	if o.ResetAfter < 0 || o.TTL < 1 {
		t.Fatalf("%v at %d cost %d: reset %d TTL %d, want reset ≥ 0 and TTL ≥ 1", c.l, now, cost, o.ResetAfter, o.TTL)
	}
	switch {
	case o.Allowed && (o.RetryAfter != 0 || cost > capacity):
		t.Fatalf("%v at %d cost %d: allowed with retry %d over capacity %d", c.l, now, cost, o.RetryAfter, capacity)
	case !o.Allowed && cost > capacity && o.RetryAfter != -1:
		t.Fatalf("%v at %d cost %d over capacity %d: retry %d, want -1", c.l, now, cost, capacity, o.RetryAfter)
	case !o.Allowed && cost <= capacity:
		if o.RetryAfter < 1 {
			t.Fatalf("%v at %d cost %d: refused with retry %d, want at least 1", c.l, now, cost, o.RetryAfter)
		}
		if !Evaluate(l, &c.st, now+o.RetryAfter, cost).Allowed {
			t.Fatalf("%v at %d cost %d: refused with retry %d, but still refused then", c.l, now, cost, o.RetryAfter)
		}
		if Evaluate(l, &c.st, now+o.RetryAfter-1, cost).Allowed {
			t.Fatalf("%v at %d cost %d: refused with retry %d, but allowed 1ms sooner", c.l, now, cost, o.RetryAfter)
		}
	}
	// Remaining is exact: that many tokens fit now, one more does not.
	next := &c.st
	if o.Allowed {
		next = &o.Next
	}
	if r := o.Remaining; r > 0 && !Evaluate(l, next, now, r).Allowed {
		t.Fatalf("%v at %d cost %d: remaining %d, but a request of %d is refused", c.l, now, cost, r, r)
	}
	if r := o.Remaining + 1; r <= capacity && Evaluate(l, next, now, r).Allowed {
		t.Fatalf("%v at %d cost %d: remaining %d, but a request of %d is allowed", c.l, now, cost, r-1, r)
	}
	if o.Allowed {
		// After its TTL the state must read like no state at all.
		later, fresh := Evaluate(l, &o.Next, now+o.TTL, 1), Evaluate(l, &State{}, now+o.TTL, 1)
		later.Next, fresh.Next = State{}, State{}
		if later.Allowed != fresh.Allowed || later.Remaining != fresh.Remaining || later.ResetAfter != fresh.ResetAfter {
			t.Fatalf("%v at %d cost %d: TTL %d, but the state then reads %+v, not as empty %+v", c.l, now, cost, o.TTL, later, fresh)
		}
	}
	return o
}

// commit stores an allowed outcome and checks the admissions so far against
// the algorithm's definition.
func (c *checker) commit(t testing.TB, o Outcome, now, cost int64) {
	t.Helper()
	c.st = o.Next
	c.hist = append(c.hist, admission{now, cost})
	p, count := c.l.PeriodMillis(), c.l.Count
	h := c.hist
	switch c.l.Alg() {
	case TokenBucket, GCRA:
		// Over any interval ending now, at most burst + rate × its length.
		burst := c.l.EffectiveBurst()
		sum := int64(0)
		for j := len(h) - 1; j >= 0; j-- {
			sum += h[j].cost
			if sum*p > burst*p+count*(now-h[j].at) {
				t.Fatalf("%v: %d tokens admitted from %d to %d, more than burst %d + rate × %dms", c.l, sum, h[j].at, now, burst, now-h[j].at)
			}
		}
	case FixedWindow:
		if in := sumSince(h, windowStart(now, p)-1); in > count {
			t.Fatalf("%v: %d tokens admitted in the calendar window of %d, more than %d", c.l, in, now, count)
		}
	case SlidingLog:
		if in := sumSince(h, now-p); in > count {
			t.Fatalf("%v: %d tokens admitted in the %dms before %d, more than %d", c.l, in, p, now, count)
		}
	case SlidingWindow:
		ws := windowStart(now, p)
		cur := sumSince(h, ws-1)
		prev := sumSince(h, ws-p-1) - cur
		if cur > count || cur+ceilDiv(prev*(p-(now-ws)), p) > count {
			t.Fatalf("%v: at %d, %d tokens in this window and %d in the last, estimate over %d", c.l, now, cur, prev, count)
		}
	}
}

// sumSince adds the costs admitted after time after.
func sumSince(h []admission, after int64) int64 {
	sum := int64(0)
	for j := len(h) - 1; j >= 0 && h[j].at > after; j-- {
		sum += h[j].cost
	}
	return sum
}

// randomLimit returns a valid limit of algorithm alg, small enough that a
// few thousand requests roll its windows and refill its bucket many times.
func randomLimit(rng *rand.Rand, name string, alg Algorithm) Limit {
	periods := []time.Duration{time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 250 * time.Millisecond, time.Second, time.Minute}
	l := Limit{Name: name, Count: 1 + rng.Int64N(30), Period: periods[rng.IntN(len(periods))], Algorithm: alg}
	if rng.IntN(2) == 0 {
		l.Burst = 1 + rng.Int64N(60)
	}
	return l
}

// randomStep returns how far to move the clock and the cost of the next
// request: mostly small steps that keep a limit near its edge, sometimes
// long idles, and sometimes costs above any capacity.
func randomStep(rng *rand.Rand, period int64) (dt, cost int64) {
	switch r := rng.IntN(10); {
	case r < 3:
	case r < 9:
		dt = rng.Int64N(period/4 + 2)
	default:
		dt = rng.Int64N(3*period + 1)
	}
	cost = 1
	switch r := rng.IntN(10); {
	case r < 2:
		cost = 1 + rng.Int64N(8)
	case r == 2:
		cost = 1 + rng.Int64N(70)
	}
	return dt, cost
}

// TestNeverOverAdmits runs random requests, times and rule sets of one to
// three limits of mixed algorithms, and checks every invariant after each
// answer; see checker.
func TestNeverOverAdmits(t *testing.T) {
	for seed := range uint64(24) {
		rng := rand.New(rand.NewPCG(seed, 77))
		n := 1 + rng.IntN(3)
		cs := make([]*checker, n)
		// The first limit cycles through every algorithm; the others are random.
		for i := range cs {
			alg := Algorithms[int(seed)%len(Algorithms)]
			if i > 0 {
				alg = Algorithms[rng.IntN(len(Algorithms))]
			}
			cs[i] = &checker{l: randomLimit(rng, string(rune('a'+i)), alg)}
		}
		now := int64(t0) + rng.Int64N(1000)
		outs := make([]Outcome, n)
		admitted := 0
		for range 1500 {
			dt, cost := randomStep(rng, cs[0].l.PeriodMillis())
			now += dt
			all := true
			for i, c := range cs {
				outs[i] = c.evaluate(t, now, cost)
				all = all && outs[i].Allowed
			}
			d := Decide(outs)
			if d.Allowed != all {
				t.Fatalf("seed %d: Decide says allowed %v, but every limit allowed is %v", seed, d.Allowed, all)
			}
			if d.Allowed {
				admitted++
				for i, c := range cs {
					c.commit(t, outs[i], now, cost)
				}
			}
		}
		if admitted == 0 {
			t.Errorf("seed %d: nothing admitted in 1500 requests; the generator is broken", seed)
		}
	}
}

// TestGCRAMatchesTokenBucket drives GCRA and the token bucket with the same
// rate and burst through random sequences: every answer must be identical.
func TestGCRAMatchesTokenBucket(t *testing.T) {
	rates := []struct {
		count  int64
		period time.Duration
	}{
		{1, time.Millisecond}, {7, time.Second}, {3, 250 * time.Millisecond}, {10, time.Second},
		{1, time.Minute}, {999, time.Second}, {5000, time.Hour}, {1000, time.Minute}, {13, 17 * time.Millisecond},
	}
	for i, r := range rates {
		for _, burst := range []int64{0, 1, 5, 2 * r.count} {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(burst)))
			tb := Limit{Name: "s", Count: r.count, Period: r.period, Burst: burst}
			gc := tb
			gc.Algorithm = GCRA
			var tbState, gcState State
			now := int64(t0)
			p := tb.PeriodMillis()
			for step := range 800 {
				dt, cost := randomStep(rng, max(p/r.count, 4))
				now += dt
				a, b := Evaluate(&tb, &tbState, now, cost), Evaluate(&gc, &gcState, now, cost)
				if a.Allowed != b.Allowed || a.Remaining != b.Remaining || a.RetryAfter != b.RetryAfter ||
					a.ResetAfter != b.ResetAfter || a.TTL != b.TTL {
					t.Fatalf("%v step %d (at +%dms, cost %d): token bucket %+v, gcra %+v", gc, step, now-t0, cost, a, b)
				}
				if a.Allowed {
					tbState, gcState = a.Next, b.Next
				}
			}
		}
	}
}

// FuzzEvaluate feeds Evaluate arbitrary limits and request sequences: it must
// never panic, and every answer must keep the invariants checker checks.
func FuzzEvaluate(f *testing.F) {
	f.Add(uint8(0), uint32(10), uint32(1000), uint32(20), []byte{0, 1, 1, 0, 0, 5, 9, 0, 30})
	f.Add(uint8(1), uint32(3), uint32(1000), uint32(2), []byte{0, 0, 2, 1, 77, 1, 0, 0, 3})
	f.Add(uint8(2), uint32(10), uint32(1000), uint32(0), []byte{0, 0, 10, 1, 244, 1, 2, 0, 1})
	f.Add(uint8(3), uint32(5), uint32(1000), uint32(0), []byte{3, 231, 5, 0, 1, 5, 0, 0, 6})
	f.Add(uint8(4), uint32(3), uint32(1000), uint32(0), []byte{0, 100, 1, 0, 100, 2, 3, 0, 1})
	f.Fuzz(func(t *testing.T, alg uint8, count, period, burst uint32, steps []byte) {
		l := Limit{Name: "f", Count: int64(count), Period: time.Duration(period) * time.Millisecond,
			Burst: int64(burst), Algorithm: Algorithms[int(alg)%len(Algorithms)]}
		if l.Validate() != nil {
			return
		}
		c := &checker{l: l}
		now := int64(t0)
		for i := 0; i+3 <= len(steps) && i < 3*300; i += 3 {
			now += int64(steps[i])<<8 | int64(steps[i+1])
			cost := int64(steps[i+2]) + 1
			if o := c.evaluate(t, now, cost); o.Allowed {
				c.commit(t, o, now, cost)
			}
		}
	})
}

// TestGCRARateChanges changes the rate and the burst of one GCRA limit now
// and then in the middle of random sequences, up and down, as a rule change
// or two rules naming the same limit at different rates do, and keeps its
// states by BucketID, as a store does. A change that keeps the unit keeps
// the bucket, and its timestamp carries the debt over as a time; a change
// of unit finds another bucket. Either way the key must never get more than
// a fresh bucket at the new limit, started at the change, would give it:
// never allowed what that bucket refuses, never holding more tokens (so
// never more than the new burst), never retrying sooner. Both are driven
// in lockstep: a take is stored only when both allowed it, so the fresh
// bucket is the one that saw the same takes. Nor may a state be read in
// the wrong units: no key ever waits longer to be full than the slowest
// refill of the limits it has been under.
func TestGCRARateChanges(t *testing.T) {
	tests := []struct {
		period time.Duration
		counts []int64
		bursts []int64
	}{
		{time.Second, []int64{1, 10, 100, 4, 1000, 3, 7, 999}, []int64{0, 1, 5, 40}},
		{time.Minute, []int64{5000, 60, 1000, 7, 6000, 1}, []int64{0, 50}},
		{250 * time.Millisecond, []int64{3, 5, 250, 1, 125}, []int64{0, 8}},
		{17 * time.Millisecond, []int64{13, 1, 17, 34}, []int64{0, 5}},
	}
	for i, tt := range tests {
		rng := rand.New(rand.NewPCG(uint64(i), 2026))
		l := Limit{Name: "s", Count: tt.counts[0], Period: tt.period, Burst: tt.bursts[0], Algorithm: GCRA}
		states := map[string]State{}
		var fresh State
		now := int64(t0)
		sameUnit, newUnit := 0, 0
		slowest := ceilDiv(l.EffectiveBurst()*l.PeriodMillis(), l.Count)
		for step := range 4000 {
			if rng.IntN(20) == 0 {
				next := l
				next.Count = tt.counts[rng.IntN(len(tt.counts))]
				next.Burst = tt.bursts[rng.IntN(len(tt.bursts))]
				if next.Count == l.Count && next.Burst == l.Burst {
					continue
				}
				if err := next.Validate(); err != nil {
					t.Fatal(err)
				}
				if same := next.Unit() == l.Unit(); same != (next.BucketID() == l.BucketID()) {
					t.Fatalf("%v to %v: units %d and %d, but bucket IDs %q and %q", l, next, l.Unit(), next.Unit(), l.BucketID(), next.BucketID())
				} else if same {
					sameUnit++
					// The debt carries over as a time: the bucket is full
					// again at the same instant under either limit.
					st := states[l.BucketID()]
					before, after := Evaluate(&l, &st, now, l.EffectiveBurst()+1), Evaluate(&next, &st, now, next.EffectiveBurst()+1)
					if before.ResetAfter != after.ResetAfter {
						t.Fatalf("%v to %v at +%dms: full again in %dms before the change, %dms after", l, next, now-t0, before.ResetAfter, after.ResetAfter)
					}
				} else {
					newUnit++
				}
				l, fresh = next, State{}
				slowest = max(slowest, ceilDiv(l.EffectiveBurst()*l.PeriodMillis(), l.Count))
			}
			dt, cost := randomStep(rng, max(l.PeriodMillis()/l.Count, 4))
			now += dt
			st := states[l.BucketID()]
			a, f := Evaluate(&l, &st, now, cost), Evaluate(&l, &fresh, now, cost)
			// Remaining counts after the take when allowed, before it when
			// refused: compare what each held before.
			held := func(o Outcome) int64 {
				if o.Allowed {
					return o.Remaining + cost
				}
				return o.Remaining
			}
			switch {
			case a.Allowed && !f.Allowed:
				t.Fatalf("%v step %d (at +%dms, cost %d): allowed what a fresh bucket refused: %+v, fresh %+v", l, step, now-t0, cost, a, f)
			case held(a) > held(f) || held(a) > l.EffectiveBurst():
				t.Fatalf("%v step %d (at +%dms, cost %d): held %d tokens, a fresh bucket %d: want no more, and at most the burst",
					l, step, now-t0, cost, held(a), held(f))
			case !a.Allowed && !f.Allowed && f.RetryAfter >= 0 && a.RetryAfter < f.RetryAfter:
				t.Fatalf("%v step %d (at +%dms, cost %d): retry %d, sooner than a fresh bucket's %d", l, step, now-t0, cost, a.RetryAfter, f.RetryAfter)
			case a.ResetAfter > slowest:
				t.Fatalf("%v step %d (at +%dms, cost %d): full again in %dms, longer than any limit's refill, %dms", l, step, now-t0, cost, a.ResetAfter, slowest)
			}
			if a.Allowed {
				states[l.BucketID()], fresh = a.Next, f.Next
			}
		}
		if sameUnit < 30 || newUnit < 30 {
			t.Errorf("period %v: %d changes within a unit and %d across units in 4000 steps; the generator is broken", tt.period, sameUnit, newUnit)
		}
	}
}

// TestTTLAfterClockStepsBack checks Outcome.TTL when the clock steps back,
// for every algorithm: the TTL counts from the caller's now, so at that time
// and after it, the state reads as no state at all, though the window
// algorithms stamp their state with the newer time they stand still at.
func TestTTLAfterClockStepsBack(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 3))
		l := randomLimit(rng, "s", Algorithms[int(seed)%len(Algorithms)])
		p := l.PeriodMillis()
		var st State
		now := int64(t0)
		for step := range 400 {
			dt, cost := randomStep(rng, p)
			if rng.IntN(8) == 0 {
				dt = -rng.Int64N(2*p + 2)
			}
			now += dt
			o := Evaluate(&l, &st, now, cost)
			if !o.Allowed {
				continue
			}
			if o.TTL < 1 {
				t.Fatalf("%v step %d: TTL %d, want at least 1", l, step, o.TTL)
			}
			for _, later := range []int64{o.TTL, o.TTL + 1 + rng.Int64N(3*p)} {
				kept, fresh := Evaluate(&l, &o.Next, now+later, 1), Evaluate(&l, &State{}, now+later, 1)
				kept.Next, fresh.Next = State{}, State{}
				if kept.Allowed != fresh.Allowed || kept.Remaining != fresh.Remaining || kept.RetryAfter != fresh.RetryAfter ||
					kept.ResetAfter != fresh.ResetAfter {
					t.Fatalf("%v step %d (at +%dms, cost %d): TTL %d, but %dms on the state reads %+v, not as empty %+v",
						l, step, now-t0, cost, o.TTL, later, kept, fresh)
				}
			}
			st = o.Next
		}
	}
}
