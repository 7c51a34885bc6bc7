package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
)

//go:embed lua/settle.lua
var settleScript string

// settle is lua/settle.lua, run by digest; like giveBack it is not part of
// the take's library, since only a settle calls it.
var settle = rueidis.NewLuaScript(settleScript)

// Settle corrects a take whose cost was an estimate, once the true cost is
// known, in one call on the key's node: delta is the true cost less the
// estimate. A positive delta is taken from every enforced limit whatever
// it holds, leaving a limit that is short in debt (Settled.Debt), so the
// key's next requests wait until it has refilled; a negative one is given
// back (GiveBack), never above a limit's burst. The arithmetic is
// memstore.SettleState's. Only token buckets and GCRA settle
// (memstore.CanSettle); req.Cost is ignored and shadow limits are left
// alone. Errors are Take's.
func (s *Store) Settle(ctx context.Context, req *limit.Request, delta int64) (memstore.Settled, error) {
	if err := req.Validate(); err != nil {
		return memstore.Settled{}, err
	}
	if err := memstore.CanSettle(req); err != nil {
		return memstore.Settled{}, err
	}
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
	keys := make([]string, len(lims))
	args := make([]string, 2+len(lims))
	args[0] = strconv.FormatInt(delta, 10)
	if s.now != nil {
		args[1] = strconv.FormatInt(s.now().UnixMilli(), 10)
	}
	for i := range lims {
		lim := &lims[i]
		keys[i] = string(appendKey(nil, s.prefix, req.Key, lim))
		args[2+i] = fmt.Sprintf("%s %d %d %d", lim.Alg(), lim.Count, lim.PeriodMillis(), lim.EffectiveBurst())
	}
	short, err := settle.Exec(ctx, l.client, keys, args).AsInt64()
	if err != nil {
		return memstore.Settled{}, fmt.Errorf("redisstore: settle %d more tokens in slot %d: %w: %w", delta, Slot(req.Key), classify(err), err)
	}
	return memstore.Settled{Debt: short}, nil
}
