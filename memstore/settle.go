package memstore

import (
	"context"
	"slices"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// Settle corrects a take whose cost was an estimate, once the true cost is
// known: delta is the true cost less the estimate taken. A positive delta
// is taken from every enforced limit of req whatever they hold, leaving a
// token bucket or GCRA limit in debt and a window full (SettleState says
// how). A negative delta is given back (GiveBack). Zero changes nothing.
// req.Cost is ignored;
// shadow limits are left alone. It never returns an error for a valid
// request.
func (s *Store) Settle(ctx context.Context, req *limit.Request, delta int64) (Settled, error) {
	if err := usable(req); err != nil {
		return Settled{}, err
	}
	switch {
	case delta == 0:
		return Settled{}, nil
	case delta < 0:
		back := *req
		back.Cost = -delta
		back.Limits = enforced(req.Limits)
		if len(back.Limits) == 0 {
			return Settled{}, nil
		}
		return Settled{}, s.GiveBack(ctx, &back)
	}
	sh := s.keys.Of(req.Key)
	sh.Lock()
	defer sh.Unlock()
	debt := charge(sh, s.clock(req), req, delta, false, nil)
	return Settled{Debt: debt}, nil
}

// Settled is what a settle did.
type Settled struct {
	// Debt is the most tokens any limit of the request was short of: a
	// positive settle took them anyway from a token bucket or GCRA limit,
	// and the key's next requests wait for them; a window, full, could not
	// take them. Zero when every limit had the tokens, and for a give-back.
	Debt int64
}

// enforced returns ls without its shadow limits, sharing ls's memory when
// it has none.
func enforced(ls []limit.Limit) []limit.Limit {
	shadow := func(l limit.Limit) bool { return l.Shadow }
	if !slices.ContainsFunc(ls, shadow) {
		return ls
	}
	return slices.DeleteFunc(slices.Clone(ls), shadow)
}

// charge takes delta more tokens at now, whatever they hold, from req's
// enforced limits, or with refusals from those that charge refusals
// (limit.Limit.ChargesRefusals), leaving debt where a limit is short. The
// caller holds sh's lock. It returns the most tokens any limit was short
// of and, for limit idx (-1 for none), the ms until a take of req's cost
// fits afterwards.
func charge(sh *stripe, now int64, req *limit.Request, delta int64, refusals bool, retries []int64) (debt int64) {
	e := live(sh, now, req.Key)
	if e == nil {
		e = &entry{}
		sh.M[req.Key] = e
	}
	for i := range req.Limits {
		l := &req.Limits[i]
		if l.Shadow || refusals && !l.ChargesRefusals() {
			continue
		}
		var st limit.State
		at := e.find(l)
		if at >= 0 && e.slots[at].expires > now {
			st = e.slots[at].state
		}
		next, ttl, short := SettleState(l, &st, now, delta)
		debt = max(debt, short)
		if retries != nil {
			retries[i] = retryAfter(l, &next, now, req.EffectiveCost())
		}
		if ttl == 0 {
			continue // a full window: nothing to write
		}
		e.write(l, at, next, now+ttl)
	}
	return debt
}

// chargeOwed charges req.Refused, the cost of refusals answered without
// the store, to req's limits that count refusals, before req is decided,
// and reports whether a refusal of req charges any limit. The caller holds
// sh's lock.
func chargeOwed(sh *stripe, now int64, req *limit.Request) (counts bool) {
	counts = req.ChargesRefusals()
	if counts && req.Refused > 0 {
		charge(sh, now, req, req.Refused, true, nil)
	}
	return counts
}

// chargeRefusal charges refused request req's cost to its limits that
// count refusals, under the lock that refused it (the caller holds sh's),
// and moves d's (and its Results') retry time to when the request fits
// after that charge.
//
// Every charged limit that refused moves its own retry time, and the
// decision is the one that now waits longest, as redisstore's script
// answers: a client that waits the answer's RetryAfter is not refused
// again by a limit whose charge outlasted it.
func chargeRefusal(sh *stripe, now int64, req *limit.Request, d *limit.Decision, rs []limit.Result) {
	var buf [8]int64
	retries := buf[:]
	if len(req.Limits) > len(buf) {
		retries = make([]int64, len(req.Limits))
	}
	retries = retries[:len(req.Limits)]
	charge(sh, now, req, req.EffectiveCost(), true, retries)
	if d.RetryAfter == limit.Never {
		return
	}
	if rs == nil { // one enforced limit: the decision is its answer
		if wait := time.Duration(retries[0]) * time.Millisecond; wait > d.RetryAfter {
			d.RetryAfter, d.Remaining = wait, 0
		}
		return
	}
	best := -1
	for i := range rs {
		r, l := &rs[i], &req.Limits[i]
		if l.Shadow || r.Allowed {
			continue
		}
		if wait := time.Duration(retries[i]) * time.Millisecond; wait > r.RetryAfter {
			r.RetryAfter, r.Remaining = wait, 0
		}
		// The first refusal that waits longest decides, as limit.Decide
		// picks it.
		if best < 0 || r.RetryAfter > rs[best].RetryAfter {
			best = i
		}
	}
	if best >= 0 {
		d.Index, d.RetryAfter, d.Remaining, d.ResetAfter = best, rs[best].RetryAfter, rs[best].Remaining, rs[best].ResetAfter
	}
}

// retryAfter returns the ms until a take of cost fits token bucket or GCRA
// limit l in state s at now: limit.Evaluate's answer, and for a token
// bucket in debt (its last take in the future) the time until then too,
// which Evaluate, reading such a bucket as empty, leaves out.
func retryAfter(l *limit.Limit, s *limit.State, now, cost int64) int64 {
	o := limit.Evaluate(l, s, now, cost)
	if o.Allowed || o.RetryAfter < 0 {
		return 0
	}
	if l.Alg() == limit.TokenBucket && s.B > now {
		return o.RetryAfter + s.B - now
	}
	return o.RetryAfter
}

// SettleState returns the state of limit l after taking cost more tokens
// from state s at now whatever it holds, how long to keep it (ms; 0 to
// leave s as it is), and how many tokens it was short of. It is the
// arithmetic redisstore's charge (lua/take.lua) does, so that the stores
// agree.
//
// A window (fixed_window, sliding_window, sliding_log) takes as much of
// cost as it has room for: its count never goes above the limit, and what
// did not fit is reported short but not kept as debt, since a window
// counts requests until it ends, not a rate a debt could be paid at.
//
// Debt is at most one burst: a key is never kept out longer than twice
// the time its bucket takes to fill, however much it was charged. A token
// bucket in debt holds no credits and a last take in the future:
// it refills from then, so the debt is paid before any token is, and it
// answers a take meanwhile as empty (its retry time then counts from the
// end of the debt, which the answer does not know: a client told to retry
// early is refused again). Charges add up: a bucket already in debt is
// charged its debt and the new cost, still at most one burst. GCRA's
// theoretical arrival time moves past the burst's reach, which GCRA
// answers exactly.
func SettleState(l *limit.Limit, s *limit.State, now, cost int64) (next limit.State, ttl, debt int64) {
	switch l.Alg() {
	case limit.FixedWindow, limit.SlidingWindow, limit.SlidingLog:
		// As much of cost as the window has room for: a window holds no
		// debt, and its count never goes above the limit.
		c := min(cost, l.Count)
		o := limit.Evaluate(l, s, now, c)
		if !o.Allowed {
			if c = o.Remaining; c <= 0 {
				return *s, 0, cost
			}
			o = limit.Evaluate(l, s, now, c)
		}
		return o.Next, o.TTL, cost - c
	}
	// More than two bursts leaves the same state as two: one burst spent
	// and one of debt. Capped, cost × period stays exact.
	cost = min(cost, 2*l.EffectiveBurst())
	if l.Alg() == limit.GCRA {
		perMs, perToken := l.Unit(), tokenUnits(l)
		at := now * perMs
		tat := at
		if s.Exists && s.A > at {
			tat = s.A
		}
		capacity := l.EffectiveBurst() * perToken
		tat = min(tat+cost*perToken, at+2*capacity) // at most one burst of debt
		if over := tat - at - capacity; over > 0 {
			debt = (over + perToken - 1) / perToken
		}
		return limit.State{Exists: true, A: tat}, max((tat-at+perMs-1)/perMs, 1), debt
	}
	p := l.PeriodMillis()
	capacity := l.EffectiveBurst() * p
	credits := capacity
	if s.Exists {
		credits = min(s.A, capacity)
		if elapsed := now - s.B; elapsed > 0 {
			credits = min(credits+elapsed*l.Count, capacity)
		} else if elapsed < 0 {
			// In debt until s.B: the debt counts against this charge, so
			// that charges add up (to at most one burst).
			credits = -min(-elapsed, full(l)) * l.Count
		}
	}
	need := cost * p
	if credits >= need {
		left := credits - need
		return limit.State{Exists: true, A: left, B: now}, max((capacity-left+l.Count-1)/l.Count, 1), 0
	}
	short := min(need-credits, capacity) // at most one burst of debt
	wait := (short + l.Count - 1) / l.Count
	return limit.State{Exists: true, A: 0, B: now + wait}, wait + full(l), (short + p - 1) / p
}

// full returns the ms a token bucket takes to fill from empty.
func full(l *limit.Limit) int64 {
	return (l.EffectiveBurst()*l.PeriodMillis() + l.Count - 1) / l.Count
}
