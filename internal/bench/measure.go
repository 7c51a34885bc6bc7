package bench

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/pipeline"
)

// Capacity is what a short run measured on this machine, for `sluice plan
// --measure`.
type Capacity struct {
	// ScriptsPerShard is the limiter scripts a second one Redis server ran
	// when every request called it (per-request mode, as many callers as
	// it would take), with the load generator on the same machine.
	ScriptsPerShard float64
	// GatewayRPS is the decisions a second one gateway's stack (leases and
	// refusal cache over Redis, the production default) made over 1,000
	// keys taken in turn: the decision alone, without HTTP.
	GatewayRPS float64
	// StormCallsPerRequest is Redis calls per request of a retry storm at
	// 300 times a key's limit: without the refusal cache (leases only) and
	// with it.
	StormCallsPerRequest, StormCallsPerRequestCached float64
	// Seconds is how long each measurement ran.
	Seconds float64
}

// MeasureCapacity runs three short measurements against the Redis at
// target.Addrs (one standalone server is what "a shard" means here), each
// for d (zero means 1 s): script calls a second at full load, one
// gateway's decisions a second, and a retry storm with and without the
// refusal cache.
func MeasureCapacity(ctx context.Context, target Target, pcfg pipeline.Config, d time.Duration) (Capacity, error) {
	d = cmp.Or(d, time.Second)
	c := Capacity{Seconds: d.Seconds()}
	pcfg.Redis.Addrs = target.Addrs
	pcfg.Fleet.Gateways = 1
	limits := []limit.Limit{{Name: "s", Count: 1_000_000, Period: time.Second}}
	closed := func(mode Mode, keys int) (Result, int64, error) {
		s, err := newStack(ctx, pcfg, mode)
		if err != nil {
			return Result{}, 0, err
		}
		defer s.close()
		if s.redis != nil && !s.redis.Connected() {
			return Result{}, 0, fmt.Errorf("redis %v cannot be reached", target.Addrs)
		}
		counter, err := newCallCounter(ctx, target.Addrs, pcfg.Redis)
		if err != nil {
			return Result{}, 0, err
		}
		defer counter.close()
		r := Run(ctx, Config{Concurrency: 32, Duration: d}, StoreOp(s, keys, limits))
		calls, err := counter.read(ctx)
		// A few requests shed at full load are what full load is; a run
		// that mostly failed measured nothing.
		if r.Errors > r.Ops/10 {
			return r, calls, fmt.Errorf("%d of %d requests failed; first: %w", r.Errors, r.Ops, r.FirstError)
		}
		return r, calls, err
	}
	r, calls, err := closed(PerRequest, 10_000)
	if err != nil {
		return c, fmt.Errorf("measure a shard: %w", err)
	}
	c.ScriptsPerShard = float64(calls) / r.Elapsed.Seconds()
	if c.ScriptsPerShard == 0 {
		return c, fmt.Errorf("measure a shard: Redis counted no script calls")
	}
	if r, _, err = closed(LeasesCache, 1000); err != nil {
		return c, fmt.Errorf("measure a gateway: %w", err)
	}
	c.GatewayRPS = float64(r.Ops-r.Errors) / r.Elapsed.Seconds()
	storm, _ := SelectScenarios(Scenarios(3000), "storm")
	rep, err := RunFleet(ctx, FleetConfig{Target: target, Gateways: 4, Workers: 16, Duration: d, Rate: 3000,
		Modes: []Mode{Leases, LeasesCache}, Pipeline: pcfg}, storm)
	if err != nil {
		return c, fmt.Errorf("measure a retry storm: %w", err)
	}
	ms := rep.Scenarios[0].Modes
	c.StormCallsPerRequest, c.StormCallsPerRequestCached = ms[0].CallsPerRequest, ms[1].CallsPerRequest
	return c, nil
}
