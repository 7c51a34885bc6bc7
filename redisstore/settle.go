package redisstore

import (
	"context"
	"fmt"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
)

// Settle corrects a take whose cost was an estimate, once the true cost is
// known, in one call on the key's node: delta is the true cost less the
// estimate. A positive delta is taken from every enforced limit whatever
// it holds, leaving a limit that is short in debt (Settled.Debt), so the
// key's next requests wait until it has refilled; a negative one is given
// back (GiveBack), never above a limit's burst nor a window's count below
// zero. A window takes as much of a positive delta as it has room for,
// never counting above its limit (memstore.Store.Settle). It runs in the
// take's own library (lua/take.lua's charge), whose arithmetic is
// memstore.SettleState's. req.Cost is ignored and shadow limits are left
// alone. Errors are Take's.
func (s *Store) Settle(ctx context.Context, req *limit.Request, delta int64) (memstore.Settled, error) {
	lims := make([]limit.Limit, 0, len(req.Limits))
	for _, l := range req.Limits {
		if !l.Shadow {
			lims = append(lims, l)
		}
	}
	if delta == 0 || len(lims) == 0 {
		return memstore.Settled{}, nil
	}
	if delta < 0 {
		return memstore.Settled{}, s.GiveBack(ctx, &limit.Request{Key: req.Key, Cost: -delta, Limits: lims})
	}
	if s.closed.Load() {
		return memstore.Settled{}, errClosed
	}
	l := s.link.Load()
	if l == nil {
		return memstore.Settled{}, s.errNotConnected()
	}
	var now int64 // 0 asks the script to read Redis's clock
	if s.now != nil {
		now = s.now().UnixMilli()
	}
	sc := s.scratch.Get().(*scratch)
	defer s.putScratch(sc)
	sc.build(s.prefix, &limit.Request{Key: req.Key, Cost: delta, Limits: lims}, now, 0)
	short, err := s.exec(ctx, l, sc.keys, sc.args).AsInt64()
	if err != nil {
		return memstore.Settled{}, fmt.Errorf("redisstore: settle %d more tokens in slot %d: %w: %w", delta, Slot(req.Key), classify(err), err)
	}
	return memstore.Settled{Debt: short}, nil
}
