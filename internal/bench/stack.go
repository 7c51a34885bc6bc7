package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/share"
)

// Mode is how each gateway of a fleet run counts: which layers of the
// production stack are on.
type Mode string

// The modes a fleet run compares on the same traffic.
const (
	// PerRequest checks every request in Redis (pipeline.Config.NoLeases).
	PerRequest Mode = "per-request"
	// Leases spends leased tokens from memory but asks Redis again for
	// every refused request: the lease layer with its refusal cache
	// defeated (see stack).
	Leases Mode = "leases"
	// LeasesCache is the production default: leases and the refusal cache.
	LeasesCache Mode = "leases+cache"
)

// Modes lists every mode, in the order reports show them.
var Modes = []Mode{PerRequest, Leases, LeasesCache}

// ParseModes reads a comma-separated list of modes; empty or "all" means
// every mode.
func ParseModes(s string) ([]Mode, error) {
	if s == "" || s == "all" {
		return Modes, nil
	}
	var out []Mode
	for m := range strings.SplitSeq(s, ",") {
		switch md := Mode(strings.TrimSpace(m)); md {
		case PerRequest, Leases, LeasesCache:
			out = append(out, md)
		default:
			return nil, fmt.Errorf("unknown mode %q (want per-request, leases, leases+cache or all)", m)
		}
	}
	return out, nil
}

// stack is one virtual gateway's decision stack and what closes it.
type stack struct {
	limit.Store
	redis  *redisstore.Store
	shares *share.Store // nil without pipeline.Config.Shares
	close  func()
}

// newStack builds one gateway's stack for mode. PerRequest and LeasesCache
// are pipeline.New, as the gateway builds it. Leases has no switch in
// pipeline.Config (the lease layer always caches refusals), so it is the
// same layers put together here, with a layer between the guard and the
// leases that drops the retry time from Redis's refusals: the lease layer
// remembers a refusal only until its retry time, so it remembers none,
// and asks Redis again for each refused request (one call at a time per
// key and gateway, as it does for any refused key).
func newStack(ctx context.Context, cfg pipeline.Config, mode Mode) (*stack, error) {
	if mode != Leases {
		cfg.NoLeases = mode == PerRequest
		p, err := pipeline.New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return &stack{Store: p, redis: p.Redis(), shares: p.Shares(), close: p.Close}, nil
	}
	rs, err := redisstore.New(ctx, cfg.Redis)
	if err != nil {
		return nil, err
	}
	gcfg, lcfg := cfg.Guard, cfg.Lease
	gcfg.Fleet, lcfg.Fleet = cfg.Fleet, cfg.Fleet
	g, err := guard.New(rs, gcfg)
	if err != nil {
		rs.Close()
		return nil, err
	}
	l, err := lease.New(forgetful{g}, lcfg)
	if err != nil {
		g.Close()
		rs.Close()
		return nil, err
	}
	s := &stack{Store: l, redis: rs, close: func() { l.Close(); g.Close(); rs.Close() }}
	if cfg.Shares != nil {
		// As pipeline.New puts it: the region's share on top.
		if s.shares, err = share.New(l, *cfg.Shares); err != nil {
			s.close()
			return nil, err
		}
		s.Store = s.shares
	}
	return s, nil
}

// forgetful passes every call to the guard and drops the retry time of
// its refusals, which defeats the refusal cache above it.
type forgetful struct{ g *guard.Store }

func (f forgetful) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	d, err := f.g.Take(ctx, req)
	if !d.Allowed && d.RetryAfter > 0 {
		d.RetryAfter = 0
	}
	return d, err
}

func (f forgetful) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error) {
	n, d, err := f.g.TakeUpTo(ctx, req, want)
	if !d.Allowed && d.RetryAfter > 0 {
		d.RetryAfter = 0
	}
	return n, d, err
}
