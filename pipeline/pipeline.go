// Package pipeline builds sluice's decision stack from one Config, the same
// way for the sluice binary and for a Go program that embeds the limiter.
//
// With Redis addresses the stack is, from the request down:
//
//	lease.Store      busy keys spend tokens leased in batches; keys Redis
//	                 refused are refused from memory until their retry time
//	guard.Store      a deadline judged by the node's wire, a breaker per
//	                 Redis node, the local fallback at slack/N of each limit,
//	                 fail-closed refusals, and shedding when this process is
//	                 too busy to read Redis's answers in time
//	redisstore.Store one script per call on the key's node
//
// With Config.Relay, the lease store draws from the data centre's relays
// (internal/relay, docs/relay.md) and from the guard while none answers.
//
// Without Redis it is the in-process memstore alone: exact for one process,
// with nothing to guard or lease. Every Decision says which layer answered
// (limit.Source).
package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/inflight"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/quota"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/share"
)

// Config configures a Pipeline. Every zero field means its default, which
// the package that owns the field documents and its constructor fills in,
// as httputil.ReverseProxy's zero fields do.
type Config struct {
	// Redis is how to reach the shared store. With no Addrs the pipeline
	// counts in process (memstore) and the fields below but Shares and
	// Logger do not apply.
	Redis redisstore.Config
	// Guard configures the guard over Redis: deadlines, breakers, the
	// local fallback (guard.Config documents each field and its default).
	// Leave its Fleet zero: the pipeline gives it Fleet. A nil Logger or
	// Registerer means this Config's.
	Guard guard.Config
	// Lease configures the token leases and the refusal cache over the
	// guard (lease.Config). Leave its Fleet zero: the pipeline gives it
	// Fleet. A nil Logger or Registerer means this Config's.
	Lease lease.Config
	// NoLeases checks every request in Redis: no leases, no refusal cache.
	NoLeases bool
	// Relay, with URLs, leases through this data centre's relays rather
	// than from Redis (docs/relay.md), and from Redis directly while none
	// answers. Its zero value leases from Redis.
	Relay Relay
	// Fleet is how many gateways share the limits, given to the guard and
	// the leases alike. Zero (neither Gateways nor Count) means counted
	// through Redis: each gateway writes an entry to one shared log (key
	// "sluice:fleet") every second, and the live entries say how many
	// share the Redis, gone ones dropping out within 3 s. Until Redis has
	// answered once, the size is 1 (leases and outage shares sized for one
	// gateway), with a warning. Give every gateway of a fleet the same
	// setting: a gateway told its size does not write to the log.
	Fleet limit.Fleet
	// Shares, if set, puts this region's share of every global limit on
	// top of the stack (package share), in process as over Redis: the
	// layers below count the region's share, so leases and the local
	// fallback split it among this region's fleet. Feed it tables through
	// Pipeline.Shares. Nil means limits are enforced whole.
	Shares *share.Config
	// Quota configures the batched counting of daily and monthly quotas
	// (package quota; Pipeline.Quotas). Its zero Fleet means Fleet.
	Quota quota.Config
	// Inflight configures concurrency limits (package inflight;
	// Pipeline.Slots): set its Timeout to the gateway's request timeout.
	// Its zero Fleet means Fleet.
	Inflight inflight.Config
	// Logger receives the layers' events. Nil discards.
	Logger *slog.Logger
	// Registerer receives the layers' metrics. Nil registers none.
	Registerer prometheus.Registerer
}

// Pipeline is the decision stack: a limit.Store whose Decisions say which
// layer answered. It is safe for concurrent use; Close releases it.
type Pipeline struct {
	top     limit.Store
	shares  *share.Store      // nil without Config.Shares
	redis   *redisstore.Store // nil in process
	guard   *guard.Store      // nil in process
	quotas  *quota.Batcher
	slots   *inflight.Slots
	lease   *lease.Store // nil in process or without leases
	fleet   limit.Fleet  // the fleet every layer was given, census included
	closers []func()     // innermost last
}

var _ limit.Store = (*Pipeline)(nil)

// New builds the stack cfg describes. With Redis it connects (each step
// bounded by Redis.DialTimeout or Redis.ConnTimeout, the whole by ctx) and
// loads the scripts on every node once. A Redis that cannot be reached
// does not fail New: the stack starts with its nodes down, answering their
// keys locally (fail-closed limits refuse), and connects in the background
// when Redis answers (Down reports it meanwhile). New fails for a
// configuration Redis refuses (a TLS handshake it fails, credentials) and
// when ctx ends first.
func New(ctx context.Context, cfg Config) (*Pipeline, error) {
	p, err := newStack(ctx, cfg)
	if err != nil {
		return nil, err
	}
	for _, start := range []func(Config) error{p.startSlots, p.startQuotas, p.startShares} {
		if err := start(cfg); err != nil {
			p.Close()
			return nil, fmt.Errorf("pipeline: %w", err)
		}
	}
	return p, nil
}

// startShares puts the region share layer on top of p, with Config.Shares.
func (p *Pipeline) startShares(cfg Config) (err error) {
	if cfg.Shares == nil {
		return nil
	}
	sc := *cfg.Shares
	if sc.GiveBack == nil && p.redis != nil {
		// The layers between share and Redis (guard, leases) give nothing
		// back; a grant goes back to Redis, where the take drew it from.
		sc.GiveBack = p.redis
	}
	sc.Logger, sc.Registerer = cmp.Or(sc.Logger, cfg.Logger), cmp.Or(sc.Registerer, cfg.Registerer)
	if p.shares, err = share.New(p.top, sc); err == nil {
		p.top = p.shares
	}
	return err
}

// Shares returns the region share layer on top of the stack, or nil
// without Config.Shares.
func (p *Pipeline) Shares() *share.Store { return p.shares }

// newStack builds the stack below the region share layer.
func newStack(ctx context.Context, cfg Config) (*Pipeline, error) {
	if err := cfg.Fleet.Validate(); err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	if !cfg.Guard.Fleet.IsZero() || !cfg.Lease.Fleet.IsZero() {
		return nil, errors.New("pipeline: Guard.Fleet or Lease.Fleet is set: give the fleet once, as Config.Fleet")
	}
	if len(cfg.Redis.Addrs) == 0 {
		return &Pipeline{top: memstore.New(memstore.Config{}), fleet: cfg.Fleet}, nil
	}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	cfg.Redis.Logger = cmp.Or(cfg.Redis.Logger, log)
	rs, err := redisstore.New(ctx, cfg.Redis)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{redis: rs, closers: []func(){rs.Close}}
	if err := registerWrites(cfg.Registerer, rs); err != nil {
		p.Close()
		return nil, err
	}
	if cfg.Fleet.IsZero() {
		c := startCensus(ctx, rs, log)
		cfg.Fleet.Count, p.closers = c.fleet, append([]func(){c.close}, p.closers...)
		if c.fleet() == 0 {
			log.LogAttrs(ctx, slog.LevelWarn, "fleet size not given and not yet counted through Redis: until it is, leases and outage limits "+
				"are sized for one gateway; pass --gateways N or follow the rules service (--rules-url)")
		}
	}
	p.fleet = cfg.Fleet
	gc := cfg.Guard
	gc.Fleet, gc.Logger, gc.Registerer = cfg.Fleet, cmp.Or(gc.Logger, log), cmp.Or(gc.Registerer, cfg.Registerer)
	g, err := guard.New(rs, gc)
	if err = p.push(g, err); err != nil {
		return nil, err
	}
	p.guard = g
	inner, err := p.relayOver(g, cfg, log)
	if err != nil || cfg.NoLeases {
		return p, err
	}
	lc := cfg.Lease
	lc.Fleet, lc.Logger, lc.Registerer = cfg.Fleet, cmp.Or(lc.Logger, log), cmp.Or(lc.Registerer, cfg.Registerer)
	l, err := lease.New(inner, lc)
	if err = p.push(l, err); err != nil {
		return nil, err
	}
	p.lease = l
	return p, nil
}

// push puts l, built with err, on top of the stack, to be closed first;
// when err is not nil it closes the stack and returns err.
func (p *Pipeline) push(l interface {
	limit.Store
	Close()
}, err error) error {
	if err != nil {
		p.Close()
		return fmt.Errorf("pipeline: %w", err)
	}
	p.top, p.closers = l, append([]func(){l.Close}, p.closers...)
	return nil
}

// Take implements limit.Store through every layer. It validates req once
// (limit.Request.Validate; errors match limit.ErrInvalid) before any layer
// sees it: the guard and the leases take valid requests and do not check
// them again. In process, memstore validates on its own.
func (p *Pipeline) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	if p.redis != nil {
		if err := req.Validate(); err != nil {
			return limit.Decision{}, err
		}
	}
	return p.top.Take(ctx, req)
}

// GiveBack returns the grants of a take of req that another part of the
// same answer undid (sluice rls gives back a request's granted descriptors
// when one refuses): through the region share layer when there is one, so
// that each limit is scaled as the take scaled it, else to Redis, else to
// the in-process store. A grant a lease answered goes back to Redis, which
// the lease drew it from.
func (p *Pipeline) GiveBack(ctx context.Context, req *limit.Request) error {
	switch {
	case p.shares != nil:
		return p.shares.GiveBack(ctx, req)
	case p.redis != nil:
		return p.redis.GiveBack(ctx, req)
	}
	if g, ok := p.top.(share.GiveBacker); ok {
		return g.GiveBack(ctx, req)
	}
	return errors.New("pipeline: the in-process store cannot give back")
}

// Redis returns the Redis store at the bottom of the stack, or nil when the
// pipeline counts in process. It is for operators' tools and tests (keys,
// nodes); requests go through Take.
func (p *Pipeline) Redis() *redisstore.Store { return p.redis }

// Guard returns the guard over Redis, or nil when the pipeline counts in
// process: its Config says the settings in force, defaults filled in, and
// its Breaker each node's state.
func (p *Pipeline) Guard() *guard.Store { return p.guard }

// Close stops the layers' background work and closes Redis connections,
// outermost first, so that nothing still running calls a closed layer.
// Close is idempotent.
func (p *Pipeline) Close() {
	cs := p.closers
	p.closers = nil
	for _, c := range cs {
		c()
	}
}

// registerWrites registers sluice_redis_writes_total, the Redis client's
// write(2) calls (redisstore.Store.Writes), with reg, if any. Over
// sluice_lease_store_calls_total it says how many takes share a write.
func registerWrites(reg prometheus.Registerer, rs *redisstore.Store) error {
	if reg == nil {
		return nil
	}
	c := prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "sluice", Subsystem: "redis", Name: "writes_total",
		Help: "Writes (write(2) calls) on the Redis client's connections: over sluice_lease_store_calls_total, how many takes share a write."},
		func() float64 { return float64(rs.Writes()) })
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("pipeline: register metrics: %w", err)
	}
	return nil
}
