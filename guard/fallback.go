package guard

import (
	"math"

	"github.com/sluice-rl/sluice/limit"
)

// scale returns l as one gateway enforces it on its own: l.Scale at part,
// rounded up, so that a fleet answering alone during an outage errs over
// its limit, never under it (docs/failure-modes.md). A bucket keeps its
// rate to a thousandth of a token per period (1 a second at a part of
// 1/150 is 7 per 1000 s, not 0 or 1 a second) and gcra becomes the token
// bucket it answers as; window algorithms keep their window and round the
// count up. A limit at the edge of what Validate accepts, which cannot be
// scaled exactly, is enforced whole, which errs over too.
func scale(l limit.Limit, part limit.Fraction) limit.Limit {
	if s, ok := l.Scale(part, limit.RoundUp); ok {
		return s
	}
	return l
}

// share is the part of a limit one gateway enforces alone: slack over the
// fleet size, since behind a round-robin balancer each gateway sees about
// 1/gateways of a key's traffic, never perfectly evenly. Slack counts in
// millionths, rounded up.
func share(slack float64, gateways int) limit.Fraction {
	const million = 1_000_000
	return limit.Fraction{Num: int64(min(math.Ceil(slack*million), 1<<40)), Den: million * int64(max(gateways, 1))}
}
