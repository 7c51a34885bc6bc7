package share

import (
	"fmt"
	"math/bits"

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
// to at most Whole add up to at most l. The algorithms differ in how a
// share changes between calls with the same bucket:
//
//   - token_bucket keeps credits in tokens × period, which mean the same
//     under any rate, so a new share only changes how fast the bucket
//     refills and how much it may hold (a lowered burst clamps it).
//   - gcra keeps one timestamp counted in units that depend on the rate
//     (see [limit.Limit.Unit]), so a share that changed the rate would
//     start a fresh, full bucket at every rebalance. A split gcra limit is
//     therefore enforced as a token bucket of the same rate and burst,
//     which admits the same requests; its bucket is a different one from
//     the unsplit limit's, once, when splitting starts.
//   - the window algorithms (sliding_window, fixed_window, sliding_log)
//     keep counts of the current window, read under the new Count: a share
//     that grows in the middle of a window lets that window admit the new
//     share on top of what it already counted (see docs/regions.md for the
//     bound this gives).
func Scale(l limit.Limit, share uint32) (limit.Limit, bool) {
	if share > Whole {
		share = Whole
	}
	out := l
	out.Count = mulDiv(l.Count, share)
	if out.Count < 1 {
		return out, false
	}
	switch l.Alg() {
	case limit.TokenBucket, limit.GCRA:
		out.Algorithm = limit.TokenBucket
		out.Burst = mulDiv(l.EffectiveBurst(), share)
		if out.Burst < 1 {
			return out, false
		}
	}
	// A rounded-down rate can stretch a bucket's refill time past what
	// Validate accepts; such a share cannot be enforced as a limit.
	if out.Validate() != nil {
		return out, false
	}
	return out, true
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
