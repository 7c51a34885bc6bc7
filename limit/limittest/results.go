package limittest

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// testResults checks each limit's own answer (limit.Decision.Results) in
// requests of several limits: every limit over, one over, a shadow limit
// over, and a limit so large it never binds beside one that does. A limit
// with room in a refused request keeps its tokens, and its Result says so.
func testResults(t *testing.T, newStore Factory) {
	perMinute := func(name string, n int64, alg limit.Algorithm) limit.Limit {
		return limit.Limit{Name: name, Count: n, Period: time.Minute, Algorithm: alg}
	}
	shadow := perMinute("s", 1, limit.FixedWindow)
	shadow.Shadow = true
	huge := limit.Limit{Name: "u", Count: 1 << 30, Period: time.Second}
	// want is one limit's answer on the last of three requests.
	type want struct {
		allowed   bool
		remaining int64
	}
	for _, tt := range []struct {
		name    string
		limits  []limit.Limit
		allowed bool // the third request
		index   int
		each    []want
	}{
		{"both over", []limit.Limit{perMinute("a", 2, limit.TokenBucket), perMinute("b", 2, limit.SlidingWindow)},
			false, 1, []want{{false, 0}, {false, 0}}},
		{"one over", []limit.Limit{perMinute("a", 2, limit.FixedWindow), perMinute("b", 10, limit.GCRA)},
			false, 0, []want{{false, 0}, {true, 8}}},
		{"second over", []limit.Limit{perMinute("a", 10, limit.SlidingLog), perMinute("b", 2, limit.TokenBucket)},
			false, 1, []want{{true, 8}, {false, 0}}},
		{"shadow over", []limit.Limit{perMinute("a", 10, limit.SlidingWindow), shadow},
			true, 0, []want{{true, 7}, {false, 0}}},
		{"never binds", []limit.Limit{huge, perMinute("a", 2, limit.FixedWindow)},
			false, 1, []want{{true, 1<<30 - 2}, {false, 0}}},
		{"all allowed", []limit.Limit{perMinute("a", 5, limit.TokenBucket), huge},
			true, 0, []want{{true, 2}, {true, 1<<30 - 3}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := NewClock(start)
			s := newStore(t, clk.Now)
			req := &limit.Request{Key: uniqueKey(t, "k"), Limits: tt.limits}
			take(t, s, req)
			take(t, s, req)
			d := take(t, s, req)
			if d.Allowed != tt.allowed || d.Index != tt.index {
				t.Fatalf("third request: got allowed %v index %d, want %v index %d (%+v)", d.Allowed, d.Index, tt.allowed, tt.index, d)
			}
			if n := d.Results.Len(); n != len(tt.limits) {
				t.Fatalf("third request: got %d results, want one per limit, %d", n, len(tt.limits))
			}
			for i, w := range tt.each {
				r, ok := d.Result(i)
				if !ok || r.Allowed != w.allowed || r.Remaining != w.remaining {
					t.Errorf("limit %d (%s): got %+v (known %v), want allowed %v remaining %d", i, tt.limits[i].Name, r, ok, w.allowed, w.remaining)
				}
				if r.Allowed != (r.RetryAfter == 0) || r.RetryAfter < 0 && r.RetryAfter != limit.Never {
					t.Errorf("limit %d (%s): allowed %v with retry %v", i, tt.limits[i].Name, r.Allowed, r.RetryAfter)
				}
			}
			// The Decision describes its Index limit as that limit's Result does.
			if r, _ := d.Result(d.Index); d.Index >= 0 && (r.Remaining != d.Remaining || r.RetryAfter != d.RetryAfter) {
				t.Errorf("limit %d: result %+v disagrees with the decision %+v", d.Index, r, d)
			}
		})
	}
	// A request of one enforced limit is its own answer: no Results, and
	// Result(0) reads the Decision.
	clk := NewClock(start)
	s := newStore(t, clk.Now)
	d := take(t, s, &limit.Request{Key: uniqueKey(t, "one"), Limits: []limit.Limit{perMinute("a", 3, limit.TokenBucket)}})
	if r, ok := d.Result(0); !ok || d.Results.Len() != 0 || !r.Allowed || r.Remaining != 2 {
		t.Errorf("one limit: got result %+v (known %v) and %d results, want allowed with 2 left and none listed", r, ok, d.Results.Len())
	}
	if _, ok := d.Result(1); ok {
		t.Errorf("one limit: Result(1) is known, want not")
	}
}
