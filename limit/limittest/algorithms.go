package limittest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// windowStep is one request of a window scenario: move the clock, take, and
// compare the decision.
type windowStep struct {
	advance   time.Duration
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration
	reset     time.Duration
}

// testWindows runs each window algorithm through a scenario whose answers
// are worked out by hand in the comments.
func testWindows(t *testing.T, newStore Factory) {
	ms := time.Millisecond
	tests := []struct {
		alg   limit.Algorithm
		count int64
		steps []windowStep
	}{
		{limit.FixedWindow, 5, []windowStep{
			{0, 2, true, 3, 0, time.Second},
			{100 * ms, 3, true, 0, 0, 900 * ms},
			// Full until the calendar second ends.
			{300 * ms, 1, false, 0, 600 * ms, 600 * ms},
			{599 * ms, 6, false, 0, limit.Never, ms},
			// The boundary: a full window right away.
			{ms, 5, true, 0, 0, time.Second},
		}},
		{limit.SlidingWindow, 10, []windowStep{
			{0, 10, true, 0, 0, time.Second},
			// This window alone is full: the next must slide to 10·(1000-e)/1000 ≤ 9, e = 100ms.
			{500 * ms, 1, false, 0, 600 * ms, 500 * ms},
			{599 * ms, 1, false, 0, ms, 901 * ms},
			{ms, 1, true, 0, 0, 900 * ms},
			// Now the previous window's share is in the way until e = 200ms.
			{0, 1, false, 0, 100 * ms, 900 * ms},
			{100 * ms, 1, true, 0, 0, 800 * ms},
			{0, 11, false, 0, limit.Never, 800 * ms},
		}},
		{limit.SlidingLog, 3, []windowStep{
			{0, 1, true, 2, 0, time.Second},
			{100 * ms, 1, true, 1, 0, 900 * ms},
			{100 * ms, 1, true, 0, 0, 800 * ms},
			// The oldest entry leaves at +1000ms, the second at +1100ms.
			{100 * ms, 1, false, 0, 700 * ms, 700 * ms},
			{0, 2, false, 0, 800 * ms, 700 * ms},
			{700 * ms, 1, true, 0, 0, 100 * ms},
			{0, 4, false, 0, limit.Never, 100 * ms},
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.alg), func(t *testing.T) {
			clk := NewClock(start)
			s := newStore(t, clk.Now)
			req := &limit.Request{Key: uniqueKey(t, "k"),
				Limits: []limit.Limit{{Name: "w", Count: tt.count, Period: time.Second, Burst: 99, Algorithm: tt.alg}}}
			for i, st := range tt.steps {
				clk.Advance(st.advance)
				req.Cost = st.cost
				d := take(t, s, req)
				if d.Allowed != st.allowed || d.Remaining != st.remaining || d.RetryAfter != st.retry || d.ResetAfter != st.reset {
					t.Fatalf("step %d (at +%v, cost %d): got allowed %v remaining %d retry %v reset %v, want %v %d %v %v",
						i, clk.Now().Sub(start), st.cost, d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter,
						st.allowed, st.remaining, st.retry, st.reset)
				}
			}
		})
	}
}

// testMixedAllOrNothing puts a token bucket and a limit of each other
// algorithm on one key, as "100 a second" beside "5,000 an hour": a request
// refused by either must take from neither.
func testMixedAllOrNothing(t *testing.T, newStore Factory) {
	for _, alg := range limit.Algorithms[1:] {
		t.Run(string(alg), func(t *testing.T) {
			clk := NewClock(start)
			s := newStore(t, clk.Now)
			key := uniqueKey(t, "k")
			sec := perSecond("s", 5, 5)
			hour := limit.Limit{Name: "h", Count: 8, Period: time.Hour, Algorithm: alg}
			both := &limit.Request{Key: key, Limits: []limit.Limit{sec, hour}}
			for range 5 {
				if !take(t, s, both).Allowed {
					t.Fatal("within both limits: refused")
				}
			}
			// The bucket is empty: refusals must leave the hourly limit at 3.
			for range 4 {
				if d := take(t, s, both); d.Allowed || d.Index != 0 {
					t.Fatalf("bucket empty: allowed %v by limit %d, want refused by limit 0", d.Allowed, d.Index)
				}
			}
			if d := take(t, s, &limit.Request{Key: key, Limits: []limit.Limit{hour}}); !d.Allowed || d.Remaining != 2 {
				t.Fatalf("%s alone after 5 allowed and 4 refused: allowed %v remaining %d, want allowed with 2 left", alg, d.Allowed, d.Remaining)
			}
			// Now the hourly limit refuses a cost the bucket could pay: the
			// bucket must keep its tokens.
			clk.Advance(time.Second)
			both.Cost = 3
			if d := take(t, s, both); d.Allowed || d.Index != 1 {
				t.Fatalf("cost 3 with 2 left this hour: allowed %v by limit %d, want refused by limit 1", d.Allowed, d.Index)
			}
			if d := take(t, s, &limit.Request{Key: key, Limits: []limit.Limit{sec}}); !d.Allowed || d.Remaining != 4 {
				t.Fatalf("bucket after a refused cost 3: allowed %v remaining %d, want allowed with 4 left", d.Allowed, d.Remaining)
			}
		})
	}
}

// testConcurrentAlgorithms takes from one key of each algorithm from many
// goroutines with the clock stopped: exactly the capacity is admitted.
func testConcurrentAlgorithms(t *testing.T, newStore Factory) {
	for _, alg := range limit.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			clk := NewClock(start)
			s := newStore(t, clk.Now)
			req := limit.Request{Key: uniqueKey(t, "k"), Limits: []limit.Limit{{Name: "m", Count: 50, Period: time.Minute, Algorithm: alg}}}
			if got := admitConcurrently(t, s, req, 8, 10); got != 50 {
				t.Errorf("80 concurrent requests on a capacity of 50 with the clock stopped: %d admitted, want exactly 50", got)
			}
		})
	}
}

// testMatchesModelMixed is testMatchesModel with random rule sets: one to
// three limits of random algorithms, rates and periods, and costs that
// sometimes exceed every capacity.
func testMatchesModelMixed(t *testing.T, newStore Factory) {
	periods := []time.Duration{10 * time.Millisecond, 250 * time.Millisecond, time.Second, time.Minute}
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 99))
		limits := make([]limit.Limit, 1+rng.IntN(3))
		for i := range limits {
			limits[i] = limit.Limit{Name: fmt.Sprint("l", i), Count: 1 + rng.Int64N(12), Period: periods[rng.IntN(len(periods))],
				Burst: rng.Int64N(15), Algorithm: limit.Algorithms[(int(seed)+i*rng.IntN(5))%len(limit.Algorithms)]}
		}
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { matchModel(t, newStore, rng, limits, 250, 16) })
	}
}

// matchModel sends steps random requests, each over a run of limits, as
// rules that differ by endpoint would ask, through a new store and through
// Model, and requires the same decision at every step. A quarter of the
// requests cost up to maxCost, the others 1.
func matchModel(t *testing.T, newStore Factory, rng *rand.Rand, limits []limit.Limit, steps int, maxCost int64) {
	clk := NewClock(start)
	s := newStore(t, clk.Now)
	key := uniqueKey(t, "k")
	m := NewModel()
	for step := range steps {
		clk.Advance(time.Duration(rng.IntN(120)) * time.Millisecond)
		cost := int64(1)
		if rng.IntN(4) == 0 {
			cost = 1 + rng.Int64N(maxCost)
		}
		lo := rng.IntN(len(limits))
		req := &limit.Request{Key: key, Cost: cost, Limits: limits[lo : lo+1+rng.IntN(len(limits)-lo)]}
		want := m.Take(clk.Now().UnixMilli(), req)
		if got := take(t, s, req); got != want {
			t.Fatalf("step %d (cost %d, limits %v): store %+v, model %+v", step, cost, req.Limits, got, want)
		}
	}
}

// rateStep is one request of a rate-change scenario: move the clock, set
// the limit's rate, take, and compare.
type rateStep struct {
	advance   time.Duration
	count     int64
	cost      int64
	allowed   bool
	remaining int64
	retry     time.Duration
}

// testRateChange changes the rate of one bucket limit (same name, period and
// burst) in the middle of a sequence, up and down, as a rule change does, or
// two rules that name the same limit at different rates. The token bucket
// keeps its tokens and refills at the new rate from its last take. GCRA
// keeps its timestamp while the rate keeps its unit (limit.Limit.Unit; any
// rate that divides 1000 a second has unit 1): the debt carries over as a
// time, read under the new rate, as in redis-cell. A change of unit is a
// new bucket, which starts full. Each phase stays within the refill time of
// its last take, so no store may have dropped the state (see limit.Limit
// on raising a burst or lowering a rate).
func testRateChange(t *testing.T, newStore Factory) {
	ms := time.Millisecond
	type phase struct {
		alg   limit.Algorithm
		name  string
		burst int64
		steps []rateStep
	}
	phases := []phase{
		{limit.TokenBucket, "lowered at once", 3, []rateStep{
			{0, 3, 1, true, 2, 0},
			{0, 1, 1, true, 1, 0},
		}},
		{limit.TokenBucket, "raised when drained", 3, []rateStep{
			{0, 1, 3, true, 0, 0},
			// 1000 credits short at 3 a ms.
			{0, 3, 1, false, 0, 334 * ms},
			// The bucket refills at the new rate since the last take: 900.
			{300 * ms, 3, 1, false, 0, 34 * ms},
			{34 * ms, 3, 1, true, 0, 0},
		}},
		{limit.TokenBucket, "lowered after a while", 3, []rateStep{
			{0, 3, 3, true, 0, 0},
			// 500ms at the new rate of 1 a second is half a token, not the
			// token and a half the old rate would have refilled.
			{500 * ms, 1, 1, false, 0, 500 * ms},
			{499 * ms, 1, 1, false, 0, ms},
		}},
		{limit.GCRA, "raised in the same unit", 4, []rateStep{
			// Drained at 1 a second: full again in 4000ms.
			{0, 1, 4, true, 0, 0},
			// At 10 a second the bucket holds 400ms, and the 4000ms owed
			// stay owed: a token fits when 300ms are left.
			{0, 10, 1, false, 0, 3700 * ms},
			{3699 * ms, 10, 1, false, 0, ms},
			{ms, 10, 1, true, 0, 0},
		}},
		{limit.GCRA, "lowered in the same unit", 4, []rateStep{
			// Drained at 10 a second: full again in 400ms.
			{0, 10, 4, true, 0, 0},
			// At 1 a second the bucket holds 4000ms, and 400ms are owed:
			// three tokens and more, fewer than a fresh bucket's four.
			{0, 1, 1, true, 2, 0},
			{0, 1, 3, false, 2, 400 * ms},
			{400 * ms, 1, 3, true, 0, 0},
		}},
		{limit.GCRA, "a change of unit starts afresh", 4, []rateStep{
			{0, 1, 4, true, 0, 0},
			// 3 a second counts in thirds of a millisecond: another bucket.
			{0, 3, 1, true, 3, 0},
			// Back at 1 a second, the first bucket is still drained.
			{0, 1, 1, false, 0, 1000 * ms},
		}},
	}
	for _, ph := range phases {
		t.Run(string(ph.alg)+"/"+ph.name, func(t *testing.T) {
			clk := NewClock(start)
			s := newStore(t, clk.Now)
			key := uniqueKey(t, "k")
			for i, st := range ph.steps {
				clk.Advance(st.advance)
				l := limit.Limit{Name: "s", Count: st.count, Period: time.Second, Burst: ph.burst, Algorithm: ph.alg}
				d := take(t, s, &limit.Request{Key: key, Cost: st.cost, Limits: []limit.Limit{l}})
				if d.Allowed != st.allowed || d.Remaining != st.remaining || d.RetryAfter != st.retry {
					t.Fatalf("step %d (at +%v, %d a second, cost %d): got allowed %v remaining %d retry %v, want %v %d %v",
						i, clk.Now().Sub(start), st.count, st.cost, d.Allowed, d.Remaining, d.RetryAfter, st.allowed, st.remaining, st.retry)
				}
			}
		})
	}
}
