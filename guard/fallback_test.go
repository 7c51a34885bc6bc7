package guard

import (
	"math"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

func TestScale(t *testing.T) {
	for _, tc := range []struct {
		name      string
		l         limit.Limit
		slack     float64
		gateways  int
		rate      float64 // tokens a second after scaling, rounded up to a thousandth per period
		burst     int64
		sameCount int64 // window algorithms: the count, period unchanged
	}{
		{name: "bucket, 3 gateways", l: limit.Limit{Name: "s", Count: 300, Period: time.Second, Burst: 600}, slack: 2, gateways: 3,
			rate: 200, burst: 400},
		{name: "bucket, many gateways: no rounding to zero", l: limit.Limit{Name: "s", Count: 1, Period: time.Second}, slack: 2, gateways: 300,
			rate: 0.007, burst: 1},
		{name: "bucket, big rate kept exact", l: limit.Limit{Name: "s", Count: 100_000, Period: time.Second}, slack: 2, gateways: 330,
			rate: 606.061, burst: 607},
		{name: "gcra per minute becomes its token bucket", l: limit.Limit{Name: "m", Count: 5000, Period: time.Minute, Algorithm: limit.GCRA},
			slack: 1, gateways: 2, rate: 2500.0 / 60, burst: 2500},
		{name: "one gateway gets twice the limit", l: limit.Limit{Name: "s", Count: 10, Period: time.Second, Burst: 5}, slack: 2, gateways: 1,
			rate: 20, burst: 10},
		{name: "fixed window keeps its window", l: limit.Limit{Name: "h", Count: 1000, Period: time.Hour, Algorithm: limit.FixedWindow},
			slack: 1, gateways: 10, sameCount: 100},
		{name: "window count at least one", l: limit.Limit{Name: "h", Count: 3, Period: time.Hour, Algorithm: limit.SlidingWindow},
			slack: 1, gateways: 100, sameCount: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.l.Validate(); err != nil {
				t.Fatalf("limit %v: %v", tc.l, err)
			}
			got := scale(tc.l, share(tc.slack, tc.gateways))
			if err := got.Validate(); err != nil {
				t.Fatalf("scaled limit %v is invalid: %v", got, err)
			}
			if got.Name != tc.l.Name {
				t.Errorf("got %v, want the same name as %v", got, tc.l)
			}
			if tc.sameCount > 0 {
				if got.Count != tc.sameCount || got.Period != tc.l.Period || got.Alg() != tc.l.Alg() {
					t.Errorf("got %d per %v, want %d per %v", got.Count, got.Period, tc.sameCount, tc.l.Period)
				}
				return
			}
			if got.Alg() != limit.TokenBucket {
				t.Errorf("got %v, want a token bucket", got.Alg())
			}
			rate := float64(got.Count) / got.Period.Seconds()
			if math.Abs(rate-tc.rate) > tc.rate*0.001 {
				t.Errorf("got %d per %v = %.4f/s, want %.4f/s (within 0.1%%)", got.Count, got.Period, rate, tc.rate)
			}
			if want := float64(tc.l.Count) / tc.l.Period.Seconds() * tc.slack / float64(tc.gateways); rate < want {
				t.Errorf("got %.6f/s, want at least the part %.6f/s: the fallback errs over", rate, want)
			}
			if got.EffectiveBurst() != tc.burst {
				t.Errorf("got burst %d, want %d", got.EffectiveBurst(), tc.burst)
			}
		})
	}
}
