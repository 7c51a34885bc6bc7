package memstore

import (
	"context"

	"github.com/sluice-rl/sluice/limit"
)

// GiveBack returns req's cost to every limit of req, undoing a take that
// was allowed: for a caller that took several keys apart and lets go of
// the ones that granted when another refused. No limit is given more than
// it holds (a bucket never above its burst, a window's count never below
// zero), and a state that expired meanwhile, full already, is left alone.
// It never returns an error for a valid request.
func (s *Store) GiveBack(_ context.Context, req *limit.Request) error {
	if err := usable(req); err != nil {
		return err
	}
	now := s.clock(req)
	cost := req.EffectiveCost()
	sh := s.keys.Of(req.Key)
	sh.Lock()
	defer sh.Unlock()
	e := sh.M[req.Key]
	if e == nil {
		return nil
	}
	for i := range req.Limits {
		l := &req.Limits[i]
		at := e.find(l)
		if at < 0 || e.slots[at].expires <= now {
			continue
		}
		st := &e.slots[at].state
		p := l.PeriodMillis()
		switch l.Alg() {
		case limit.TokenBucket:
			st.A = min(st.A+cost*p, l.EffectiveBurst()*p) // credits
		case limit.GCRA:
			st.A -= cost * tokenUnits(l) // the theoretical arrival time
		case limit.FixedWindow, limit.SlidingWindow:
			st.B = max(st.B-cost, 0) // this window's count
		case limit.SlidingLog:
			// The newest admissions are this take's; all count alike.
			st.Log = st.Log[:max(len(st.Log)-int(cost), 0)]
		}
	}
	return nil
}

// tokenUnits is how many units of GCRA's timestamp one token is: the period
// in units of 1/l.Unit() ms.
func tokenUnits(l *limit.Limit) int64 { return l.PeriodMillis() * l.Unit() / l.Count }
