package gateway

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/rules"
)

// countRefusal spends refused request req's cost from the limits of res
// whose rules count refusals (rules.RefusalsCount), through the Settler,
// leaving debt of at most one burst, and moves d's retry time to when the
// request fits after that debt: a client that waits it passes, one that
// retries sooner is refused and charged again. Only refusals the shared
// store made count: a refusal the lease layer remembers, or one of this
// gateway's local answers, costs no call, so that the refusal cache still
// spares the shared store a client that ignores 429. Only token buckets
// and GCRA count; a rule's window limits refuse for free.
func (l *Limiter) countRefusal(cl call, res *rules.Resolution, req *limit.Request, d *limit.Decision, src limit.Source) {
	if l.settler == nil {
		return
	}
	switch src {
	case limit.FromRedis, limit.FromMemory, limit.FromStore:
	default:
		return
	}
	var buf [4]limit.Limit
	counted := buf[:0]
	refusing := false
	for i, r := range res.Rules {
		if a := res.Limits[i].Alg(); r.CountsRefusals() && (a == limit.TokenBucket || a == limit.GCRA) {
			counted = append(counted, res.Limits[i])
			refusing = refusing || i == d.Index
		}
	}
	if len(counted) == 0 {
		return
	}
	cost := req.EffectiveCost()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(cl.r.Context()), cmp.Or(l.timeout, settleTimeout))
	defer cancel()
	st, err := l.settler.Settle(ctx, &limit.Request{Key: req.Key, Cost: cost, Limits: counted}, cost)
	if err != nil {
		l.metrics.settled("error")
		l.metrics.storeError()
		l.logDecision(cl, slog.LevelWarn, "counting a refusal failed; it took nothing", logLine{outcome: "settle", err: err})
		return
	}
	l.metrics.settled("refusal")
	if !refusing {
		return
	}
	// The refusing limit now lacks its debt and the request's cost: the
	// time they take to refill is the retry time.
	lim := &res.Limits[d.Index]
	ms := ((st.Debt+cost)*lim.PeriodMillis() + lim.Count - 1) / lim.Count
	d.RetryAfter = max(d.RetryAfter, time.Duration(ms)*time.Millisecond)
	d.Remaining = 0
}
