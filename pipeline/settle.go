package pipeline

import (
	"context"
	"errors"

	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
)

// Settle corrects a take of req whose cost was an estimate, once the true
// cost is known (gateway endpoints with a cost header): delta is the true
// cost less the estimate. It settles against this gateway's leased tokens
// first (lease.Store.SettleLocal), with no Redis call, and the rest in the
// shared store (redisstore.Store.Settle, memstore.Store.Settle). With
// Config.Shares it fails, and the estimate stands.
func (p *Pipeline) Settle(ctx context.Context, req *limit.Request, delta int64) (memstore.Settled, error) {
	if p.shares != nil {
		return memstore.Settled{}, errors.New("pipeline: settle does not go through region shares; the estimate stands")
	}
	if ls, ok := p.top.(*lease.Store); ok {
		if delta = ls.SettleLocal(req, delta); delta == 0 {
			return memstore.Settled{}, nil
		}
	}
	if p.redis != nil {
		return p.redis.Settle(ctx, req, delta)
	}
	if ms, ok := p.top.(*memstore.Store); ok {
		return ms.Settle(ctx, req, delta)
	}
	return memstore.Settled{}, errors.New("pipeline: no store to settle in")
}
