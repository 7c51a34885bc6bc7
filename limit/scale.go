package limit

import (
	"math"
	"math/bits"
	"time"
)

// Fraction is a part of a limit, Num / Den: a region's share (package
// share counts them in millionths), or one gateway's part of a limit while
// it answers alone (package guard: slack / gateways). Integers keep the
// sum of a limit's parts exact. Den must be positive and Num not negative.
type Fraction struct {
	Num, Den int64
}

// Of returns n × f rounded as r says, for n ≥ 0, or -1 when that does not
// fit an int64 (or f is not a fraction).
func (f Fraction) Of(n int64, r Rounding) int64 {
	if f.Den <= 0 || f.Num < 0 || n < 0 {
		return -1
	}
	den := uint64(f.Den)
	hi, lo := bits.Mul64(uint64(n), uint64(f.Num))
	var q, rem uint64
	switch {
	case hi == 0:
		q, rem = lo/den, lo%den // one 64-bit division, cheaper than 128-bit
	case hi >= den:
		return -1
	default:
		q, rem = bits.Div64(hi, lo, den)
	}
	if r == RoundUp && rem > 0 {
		q++
	}
	if q > math.MaxInt64 {
		return -1
	}
	return int64(q)
}

// Rounding says which way [Limit.Scale] rounds, and so which way its error
// goes.
type Rounding int8

const (
	// RoundDown never gives more than the part: limits scaled to parts
	// that add up to at most one admit together at most the limit. A
	// region's share (package share) rounds down, so the regions never
	// add up to more than the global limit.
	RoundDown Rounding = iota
	// RoundUp never gives less than the part, and at least one token: the
	// local fallback (package guard) rounds up, so a fleet that answers
	// alone during an outage errs over its limit, never under it.
	RoundUp
)

// Scale returns l cut to the part f of it (a part above one multiplies
// it), rounded as r says, and false when the part cannot be enforced:
// rounded down, it leaves no token per period or a burst of none, or its
// refill takes longer than [MaxWait]; above one, it is too large for
// Validate; or f is not a fraction. l must be valid; the result is valid
// when ok.
//
// What each algorithm becomes:
//
//   - token_bucket and gcra become a token bucket of the scaled rate and
//     burst, counted over a period k times longer with a count k times
//     larger: the same rate, rounded to a thousandth of a token per
//     period rather than a whole one (a third of "10 a second" is 3.333,
//     not 3). k is 1000, or the largest of 100, 10 and 1 that keeps l so
//     refined exact; it depends only on l, so the bucket stays the same
//     one whatever the part. gcra answers as the token bucket of its rate
//     and burst does, but its state is counted in units of its rate, so a
//     part that changed between calls would start a fresh bucket every
//     time; the token bucket's credits keep their meaning, and a new part
//     only changes how fast it refills and how much it holds.
//   - sliding_window, fixed_window and sliding_log keep their period,
//     whose length is what their users reason about, and scale Count,
//     rounded to whole tokens per window. They read the counts of the
//     current window under the new Count.
//
// Rounded up, a bucket whose scaled refill would take longer than MaxWait
// refills faster instead, so RoundUp fails only at the edges of what
// Validate accepts. The scaled bucket's period differs from l's, so it is a
// different bucket ([Limit.BucketID]) from the unscaled limit's.
func (l *Limit) Scale(f Fraction, r Rounding) (Limit, bool) {
	out := *l
	check := f.Num > f.Den // products may have grown past what Validate allows
	if l.Alg().windowed() {
		out.Count = f.Of(l.Count, r)
	} else {
		k := l.refinement()
		out.Algorithm = TokenBucket
		out.Period = l.Period * time.Duration(k)
		out.Count = f.Of(l.Count*k, r)
		out.Burst = f.Of(l.EffectiveBurst(), r)
		if out.Burst < 1 || out.Count < 1 {
			return out, false
		}
		// Rounding can stretch the refill, Burst × period / Count, past
		// MaxWait (a burst rounded up to one token over a count rounded up
		// to one). Below 2^53 / MaxWait, Count × MaxWait cannot overflow;
		// above it, it exceeds every Burst × period.
		if p := out.PeriodMillis(); !check && out.Count < maxExact/maxWaitMs && out.Burst*p > out.Count*maxWaitMs {
			if r == RoundDown {
				return out, false
			}
			out.Count, check = ceilDiv(out.Burst*p, maxWaitMs), true
		}
	}
	if out.Count < 1 || check && out.Validate() != nil {
		return out, false
	}
	return out, true
}

// maxRefinedMs bounds a refined bucket's period, in milliseconds, well
// inside a time.Duration: 100 leap years.
const maxRefinedMs = 100 * 366 * 24 * 3600 * 1000

// maxWaitMs is MaxWait in milliseconds.
const maxWaitMs = int64(MaxWait / time.Millisecond)

// refinement returns k for Scale: 1000, or the largest of 100, 10 and 1
// that keeps the token bucket of k × Count per k × Period, with l's burst,
// valid. For a valid l only the products with the period can fail (the
// refill time does not change), and Burst × period and Count × period
// are below 2^53, so none of the products here overflows.
func (l *Limit) refinement() int64 {
	p := l.PeriodMillis()
	bp, cp := l.EffectiveBurst()*p, l.Count*p
	fits := func(k int64) bool {
		// k·Count × k·period < 2^53 ⟺ cp × k ≤ ⌊2^53 / k⌋, as k does not divide 2^53.
		return p*k <= maxRefinedMs && bp*k < maxExact && cp*k <= maxExact/k
	}
	for _, k := range [...]int64{1000, 100, 10} {
		if fits(k) {
			return k
		}
	}
	return 1
}
