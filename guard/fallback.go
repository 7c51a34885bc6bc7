package guard

import (
	"math"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// exactCount is the count a scaled bucket rate is written with when the
// share would otherwise be a fraction of a token per period: rounding a
// count this size errs by at most 0.05%.
const exactCount = 1000

// scale returns l as one gateway enforces it on its own: its rate and burst
// multiplied by share (slack / gateways), the burst at least one token.
//
// A bucket's rate is a count per period, both integers, so a share that
// leaves less than exactCount tokens per period stretches the period
// instead of rounding the count: 1 a second at a share of 1/150 becomes
// 1000 per 150 s, not 0 or 1 a second. Window algorithms keep their window,
// whose length is what their users reason about, and round the count, at
// least one.
func scale(l limit.Limit, share float64) limit.Limit {
	out := l
	burst := max(1, int64(math.Round(float64(l.EffectiveBurst())*share)))
	rate := float64(l.Count) * share
	switch l.Alg() {
	case limit.TokenBucket, limit.GCRA:
		out.Burst = burst
		out.Count = max(1, int64(math.Round(rate)))
		if rate < exactCount {
			stretch := int64(math.Ceil(exactCount / rate))
			stretched := out
			stretched.Count = int64(math.Round(rate * float64(stretch)))
			stretched.Period = l.Period * time.Duration(stretch)
			if stretched.Period/time.Duration(stretch) == l.Period && stretched.Validate() == nil {
				out = stretched
			}
		}
	default:
		out.Count = max(1, int64(math.Round(rate)))
	}
	return out
}

// share is the part of a limit one gateway enforces alone: slack over the
// fleet size, since behind a round-robin balancer each gateway sees about
// 1/gateways of a key's traffic, never perfectly evenly.
func share(slack float64, gateways int) float64 {
	return slack / float64(max(gateways, 1))
}
