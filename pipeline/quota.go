package pipeline

import (
	"cmp"
	"context"

	"github.com/sluice-rl/sluice/quota"
	"github.com/sluice-rl/sluice/redisstore"
)

// counts is the quota package's Adder over the Redis store: each counter
// sits in its request key's slot (redisstore.Store.CounterKey).
type counts struct{ rs *redisstore.Store }

// AddCounts implements quota.Adder in one round trip per Redis node.
func (c counts) AddCounts(ctx context.Context, adds []quota.Add) ([]int64, error) {
	cs := make([]redisstore.Count, len(adds))
	for i, a := range adds {
		cs[i] = redisstore.Count{Key: a.Key, Counter: a.Counter, Delta: a.Delta, ExpireAt: a.ExpireAt}
	}
	if err := c.rs.AddCounts(ctx, cs); err != nil {
		return nil, err
	}
	out := make([]int64, len(cs))
	for i := range cs {
		out[i] = cs[i].Total
	}
	return out, nil
}

// startQuotas builds the quota batcher of p: over Redis when p has it,
// else over an in-process Memory.
func (p *Pipeline) startQuotas(cfg Config) error {
	var a quota.Adder = &quota.Memory{}
	if p.redis != nil {
		a = counts{p.redis}
	}
	qc := cfg.Quota
	if qc.Fleet.IsZero() {
		qc.Fleet = p.fleet
	}
	qc.Logger = cmp.Or(qc.Logger, cfg.Logger)
	b, err := quota.New(a, qc)
	if err != nil {
		return err
	}
	p.quotas, p.closers = b, append([]func(){b.Close}, p.closers...)
	return nil
}

// Quotas returns the pipeline's quota batcher: daily and monthly quotas
// counted in batches (package quota), over Redis when the pipeline has it.
func (p *Pipeline) Quotas() *quota.Batcher { return p.quotas }
