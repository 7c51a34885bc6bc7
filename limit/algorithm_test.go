package limit

import (
	"testing"
	"time"
)

// t0 is 2026-03-01T12:00:00Z in Unix ms: a multiple of every period the
// tables use, so window boundaries fall on round offsets from it.
const t0 = 1772366400000

// step is one request of a scenario and what Evaluate must answer.
type step struct {
	at        int64 // ms after t0
	cost      int64
	allowed   bool
	remaining int64
	retry     int64 // ms; -1 never
	reset     int64 // ms
}

// runSteps evaluates a scenario on one state, storing Next whenever a step
// is allowed, as a store does.
func runSteps(t *testing.T, l Limit, steps []step) {
	t.Helper()
	var st State
	for i, s := range steps {
		o := Evaluate(&l, &st, t0+s.at, s.cost)
		if o.Allowed != s.allowed || o.Remaining != s.remaining || o.RetryAfter != s.retry || o.ResetAfter != s.reset {
			t.Fatalf("step %d (at +%dms, cost %d): got allowed %v remaining %d retry %d reset %d, want %v %d %d %d",
				i, s.at, s.cost, o.Allowed, o.Remaining, o.RetryAfter, o.ResetAfter, s.allowed, s.remaining, s.retry, s.reset)
		}
		if o.TTL < 1 {
			t.Fatalf("step %d: TTL %d, want at least 1", i, o.TTL)
		}
		if o.Allowed {
			st = o.Next
		}
	}
}

// bucketSteps is a scenario for 10 a second, bursts of 20: the token
// bucket's and GCRA's answers alike.
var bucketSteps = []step{
	{0, 20, true, 0, 0, 2000},
	{0, 1, false, 0, 100, 2000},
	{250, 1, true, 1, 0, 1850},
	{250, 3, false, 1, 150, 1850},
	{400, 3, true, 0, 0, 2000},
	{400, 21, false, 0, -1, 2000},
	{10000, 20, true, 0, 0, 2000},
}

func TestAlgorithms(t *testing.T) {
	perSec := func(alg Algorithm, count, burst int64) Limit {
		return Limit{Name: "s", Count: count, Period: time.Second, Burst: burst, Algorithm: alg}
	}
	tests := []struct {
		name  string
		limit Limit
		steps []step
	}{
		{"token bucket: burst, refill, cost", perSec(TokenBucket, 10, 20), bucketSteps},
		{"gcra: same answers as the token bucket", perSec(GCRA, 10, 20), bucketSteps},
		{"gcra: a rate that does not divide the period", Limit{Name: "s", Count: 3, Period: 1000 * time.Millisecond, Burst: 2, Algorithm: GCRA}, []step{
			{0, 2, true, 0, 0, 667},
			{0, 1, false, 0, 334, 667},
			{333, 1, false, 0, 1, 334},
			{334, 1, true, 0, 0, 666},
			{1000, 1, true, 1, 0, 334},
		}},
		{"fixed window: count per calendar window, retry at the boundary", Limit{Name: "s", Count: 5, Period: time.Second, Burst: 99, Algorithm: FixedWindow}, []step{
			{0, 2, true, 3, 0, 1000},
			{100, 3, true, 0, 0, 900},
			{400, 1, false, 0, 600, 600},
			{999, 6, false, 0, -1, 1},
			{1000, 1, true, 4, 0, 1000},
			{1999, 4, true, 0, 0, 1},
			{2000, 5, true, 0, 0, 1000},
		}},
		{"sliding window: previous window weighed by its overlap", Limit{Name: "s", Count: 10, Period: time.Second, Algorithm: SlidingWindow}, []step{
			{0, 10, true, 0, 0, 1000},
			// The current window alone is full: wait into the next window
			// until 10·(1000-e)/1000 ≤ 9, that is e = 100.
			{500, 1, false, 0, 600, 500},
			{1099, 1, false, 0, 1, 901},
			{1100, 1, true, 0, 0, 900},
			// Now the previous window is in the way: 1 + ⌈10·(1000-e)/1000⌉ + 1 ≤ 10 at e = 200.
			{1100, 1, false, 0, 100, 900},
			{1200, 1, true, 0, 0, 800},
			{1200, 11, false, 0, -1, 800},
			// Two windows on, the window of +1000 (2 tokens) weighs ⌈2·0.5⌉ = 1.
			{2500, 9, true, 0, 0, 500},
			{9000, 10, true, 0, 0, 1000},
			// Cost equal to the count waits until the previous window has
			// fully slid out: the start of the window after next.
			{9000, 10, false, 0, 2000, 1000},
		}},
		{"sliding log: exact rolling window", Limit{Name: "s", Count: 3, Period: time.Second, Burst: 50, Algorithm: SlidingLog}, []step{
			{0, 1, true, 2, 0, 1000},
			{100, 1, true, 1, 0, 900},
			{200, 1, true, 0, 0, 800},
			{300, 1, false, 0, 700, 700},
			{300, 2, false, 0, 800, 700},
			{999, 1, false, 0, 1, 1},
			{1000, 1, true, 0, 0, 100},
			{1000, 4, false, 0, -1, 100},
			{1100, 2, false, 1, 100, 100},
			{1200, 2, true, 0, 0, 800},
			{5000, 3, true, 0, 0, 1000},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.limit.Validate(); err != nil {
				t.Fatal(err)
			}
			runSteps(t, tt.limit, tt.steps)
		})
	}
}

// TestFixedWindowBoundaryBurst shows the fixed window's known flaw: a client
// that spends its whole count at the end of one window and again at the start
// of the next gets twice the count within two milliseconds. The sliding
// window and the sliding log refuse the second half.
func TestFixedWindowBoundaryBurst(t *testing.T) {
	tests := []struct {
		alg  Algorithm
		want int64 // tokens admitted between +999ms and +1000ms
	}{
		{FixedWindow, 200},
		{SlidingWindow, 100},
		{SlidingLog, 100},
		{TokenBucket, 100},
		{GCRA, 100},
	}
	for _, tt := range tests {
		t.Run(string(tt.alg), func(t *testing.T) {
			l := Limit{Name: "s", Count: 100, Period: time.Second, Algorithm: tt.alg}
			var st State
			got := int64(0)
			for _, at := range []int64{999, 1000} {
				for range 100 {
					if o := Evaluate(&l, &st, t0+at, 1); o.Allowed {
						st = o.Next
						got++
					}
				}
			}
			if got != tt.want {
				t.Errorf("100 requests at +999ms and 100 at +1000ms: %d admitted, want %d", got, tt.want)
			}
		})
	}
}

// TestClockStepsBack checks that a clock stepping back never lets a window
// algorithm admit more than the newest time in its state would.
func TestClockStepsBack(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, SlidingLog} {
		t.Run(string(alg), func(t *testing.T) {
			l := Limit{Name: "s", Count: 5, Period: time.Second, Algorithm: alg}
			var st State
			admitted := 0
			// Fill the window at +1500ms, then ask again "at" +900ms, in the
			// window before, where a naive reading would find room.
			for _, at := range []int64{1500, 1500, 1500, 1500, 1500, 900, 900} {
				if o := Evaluate(&l, &st, t0+at, 1); o.Allowed {
					st = o.Next
					admitted++
				}
			}
			if admitted != 5 {
				t.Errorf("5 at +1500ms then 2 at +900ms: %d admitted, want 5", admitted)
			}
		})
	}
}

func TestFloorDiv(t *testing.T) {
	tests := []struct{ a, b, want int64 }{
		{7, 2, 3}, {-7, 2, -4}, {-8, 2, -4}, {0, 5, 0}, {-1, 1000, -1}, {999, 1000, 0},
	}
	for _, tt := range tests {
		if got := floorDiv(tt.a, tt.b); got != tt.want {
			t.Errorf("floorDiv(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
