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
		share     float64
		rate      float64 // tokens a second after scaling
		burst     int64
		sameCount int64 // window algorithms: the count, period unchanged
	}{
		{name: "bucket, 3 gateways", l: limit.Limit{Name: "s", Count: 300, Period: time.Second, Burst: 600}, share: 2.0 / 3,
			rate: 200, burst: 400},
		{name: "bucket, many gateways: stretched period, no rounding to zero", l: limit.Limit{Name: "s", Count: 1, Period: time.Second}, share: 2.0 / 300,
			rate: 1.0 / 150, burst: 1},
		{name: "bucket, big rate kept exact", l: limit.Limit{Name: "s", Count: 100_000, Period: time.Second}, share: 2.0 / 330,
			rate: 606.06, burst: 606},
		{name: "gcra per minute", l: limit.Limit{Name: "m", Count: 5000, Period: time.Minute, Algorithm: limit.GCRA}, share: 0.5,
			rate: 2500.0 / 60, burst: 2500},
		{name: "one gateway gets twice the limit", l: limit.Limit{Name: "s", Count: 10, Period: time.Second, Burst: 5}, share: 2,
			rate: 20, burst: 10},
		{name: "fixed window keeps its window", l: limit.Limit{Name: "h", Count: 1000, Period: time.Hour, Algorithm: limit.FixedWindow}, share: 0.1,
			sameCount: 100},
		{name: "window count at least one", l: limit.Limit{Name: "h", Count: 3, Period: time.Hour, Algorithm: limit.SlidingWindow}, share: 0.01,
			sameCount: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.l.Validate(); err != nil {
				t.Fatalf("limit %v: %v", tc.l, err)
			}
			got := scale(tc.l, tc.share)
			if err := got.Validate(); err != nil {
				t.Fatalf("scaled limit %v is invalid: %v", got, err)
			}
			if got.Name != tc.l.Name || got.Alg() != tc.l.Alg() {
				t.Errorf("got %v, want the same name and algorithm as %v", got, tc.l)
			}
			if tc.sameCount > 0 {
				if got.Count != tc.sameCount || got.Period != tc.l.Period {
					t.Errorf("got %d per %v, want %d per %v", got.Count, got.Period, tc.sameCount, tc.l.Period)
				}
				return
			}
			rate := float64(got.Count) / got.Period.Seconds()
			if math.Abs(rate-tc.rate) > tc.rate*0.001 {
				t.Errorf("got %d per %v = %.4f/s, want %.4f/s (within 0.1%%)", got.Count, got.Period, rate, tc.rate)
			}
			if got.EffectiveBurst() != tc.burst {
				t.Errorf("got burst %d, want %d", got.EffectiveBurst(), tc.burst)
			}
		})
	}
}
