package share_test

import (
	"math/big"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/share"
)

// FuzzScale checks the promise the balancer relies on for any valid limit
// and any three shares that add up to at most the whole: every scaled limit
// is valid, the scaled rates add up to at most the limit's rate, and the
// scaled bursts to at most its burst.
func FuzzScale(f *testing.F) {
	f.Add(int64(100), int64(1000), int64(0), uint8(0), uint32(600_000), uint32(300_000), uint32(100_000))
	f.Add(int64(10), int64(1000), int64(5), uint8(1), uint32(333_334), uint32(333_333), uint32(333_333))
	f.Add(int64(1<<40), int64(1), int64(0), uint8(0), uint32(500_000), uint32(500_000), uint32(0))
	f.Add(int64(1000), int64(366*24*3600*1000), int64(0), uint8(2), uint32(1), uint32(999_999), uint32(0))
	f.Fuzz(func(t *testing.T, count, periodMs, burst int64, alg uint8, a, b, c uint32) {
		l := limit.Limit{Name: "s", Count: count, Period: time.Duration(periodMs) * time.Millisecond, Burst: burst,
			Algorithm: limit.Algorithms[int(alg)%len(limit.Algorithms)]}
		if periodMs <= 0 || periodMs > 1<<42 || l.Validate() != nil {
			return
		}
		a, b, c = a%(share.Whole+1), b%(share.Whole+1), c%(share.Whole+1)
		if uint64(a)+uint64(b)+uint64(c) > share.Whole {
			return
		}
		rate := new(big.Rat).SetFrac64(l.Count, l.PeriodMillis())
		sum, bursts := new(big.Rat), int64(0)
		for _, s := range []uint32{a, b, c} {
			sl, ok := share.Scale(l, s)
			if !ok {
				continue
			}
			if err := sl.Validate(); err != nil {
				t.Fatalf("Scale(%+v, %d) = %+v: invalid: %v", l, s, sl, err)
			}
			sum.Add(sum, new(big.Rat).SetFrac64(sl.Count, sl.PeriodMillis()))
			bursts += sl.EffectiveBurst()
		}
		if sum.Cmp(rate) > 0 {
			t.Errorf("%+v split %d/%d/%d: scaled rates add up to %v per ms, above %v", l, a, b, c, sum, rate)
		}
		if bursts > l.EffectiveBurst() {
			t.Errorf("%+v split %d/%d/%d: scaled bursts add up to %d, above %d", l, a, b, c, bursts, l.EffectiveBurst())
		}
	})
}
