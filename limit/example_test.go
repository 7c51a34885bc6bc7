package limit_test

import (
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// Evaluate is a pure function of the state, the time and the cost: a store
// keeps Next when the request is allowed, and nothing when it is not.
func ExampleEvaluate() {
	l := limit.Limit{Name: "m", Count: 3, Period: time.Minute, Algorithm: limit.SlidingLog}
	var st limit.State
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	for _, at := range []time.Duration{0, 10 * time.Second, 20 * time.Second, 30 * time.Second, time.Minute} {
		o := limit.Evaluate(&l, &st, start+at.Milliseconds(), 1)
		if o.Allowed {
			st = o.Next
		}
		fmt.Printf("at %v: allowed %v, remaining %d, retry after %dms\n", at, o.Allowed, o.Remaining, o.RetryAfter)
	}
	// Output:
	// at 0s: allowed true, remaining 2, retry after 0ms
	// at 10s: allowed true, remaining 1, retry after 0ms
	// at 20s: allowed true, remaining 0, retry after 0ms
	// at 30s: allowed false, remaining 0, retry after 30000ms
	// at 1m0s: allowed true, remaining 0, retry after 0ms
}

// One request, two limits of different algorithms: it passes only if both
// allow it, and the decision describes the limit that is tightest.
func ExampleDecide() {
	limits := []limit.Limit{
		{Name: "s", Count: 100, Period: time.Second, Burst: 200},
		{Name: "h", Count: 5000, Period: time.Hour, Algorithm: limit.SlidingWindow},
	}
	now := time.Date(2026, 3, 1, 12, 30, 0, 0, time.UTC).UnixMilli()
	outs := make([]limit.Outcome, len(limits))
	for i := range limits {
		outs[i] = limit.Evaluate(&limits[i], &limit.State{}, now, 150)
	}
	d := limit.Decide(outs)
	fmt.Println(d.Allowed, limits[d.Index].Name, d.Remaining, d.ResetAfter)
	// Output:
	// true s 50 1.5s
}

// A region's quarter of "10 a second, bursts of 20" is 2.5 a second,
// counted as 2500 per 1000 s so that no part of a token is lost; rounded
// down, as shares are, it never gives more than the quarter.
func ExampleLimit_Scale() {
	l := limit.Limit{Name: "s", Count: 10, Period: time.Second, Burst: 20, Algorithm: limit.GCRA}
	scaled, ok := l.Scale(limit.Fraction{Num: 1, Den: 4}, limit.RoundDown)
	fmt.Println(scaled.Count, "per", scaled.Period, "burst", scaled.Burst, scaled.Algorithm, ok)
	// Output: 2500 per 16m40s burst 5 token_bucket true
}

// A refused request's budget, as the header fields the gateway writes to
// HTTP and rls to Envoy.
func ExampleBudget_AppendValues() {
	l := limit.Limit{Name: "s", Count: 10, Period: time.Second, Burst: 20}
	b := limit.BudgetOf(&l, &limit.Decision{Remaining: 0, RetryAfter: 80 * time.Millisecond, ResetAfter: 2 * time.Second})
	for i, v := range b.AppendValues(nil) {
		fmt.Printf("%s: %s\n", limit.FieldName(i), v)
	}
	// Output:
	// RateLimit-Policy: "s";q=20;w=2
	// RateLimit: "s";r=0;t=2
	// X-RateLimit-Limit: 20
	// X-RateLimit-Remaining: 0
	// X-RateLimit-Reset: 2
	// Retry-After: 1
}
