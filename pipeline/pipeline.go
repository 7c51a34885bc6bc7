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
// Without Redis it is the in-process memstore alone: exact for one process,
// with nothing to guard or lease. Every Decision says which layer answered
// (limit.Source).
package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/guard"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
	"github.com/sluice-rl/sluice/redisstore"
	"github.com/sluice-rl/sluice/share"
)

// Config configures a Pipeline. Every zero field means its default: the
// guard's and the lease store's, which this package names in one place
// (Defaults).
type Config struct {
	// Redis is how to reach the shared store. With no Addrs the pipeline
	// counts in process (memstore) and the fields below but Logger do not
	// apply.
	Redis redisstore.Config
	// The guard's settings, as guard.Config documents them: when a slow
	// call's node is checked (Timeout, 5ms), how long a silent node takes
	// to be judged down (DownAfter: 75ms, or three Timeouts when longer),
	// how long a call may queue in this process before it is shed
	// (MaxQueue, 1s), the failures in a row that open a breaker
	// (TripAfter, 5), how long it stays open (Pause, 2s), and the local
	// fallback's slack (Slack, 2).
	Timeout, DownAfter, MaxQueue, Pause time.Duration
	TripAfter                           int
	Slack                               float64
	// Gateways is the fleet size until Fleet knows it. With neither, the
	// gateways count themselves through Redis: each writes an entry to one
	// shared log (key "sluice:fleet") every second, and the live entries
	// say how many share the Redis, gone ones dropping out within 3 s.
	// Until Redis has answered once, the size is 1 (leases and outage
	// shares sized for one gateway), with a warning. Give every gateway of
	// a fleet the same setting: a gateway told its size does not write to
	// the log.
	Gateways int
	// Fleet, if set, reports the current fleet size (the rules service's
	// count); below 1 means unknown, and Gateways is used.
	Fleet func() int
	// NoLeases checks every request in Redis: no leases, no refusal cache.
	NoLeases bool
	// Shares, if set, puts this region's share of every global limit on
	// top of the stack (package share), in process as over Redis: the
	// layers below count the region's share, so leases and the local
	// fallback split it among this region's fleet. Feed it tables through
	// Pipeline.Shares. Nil means limits are enforced whole.
	Shares *share.Config
	// Logger receives the layers' events. Nil discards.
	Logger *slog.Logger
	// Registerer receives the layers' metrics. Nil registers none.
	Registerer prometheus.Registerer
}

// Defaults are the values Config's zero fields stand for. DownAfter has
// none of its own: zero follows Timeout (see guard.Config.DownAfter), so
// that a longer Timeout never leaves it below.
var Defaults = struct {
	Timeout, MaxQueue, Pause time.Duration
	TripAfter                int
	Slack                    float64
}{guard.DefaultTimeout, guard.DefaultMaxQueue, guard.DefaultPause, guard.DefaultTripAfter, guard.DefaultSlack}

// Pipeline is the decision stack: a limit.Store whose Decisions say which
// layer answered. It is safe for concurrent use; Close releases it.
type Pipeline struct {
	top     limit.Store
	shares  *share.Store      // nil without Config.Shares
	redis   *redisstore.Store // nil in process
	guard   *guard.Store      // nil in process
	closers []func()          // innermost last
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
	if err != nil || cfg.Shares == nil {
		return p, err
	}
	sc := *cfg.Shares
	if sc.Logger == nil {
		sc.Logger = cfg.Logger
	}
	if sc.Registerer == nil {
		sc.Registerer = cfg.Registerer
	}
	if p.shares, err = share.New(p.top, sc); err != nil {
		p.Close()
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	p.top = p.shares
	return p, nil
}

// Shares returns the region share layer on top of the stack, or nil
// without Config.Shares.
func (p *Pipeline) Shares() *share.Store { return p.shares }

// newStack builds the stack below the region share layer.
func newStack(ctx context.Context, cfg Config) (*Pipeline, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Redis.Addrs) == 0 {
		return &Pipeline{top: memstore.New(memstore.Config{})}, nil
	}
	if cfg.Gateways < 0 {
		return nil, fmt.Errorf("pipeline: %d gateways: must not be negative", cfg.Gateways)
	}
	if cfg.Redis.Logger == nil {
		cfg.Redis.Logger = log
	}
	rs, err := redisstore.New(ctx, cfg.Redis)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{redis: rs, closers: []func(){rs.Close}}
	if cfg.Fleet == nil && cfg.Gateways == 0 {
		c := startCensus(ctx, rs, log)
		cfg.Fleet, p.closers = c.fleet, append([]func(){c.close}, p.closers...)
		if c.fleet() == 0 {
			log.LogAttrs(ctx, slog.LevelWarn, "fleet size not given and not yet counted through Redis: until it is, leases and outage limits "+
				"are sized for one gateway; pass --gateways N or follow the rules service (--rules-url)")
		}
	}
	g, err := guard.New(rs, guard.Config{
		Timeout: cfg.Timeout, DownAfter: cfg.DownAfter, MaxQueue: cfg.MaxQueue, TripAfter: cfg.TripAfter, Pause: cfg.Pause, Slack: cfg.Slack,
		Gateways: cfg.Gateways, Fleet: cfg.Fleet, Logger: log, Registerer: cfg.Registerer,
	})
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	p.guard = g
	p.top, p.closers = g, append([]func(){g.Close}, p.closers...)
	if cfg.NoLeases {
		return p, nil
	}
	l, err := lease.New(g, lease.Config{Gateways: cfg.Gateways, Fleet: cfg.Fleet, Logger: log, Registerer: cfg.Registerer})
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	p.top, p.closers = l, append([]func(){l.Close}, p.closers...)
	return p, nil
}

// Take implements limit.Store through every layer.
func (p *Pipeline) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	return p.top.Take(ctx, req)
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

// ErrShed and ErrUnavailable are the errors of a shed request and of a
// fail-closed limit whose Redis node cannot answer: guard's, for callers
// that import only this package.
var (
	ErrShed        = guard.ErrShed
	ErrUnavailable = guard.ErrUnavailable
)
