package limit_test

import (
	"math/big"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// million is the denominator of the parts below: parts per million, as
// package share counts shares.
const million = 1_000_000

func TestScale(t *testing.T) {
	const sec, day = time.Second, 24 * time.Hour
	tb := limit.TokenBucket
	tests := []struct {
		name   string
		l      limit.Limit
		ppm    int64 // the part in millionths
		r      limit.Rounding
		want   limit.Limit
		wantOK bool
	}{
		{"token bucket 60%", limit.Limit{Name: "s", Count: 100, Period: sec, Burst: 200}, 600_000, limit.RoundDown,
			limit.Limit{Name: "s", Count: 60_000, Period: 1000 * sec, Burst: 120, Algorithm: tb}, true},
		{"a third of 10 a second is 3.333", limit.Limit{Name: "s", Count: 10, Period: sec}, 333_333, limit.RoundDown,
			limit.Limit{Name: "s", Count: 3333, Period: 1000 * sec, Burst: 3, Algorithm: tb}, true},
		{"a third rounded up", limit.Limit{Name: "s", Count: 10, Period: sec}, 333_334, limit.RoundUp,
			limit.Limit{Name: "s", Count: 3334, Period: 1000 * sec, Burst: 4, Algorithm: tb}, true},
		{"gcra becomes a token bucket", limit.Limit{Name: "s", Count: 10, Period: sec, Burst: 5, Algorithm: limit.GCRA}, million, limit.RoundDown,
			limit.Limit{Name: "s", Count: 10_000, Period: 1000 * sec, Burst: 5, Algorithm: tb}, true},
		{"window keeps its period", limit.Limit{Name: "m", Count: 1000, Period: time.Minute, Algorithm: limit.FixedWindow}, 100_000, limit.RoundDown,
			limit.Limit{Name: "m", Count: 100, Period: time.Minute, Algorithm: limit.FixedWindow}, true},
		{"window rounds to no token", limit.Limit{Name: "login", Count: 5, Period: time.Minute, Algorithm: limit.SlidingWindow}, 100_000, limit.RoundDown,
			limit.Limit{}, false},
		{"window rounded up keeps a token", limit.Limit{Name: "h", Count: 3, Period: time.Hour, Algorithm: limit.SlidingWindow}, 10_000, limit.RoundUp,
			limit.Limit{Name: "h", Count: 1, Period: time.Hour, Algorithm: limit.SlidingWindow}, true},
		{"burst rounds to none", limit.Limit{Name: "s", Count: 1000, Period: sec, Burst: 5}, 100_000, limit.RoundDown, limit.Limit{}, false},
		{"burst rounded up keeps a token", limit.Limit{Name: "s", Count: 1, Period: sec}, 6667, limit.RoundUp,
			limit.Limit{Name: "s", Count: 7, Period: 1000 * sec, Burst: 1, Algorithm: tb}, true},
		{"above whole multiplies", limit.Limit{Name: "s", Count: 10, Period: sec, Burst: 5}, 2 * million, limit.RoundUp,
			limit.Limit{Name: "s", Count: 20_000, Period: 1000 * sec, Burst: 10, Algorithm: tb}, true},
		{"above whole, too large to count exactly", limit.Limit{Name: "s", Count: 1 << 40, Period: time.Millisecond}, 1 << 20 * million, limit.RoundUp,
			limit.Limit{}, false},
		{"large counts refine less", limit.Limit{Name: "s", Count: 1 << 40, Period: time.Millisecond}, 500_000, limit.RoundDown,
			limit.Limit{Name: "s", Count: 10 << 39, Period: 10 * time.Millisecond, Burst: 1 << 39, Algorithm: tb}, true},
		{"long periods refine less", limit.Limit{Name: "y", Count: 1000, Period: 366 * day}, 500_000, limit.RoundDown,
			limit.Limit{Name: "y", Count: 5000, Period: 10 * 366 * day, Burst: 500, Algorithm: tb}, true},
		{"rounded down past the longest wait", limit.Limit{Name: "y", Count: 1000, Period: 366 * day}, 100, limit.RoundDown,
			limit.Limit{}, false},
		{"rounded up past the longest wait refills faster", limit.Limit{Name: "y", Count: 1000, Period: 366 * day}, 100, limit.RoundUp,
			limit.Limit{Name: "y", Count: 5, Period: 10 * 366 * day, Burst: 1, Algorithm: tb}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.l.Validate(); err != nil {
				t.Fatalf("limit %+v: %v", tt.l, err)
			}
			got, ok := tt.l.Scale(limit.Fraction{Num: tt.ppm, Den: million}, tt.r)
			if ok != tt.wantOK {
				t.Fatalf("got ok %v, want %v (limit %+v)", ok, tt.wantOK, got)
			}
			if !ok {
				return
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("scaled limit is invalid: %v", err)
			}
		})
	}
}

// TestScaleAddsUp checks the promise the balancer relies on: limits
// scaled down to parts that add up to at most one add up to at most the
// limit, and every part keeps the same bucket.
func TestScaleAddsUp(t *testing.T) {
	splits := [][]int64{{333_334, 333_333, 333_333}, {600_000, 300_000, 100_000}, {1, 999_999, 0}, {50_000, 50_000, 900_000}}
	for _, alg := range []limit.Algorithm{limit.TokenBucket, limit.GCRA, limit.SlidingWindow} {
		for _, count := range []int64{1, 2, 3, 7, 100, 999, 1_000_003} {
			l := limit.Limit{Name: "s", Count: count, Period: time.Second, Burst: 2 * count, Algorithm: alg}
			for _, split := range splits {
				var sum, bursts int64
				period := time.Duration(0)
				for _, part := range split {
					sl, ok := l.Scale(limit.Fraction{Num: part, Den: million}, limit.RoundDown)
					if !ok {
						continue
					}
					if period != 0 && sl.Period != period {
						t.Fatalf("%s count %d: got periods %v and %v, want one bucket for every part", alg, count, period, sl.Period)
					}
					period = sl.Period
					sum += sl.Count
					bursts += sl.EffectiveBurst()
				}
				// Rates in tokens per scaled period: Count × k per Period × k.
				k := int64(max(period, l.Period) / l.Period)
				if sum > count*k || (alg != limit.SlidingWindow && bursts > 2*count) {
					t.Errorf("%s count %d split %v: got rates %d bursts %d, want at most %d and %d", alg, count, split, sum, bursts, count*k, 2*count)
				}
			}
		}
	}
}

// FuzzScale checks both roundings for any valid limit and any three parts
// that add up to at most the whole: every scaled limit is valid; rounded
// down, the scaled rates add up to at most the limit's rate and the
// scaled bursts to at most its burst; rounded up, each scaled rate and
// burst is at least its part of the limit's.
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
		a, b, c = a%(million+1), b%(million+1), c%(million+1)
		if uint64(a)+uint64(b)+uint64(c) > million {
			return
		}
		rate := new(big.Rat).SetFrac64(l.Count, l.PeriodMillis())
		sum, bursts := new(big.Rat), int64(0)
		for _, part := range []int64{int64(a), int64(b), int64(c)} {
			for _, r := range []limit.Rounding{limit.RoundDown, limit.RoundUp} {
				sl, ok := l.Scale(limit.Fraction{Num: part, Den: million}, r)
				if !ok {
					if r == limit.RoundUp && part > 0 {
						t.Errorf("Scale(%+v, %d, up): not ok, want a limit", l, part)
					}
					continue
				}
				if err := sl.Validate(); err != nil {
					t.Fatalf("Scale(%+v, %d, %d) = %+v: invalid: %v", l, part, r, sl, err)
				}
				got := new(big.Rat).SetFrac64(sl.Count, sl.PeriodMillis())
				if r == limit.RoundDown {
					sum.Add(sum, got)
					bursts += sl.EffectiveBurst()
					continue
				}
				want := new(big.Rat).Mul(rate, big.NewRat(part, million))
				burst := new(big.Rat).Mul(big.NewRat(l.EffectiveBurst(), 1), big.NewRat(part, million))
				if got.Cmp(want) < 0 || big.NewRat(sl.EffectiveBurst(), 1).Cmp(burst) < 0 {
					t.Errorf("Scale(%+v, %d, up) = %+v: below its part of the limit", l, part, sl)
				}
			}
		}
		if sum.Cmp(rate) > 0 {
			t.Errorf("%+v split %d/%d/%d: scaled rates add up to %v per ms, above %v", l, a, b, c, sum, rate)
		}
		if bursts > l.EffectiveBurst() {
			t.Errorf("%+v split %d/%d/%d: scaled bursts add up to %d, above %d", l, a, b, c, bursts, l.EffectiveBurst())
		}
	})
}

func TestFractionOf(t *testing.T) {
	for _, tt := range []struct {
		n    int64
		f    limit.Fraction
		r    limit.Rounding
		want int64
	}{
		{600, limit.Fraction{Num: 2, Den: 3}, limit.RoundDown, 400},
		{600, limit.Fraction{Num: 2, Den: 3}, limit.RoundUp, 400},
		{10, limit.Fraction{Num: 1, Den: 3}, limit.RoundDown, 3},
		{10, limit.Fraction{Num: 1, Den: 3}, limit.RoundUp, 4},
		{1 << 62, limit.Fraction{Num: 3, Den: 4}, limit.RoundDown, 3 << 60},
		{1 << 62, limit.Fraction{Num: 4, Den: 1}, limit.RoundDown, -1},
		{5, limit.Fraction{Num: 1, Den: 0}, limit.RoundDown, -1},
		{5, limit.Fraction{Num: -1, Den: 2}, limit.RoundDown, -1},
		{0, limit.Fraction{Num: 1, Den: 2}, limit.RoundUp, 0},
	} {
		if got := tt.f.Of(tt.n, tt.r); got != tt.want {
			t.Errorf("%+v.Of(%d, %d) = %d, want %d", tt.f, tt.n, tt.r, got, tt.want)
		}
	}
}
