package memstore

import (
	"context"
	"fmt"

	"github.com/sluice-rl/sluice/limit"
)

// TakeUpTo implements limit.Granter: how a token lease draws a batch. The
// whole grant happens under the key's lock, so it is the most every limit
// could spare at that instant. Shadow limits (limit.Limit.Shadow) take the
// cost, once, and never limit the grant.
func (s *Store) TakeUpTo(_ context.Context, req *limit.Request, want int64) (granted int64, d limit.Decision, err error) {
	if err := usable(req); err != nil {
		return 0, limit.Decision{}, err
	}
	if want < 1 {
		return 0, limit.Decision{}, fmt.Errorf("memstore: want %d tokens: must be at least 1", want)
	}
	granted, d = s.TakeUpToAt(s.clock(req), req, want)
	return granted, d, nil
}

// TakeUpToAt is TakeUpTo at an explicit time in Unix milliseconds. req must
// be valid.
//
// A refused attempt takes nothing and names how many tokens its limit
// holds, so the next, smaller one either fits every limit or names a
// tighter one: there are at most about as many attempts as limits.
func (s *Store) TakeUpToAt(now int64, req *limit.Request, want int64) (int64, limit.Decision) {
	cost := req.EffectiveCost()
	sh := s.keys.Of(req.Key)
	sh.Lock()
	defer sh.Unlock()
	var stack [8]limit.Result
	rs := results(stack[:0], req)
	counts := chargeOwed(sh, now, req)
	for try := max(want, cost); try > cost; {
		d := take(sh, now, req, try, false, rs)
		if d.Allowed {
			takeShadow(sh, now, req, &d, rs)
			d.Results = limit.NewResults(rs)
			return try, d
		}
		try = min(try-1, d.Remaining)
	}
	d := take(sh, now, req, cost, false, rs)
	if counts && !d.Allowed {
		chargeRefusal(sh, now, req, &d, rs)
	}
	takeShadow(sh, now, req, &d, rs)
	d.Results = limit.NewResults(rs)
	if !d.Allowed {
		return 0, d
	}
	return cost, d
}
