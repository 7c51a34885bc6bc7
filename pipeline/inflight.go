package pipeline

import (
	"cmp"

	"github.com/sluice-rl/sluice/inflight"
)

// startSlots builds the concurrency slots of p: in Redis when p has it
// (sorted sets on Redis's clock), else counted in process.
func (p *Pipeline) startSlots(cfg Config) (err error) {
	ic := cfg.Inflight
	if ic.Fleet.IsZero() {
		ic.Fleet = p.fleet
	}
	ic.Logger = cmp.Or(ic.Logger, cfg.Logger)
	var b inflight.Backend
	if p.redis != nil {
		b = p.redis
	}
	p.slots, err = inflight.New(b, ic)
	return err
}

// Slots returns the pipeline's concurrency slots (package inflight), in
// Redis when the pipeline has it. Leases do not apply to them.
func (p *Pipeline) Slots() *inflight.Slots { return p.slots }
