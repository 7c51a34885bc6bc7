// Package guard keeps the API up when the shared store is slow or down.
//
// A [Store] wraps the shared store (Redis) as a limit.Store. Every call gets
// a short deadline. A circuit breaker per shard opens after consecutive
// failures, so that while a shard is down no request waits on it; after a
// pause one probe call decides whether it is back. While a shard cannot
// answer, its keys are limited in the gateway's own memory at this
// gateway's share of each limit (slack / gateways, 2/N by default), so a
// runaway client stays within about twice its limit across the fleet and
// normal clients are rarely refused. A limit marked FailClosed (logins,
// password resets, SMS) refuses instead, with an error wrapping
// [ErrUnavailable].
//
// Every answer says where it came from ([Source]), so logs and metrics can
// tell a shared decision from a local guess.
package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
)

// Source says which path answered a request.
type Source string

// The paths a decision can come from. Store answers with FromRedis,
// FromLocalFallback and FromFailClosed; the lease store adds FromLease and
// FromRefusalCache.
const (
	// FromRedis is the shared store's own decision.
	FromRedis Source = "redis"
	// FromLease is a token this gateway leased from the shared store earlier.
	FromLease Source = "lease"
	// FromRefusalCache is a refusal remembered from the shared store until
	// its retry time.
	FromRefusalCache Source = "refusal-cache"
	// FromLocalFallback is the gateway's own share of the limit, enforced in
	// memory while the key's shard cannot answer.
	FromLocalFallback Source = "local-fallback"
	// FromFailClosed is a refusal because a FailClosed limit could not be
	// checked.
	FromFailClosed Source = "fail-closed"
)

// ErrUnavailable is wrapped by the error of a request refused because one of
// its limits fails closed and its shard cannot answer.
var ErrUnavailable = errors.New("shared rate limit store unavailable")

// Answer is a decision and where it came from.
type Answer struct {
	limit.Decision
	// Granted is how many tokens were taken: the request's cost or more when
	// allowed, zero when refused.
	Granted int64
	// Source is the path that decided.
	Source Source
}

// Remote is the shared store a Store guards: redisstore.Store in
// production. Both calls must honour the context's deadline.
type Remote interface {
	limit.Store
	TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error)
}

// Config configures a Store. The zero value gives the defaults.
type Config struct {
	// Timeout bounds each call to the shared store. Zero means 5ms: a
	// Redis call takes well under a millisecond, and waiting longer on
	// every request would turn a slow shard into a slow API. A caller's
	// own deadline that passes first while waiting on the shard counts as
	// a timeout of the shard, the same as this one.
	Timeout time.Duration
	// TripAfter is how many consecutive failures open a shard's breaker.
	// Zero means 5.
	TripAfter int
	// Pause is how long an open breaker answers locally before it lets one
	// probe through. Zero means 2s.
	Pause time.Duration
	// Slack multiplies each gateway's even share of a limit while it
	// enforces the limit alone, because traffic is never spread perfectly
	// evenly. Zero means 2.
	Slack float64
	// Gateways is the fleet size used when Fleet is nil or does not know.
	// Zero means 1.
	Gateways int
	// Fleet, if set, reports the current number of gateways (from the rules
	// service); a result below 1 means unknown, and Gateways is used. A
	// shard's local fallback reads it once, at its first local answer, and
	// keeps that size until a call to the shard succeeds again.
	Fleet func() int
	// Shard names the shard that holds key's limits: the Redis node serving
	// its slot. One breaker serves each name. Nil puts every key in one
	// shard.
	Shard func(key string) string
	// Refresh, if set, re-reads which node serves each key (for Shard):
	// redisstore.Store.RefreshNodes. The Store calls it in the background
	// when a breaker opens and every RefreshEvery while any breaker is not
	// closed, so that keys move to a promoted replica, under a closed
	// breaker, as soon as the cluster has failed over.
	Refresh func(ctx context.Context) error
	// RefreshEvery is how often Refresh runs while a breaker is open or
	// half-open. Zero means 500ms.
	RefreshEvery time.Duration
	// Now returns the current time, for breakers and the local fallback.
	// Nil means time.Now.
	Now func() time.Time
	// OnTransition, if set, is called after a shard's breaker changes state.
	// It must not block and must not call the Store.
	OnTransition func(shard string, from, to State, cause error)
	// Logger receives breaker transitions. Nil discards.
	Logger *slog.Logger
	// Registerer receives the guard's metrics. Nil registers none.
	Registerer prometheus.Registerer
}

// Store is a limit.Store that guards a shared store with deadlines,
// per-shard breakers and a local fallback. It is safe for concurrent use.
// With Config.Refresh it owns one goroutine, which Close stops.
type Store struct {
	remote       Remote
	local        *memstore.Store
	timeout      time.Duration
	tripAfter    int
	pause        time.Duration
	slack        float64
	gateways     int
	fleet        func() int
	shardOf      func(string) string
	now          func() time.Time
	onTransition func(string, State, State, error)
	log          *slog.Logger
	metrics      *metrics

	refresh      func(context.Context) error
	refreshEvery time.Duration
	kick         chan struct{}      // wakes the refresher; buffered, never blocks
	stop         context.CancelFunc // ends the refresher; nil without one
	done         chan struct{}      // closed when the refresher has ended

	mu     sync.Mutex
	shards map[string]*shard // guarded by mu; never shrinks: one entry per node ever seen
}

// shard is one shard's breaker and the lock that guards it.
type shard struct {
	name string
	mu   sync.Mutex
	b    breaker // guarded by mu
	// fleet is the fleet size the local fallback divides limits by, fixed
	// at the shard's first local answer until a call succeeds again; 0
	// before. Guarded by mu. A scaled limit's period depends on the share
	// (see scale), and the local store keeps a bucket per period, so a
	// fleet count that changed during an outage would give every key a
	// fresh full local bucket.
	fleet int
}

var _ limit.Store = (*Store)(nil)

// New returns a Store guarding remote. It returns an error for a negative or
// otherwise unusable Config field.
func New(remote Remote, cfg Config) (*Store, error) {
	switch {
	case remote == nil:
		return nil, errors.New("guard: remote store is nil")
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("guard: timeout %v is negative", cfg.Timeout)
	case cfg.TripAfter < 0:
		return nil, fmt.Errorf("guard: trip after %d failures: must not be negative", cfg.TripAfter)
	case cfg.Pause < 0:
		return nil, fmt.Errorf("guard: pause %v is negative", cfg.Pause)
	case cfg.Slack < 0 || math.IsNaN(cfg.Slack) || math.IsInf(cfg.Slack, 0):
		return nil, fmt.Errorf("guard: slack %v must be a positive number", cfg.Slack)
	case cfg.Gateways < 0:
		return nil, fmt.Errorf("guard: %d gateways: must not be negative", cfg.Gateways)
	case cfg.RefreshEvery < 0:
		return nil, fmt.Errorf("guard: refresh every %v: must not be negative", cfg.RefreshEvery)
	}
	s := &Store{
		remote: remote, timeout: cfg.Timeout, tripAfter: cfg.TripAfter, pause: cfg.Pause,
		slack: cfg.Slack, gateways: cfg.Gateways, fleet: cfg.Fleet, shardOf: cfg.Shard,
		now: cfg.Now, onTransition: cfg.OnTransition, log: cfg.Logger,
		refresh: cfg.Refresh, refreshEvery: cfg.RefreshEvery,
		shards: map[string]*shard{},
	}
	if s.refreshEvery == 0 {
		s.refreshEvery = 500 * time.Millisecond
	}
	if s.timeout == 0 {
		s.timeout = 5 * time.Millisecond
	}
	if s.tripAfter == 0 {
		s.tripAfter = 5
	}
	if s.pause == 0 {
		s.pause = 2 * time.Second
	}
	if s.slack == 0 {
		s.slack = 2
	}
	if s.gateways == 0 {
		s.gateways = 1
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.local = memstore.New(memstore.Config{Now: s.now})
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	if s.refresh != nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.kick, s.stop, s.done = make(chan struct{}, 1), cancel, make(chan struct{})
		go s.refresher(ctx)
	}
	return s, nil
}

// Close stops the background refresher, if any, and waits for it. The
// Store still answers afterwards; breakers just keep the node names they
// have. Close is idempotent.
func (s *Store) Close() {
	if s.stop != nil {
		s.stop()
		<-s.done
	}
}

// refresher calls Refresh when a breaker opens, then every refreshEvery
// while any breaker is not closed, until ctx ends.
func (s *Store) refresher(ctx context.Context) {
	defer close(s.done)
	timer := time.NewTimer(0)
	<-timer.C
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-s.kick:
		case <-timer.C:
			if !s.anyOpen() {
				continue
			}
		}
		rctx, cancel := context.WithTimeout(ctx, max(s.refreshEvery, time.Second))
		err := s.refresh(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "rate limit shard map not refreshed", slog.Any("error", err))
		}
		timer.Reset(s.refreshEvery)
	}
}

// anyOpen reports whether some shard's breaker is open or half-open.
func (s *Store) anyOpen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sh := range s.shards {
		sh.mu.Lock()
		open := sh.b.state != Closed
		sh.mu.Unlock()
		if open {
			return true
		}
	}
	return false
}

// Take implements limit.Store. It returns an error only for an invalid
// request, when ctx is done before the call or cancelled during it, or for
// a FailClosed limit whose shard cannot answer (wrapping ErrUnavailable);
// any other failure of the shared store, including ctx's deadline passing
// while waiting on it, is answered by the local fallback.
func (s *Store) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	a, err := s.TakeUpTo(ctx, req, req.EffectiveCost())
	return a.Decision, err
}

// TakeSourced is Take that also says where the answer came from, as the
// string of a Source (FromRedis, FromLocalFallback, or FromFailClosed with
// its error); it is empty when ctx ended first. It is what the gateway asks
// of a store that can tell (gateway.SourcedStore).
func (s *Store) TakeSourced(ctx context.Context, req *limit.Request) (limit.Decision, string, error) {
	a, err := s.TakeUpTo(ctx, req, req.EffectiveCost())
	return a.Decision, string(a.Source), err
}

// TakeUpTo takes between req's cost and want tokens, as the remote's
// TakeUpTo does, and says where the answer came from. While the key's shard
// cannot answer, the local fallback grants exactly the cost, from the
// gateway's own share of each limit. On a fail-closed refusal the error wraps ErrUnavailable and
// the Answer still names the limit that refused and the wait until the
// shard is probed again.
func (s *Store) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (Answer, error) {
	if err := req.Validate(); err != nil {
		return Answer{}, err
	}
	cost := req.EffectiveCost()
	want = max(want, cost)
	if err := ctx.Err(); err != nil {
		// Gone before the shard was asked: no verdict on it either way.
		return Answer{}, fmt.Errorf("guard: %w", err)
	}
	sh := s.shard(req.Key)

	sh.mu.Lock()
	call, probe := sh.b.admit(s.now())
	sh.mu.Unlock()
	if !call {
		return s.fallback(sh, req, nil)
	}

	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	var (
		granted int64
		d       limit.Decision
		err     error
	)
	if want == cost {
		d, err = s.remote.Take(cctx, req)
		if d.Allowed {
			granted = cost
		}
	} else {
		granted, d, err = s.remote.TakeUpTo(cctx, req, want)
	}
	cancel()
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		// The caller cancelled (its client went away): that says nothing
		// about the shard. A caller's deadline that passed while the shard
		// kept it waiting is another matter: it is the shard being slow,
		// counted below as a timeout like the guard's own deadline, or a
		// caller deadline shorter than Timeout (gateway.Config.Timeout)
		// would keep a hung shard's breaker closed forever.
		sh.mu.Lock()
		sh.b.abandon(probe)
		sh.mu.Unlock()
		return Answer{}, fmt.Errorf("guard: %w", ctx.Err())
	}
	s.record(sh, probe, err)
	if err != nil {
		return s.fallback(sh, req, err)
	}
	return Answer{Decision: d, Granted: granted, Source: FromRedis}, nil
}

// record feeds a call's outcome to the shard's breaker and reports a change.
func (s *Store) record(sh *shard, probe bool, err error) {
	now := s.now()
	sh.mu.Lock()
	from, to := sh.b.record(now, probe, err)
	if to == Closed && err == nil {
		sh.fleet = 0
	}
	sh.mu.Unlock()
	if err != nil {
		s.metrics.failure(sh.name, isTimeout(err))
	}
	if from == to {
		return
	}
	s.metrics.transition(sh.name, to)
	if to == Open && s.kick != nil {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	if to == Open {
		s.log.LogAttrs(context.Background(), slog.LevelWarn, "rate limit shard unavailable; limiting its keys locally",
			slog.String("shard", sh.name), slog.String("from", from.String()), slog.Duration("pause", s.pause), slog.Any("error", err))
	} else {
		s.log.LogAttrs(context.Background(), slog.LevelInfo, "rate limit shard answering again",
			slog.String("shard", sh.name), slog.String("from", from.String()))
	}
	if s.onTransition != nil {
		s.onTransition(sh.name, from, to, err)
	}
}

// fallback answers req without the shared store: refused if a limit fails
// closed, else by the gateway's own share of each limit. cause is the
// failure of this request's own call, nil when the breaker kept it from
// calling.
func (s *Store) fallback(sh *shard, req *limit.Request, cause error) (Answer, error) {
	now := s.now()
	for i := range req.Limits {
		if l := &req.Limits[i]; l.FailClosed {
			sh.mu.Lock()
			wait := sh.b.retryIn(now)
			if cause == nil {
				cause = sh.b.cause
			}
			sh.mu.Unlock()
			s.metrics.fallback(FromFailClosed, false)
			a := Answer{Decision: limit.Decision{Index: i, RetryAfter: wait}, Source: FromFailClosed}
			if cause == nil {
				return a, fmt.Errorf("guard: limit %q fails closed and shard %q cannot answer: %w", l.Name, sh.name, ErrUnavailable)
			}
			return a, fmt.Errorf("guard: limit %q fails closed and shard %q cannot answer: %w: %w", l.Name, sh.name, ErrUnavailable, cause)
		}
	}
	sh.mu.Lock()
	if sh.fleet == 0 {
		sh.fleet = s.fleetSize()
	}
	gateways := sh.fleet
	sh.mu.Unlock()
	local := *req
	local.Limits = make([]limit.Limit, len(req.Limits))
	part := share(s.slack, gateways)
	for i := range req.Limits {
		local.Limits[i] = scale(req.Limits[i], part)
	}
	// Exactly the cost: batches are for tokens from the shared store, and
	// a local answer must read as one wherever it is spent.
	granted, d := s.local.TakeUpToAt(now.UnixMilli(), &local, req.EffectiveCost())
	s.metrics.fallback(FromLocalFallback, d.Allowed)
	return Answer{Decision: d, Granted: granted, Source: FromLocalFallback}, nil
}

// fleetSize is the current number of gateways, at least 1.
func (s *Store) fleetSize() int {
	if s.fleet != nil {
		if n := s.fleet(); n >= 1 {
			return n
		}
	}
	return s.gateways
}

func (s *Store) shard(key string) *shard {
	name := ""
	if s.shardOf != nil {
		name = s.shardOf(key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.shards[name]
	if sh == nil {
		sh = &shard{name: name, b: breaker{tripAfter: s.tripAfter, pause: s.pause}}
		s.shards[name] = sh
	}
	return sh
}

// Breaker reports the state of a shard's breaker, as of now: an open
// breaker whose pause is over reads HalfOpen. A shard never called reads
// Closed.
func (s *Store) Breaker(shardName string) State {
	s.mu.Lock()
	sh := s.shards[shardName]
	s.mu.Unlock()
	if sh == nil {
		return Closed
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.b.state == Open && !s.now().Before(sh.b.until) {
		return HalfOpen
	}
	return sh.b.state
}

// isTimeout reports whether err is a deadline running out, the guard's own
// or the connection's.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
