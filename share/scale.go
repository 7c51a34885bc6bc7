package share

import (
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// Whole is a whole limit in the unit shares are counted in: parts per
// million. Integers keep the sum of a limit's shares exact: shares that add
// up to at most Whole scale to counts that add up to at most the limit.
const Whole = 1_000_000

// Scale returns l cut down to share parts per million of it, and false when
// that share is too small to admit anything (it rounds to no token per
// period, or to a burst of none).
//
// Counts and bursts round down, so the scaled limits of shares that add up
// to at most Whole add up to at most l. The algorithms differ in how they
// are split and in how a share changes between calls with the same bucket:
//
//   - token_bucket is counted over a period Refinement(l) times longer, with
//     a count as many times larger: the same rate, but one that rounds to a
//     thousandth of a token per period rather than a whole one, which for
//     "10 a second" split three ways is the difference between losing up to
//     3 of the 10 and losing none. The refinement depends only on l, so the
//     bucket stays the same one from share to share. The bucket keeps its
//     credits (tokens × period, independent of the rate), so a new share
//     only changes how fast it refills and how much it may hold (a lowered
//     burst clamps it).
//   - gcra keeps one timestamp counted in units that depend on the rate
//     (see [limit.Limit.Unit]), so a share that changed the rate would
//     start a fresh, full bucket at every rebalance. A split gcra limit is
//     therefore enforced as the token bucket of the same rate and burst,
//     which admits the same requests.
//   - the window algorithms (sliding_window, fixed_window, sliding_log)
//     count per window of Period, which cannot be stretched: their count
//     rounds down to whole tokens per window. They keep counts of the
//     current window, read under the new Count: a share that grows in the
//     middle of a window lets that window admit the new share on top of
//     what it already counted (see docs/regions.md for the bound this
//     gives).
//
// Split buckets are different buckets from the unsplit limit's (their
// period differs), once, when a store first enforces shares.
func Scale(l limit.Limit, share uint32) (limit.Limit, bool) {
	if share > Whole {
		share = Whole
	}
	out := l
	switch l.Alg() {
	case limit.TokenBucket, limit.GCRA:
		k := Refinement(l)
		out.Algorithm = limit.TokenBucket
		out.Period = l.Period * time.Duration(k)
		out.Count = mulDiv(l.Count*k, share)
		out.Burst = mulDiv(l.EffectiveBurst(), share)
		if out.Burst < 1 {
			return out, false
		}
	default:
		out.Count = mulDiv(l.Count, share)
	}
	if out.Count < 1 {
		return out, false
	}
	// A rounded-down rate can stretch a bucket's refill time past what
	// Validate accepts; such a share cannot be enforced as a limit.
	if out.Validate() != nil {
		return out, false
	}
	return out, true
}

// maxRefinedPeriod bounds a refined bucket's period well inside a
// time.Duration.
const maxRefinedPeriod = 100 * 366 * 24 * time.Hour

// Refinement returns how many times longer the period of a split token
// bucket (or gcra) limit is counted over, with as many times the count:
// 1000, or the largest of 100, 10 and 1 that keeps the whole limit, so
// refined, valid. It depends only on l's count, period and burst.
func Refinement(l limit.Limit) int64 {
	for _, k := range []int64{1000, 100, 10} {
		if l.Period > maxRefinedPeriod/time.Duration(k) || l.Count > math.MaxInt64/k {
			continue
		}
		r := l
		r.Algorithm, r.Burst = limit.TokenBucket, l.EffectiveBurst()
		r.Period, r.Count = l.Period*time.Duration(k), l.Count*k
		if r.Validate() == nil {
			return k
		}
	}
	return 1
}

// mulDiv returns ⌊n × share / Whole⌋ for n ≥ 0 without overflow.
func mulDiv(n int64, share uint32) int64 {
	if n <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(n), uint64(share))
	q, _ := bits.Div64(hi, lo, Whole) // hi < Whole since share ≤ Whole
	return int64(q)
}

// Fraction formats a share as a decimal fraction of the whole limit, for
// logs and errors.
func Fraction(share uint32) string {
	return fmt.Sprintf("%.4f", float64(share)/Whole)
}
