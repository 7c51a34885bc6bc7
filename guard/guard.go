// Package guard keeps the API up when the shared store is slow or down.
//
// A [Store] wraps any limit.Store (Redis in production) and is itself a
// limit.Granter. Each node of the shared store has its own circuit breaker
// when the store can say which node serves a key ([Nodes]); otherwise all
// keys share one.
//
// # A pause is not an outage
//
// A call that runs past a short deadline (Timeout, 5 ms) is judged by what
// its node does, not by how long this process took: a store that watches
// its connections ([Watcher]) says whether the node owes replies and has
// sent nothing. Redis stops answering for tens of milliseconds in normal
// running (a fork for persistence copies its page tables; a busy host
// deschedules it), and then answers everything it was sent. So a node is
// judged down only once it has owed replies and sent nothing for DownAfter:
// 75 ms by default, more than twice such a pause and still within the
// 100 ms in which a stopped, killed or cut-off node must be given up. Until
// then calls wait for the node's answer, and every decision stays shared
// and exact. A node silent for DownAfter has failed: no number of further
// calls needs to confirm it, so its breaker opens at once and the calls
// waiting on it are answered locally. A node that refuses or drops
// connections (killed, restarting) fails each call at once, and TripAfter
// (5) such failures in a row open its breaker. A node that is answering
// means a slow call is queued in this process, so it waits on, up to a
// bound (MaxQueue, 1 s), and past it the request is shed ([ErrShed],
// source limit.FromShed) rather than guessed locally. An error about one
// key's data (limit.ErrBadReply) fails only that request. A store that
// cannot watch its wire fails each call at Timeout instead, and TripAfter
// such failures in a row open the breaker.
//
// # While a node is down
//
// An open breaker answers locally without waiting on the node; after a
// pause one probe call decides whether it is back. Its keys are limited in
// this process's memory at its share of each limit (slack / gateways, 2/N
// by default), so a runaway client stays within about twice its limit
// across the fleet and normal clients are rarely refused. A local bucket
// starts from what the shared store last said about its key: the Store
// remembers, in a bounded table, the tokens each recently decided key had
// left, and the local bucket holds the same part of them as of its limit,
// refilled since. So a key that had spent its tokens does not get a fresh
// burst on every gateway when the node goes down. A limit marked
// FailClosed (logins, password resets, SMS) refuses instead, with an error
// wrapping [ErrUnavailable].
//
// Every Decision says where it came from (limit.Source), so logs and
// metrics can tell a shared decision from a local guess.
package guard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/memstore"
)

// ErrUnavailable is wrapped by the error of a request refused because one of
// its limits fails closed and its shard cannot answer.
var ErrUnavailable = errors.New("shared rate limit store unavailable")

// ErrShed is wrapped by the error of a request this process dropped because
// it could not get the shared store's answer in time while the store was
// answering: the process itself is overloaded. Its Decision's Source is
// limit.FromShed and its RetryAfter a second.
var ErrShed = errors.New("rate limit check shed: this process is too busy to get the shared store's answer in time")

// Nodes is a shared store that can say which node serves a key, so that
// each node gets a breaker of its own: redisstore.Store.
type Nodes interface {
	// Node names the node that holds key's limits.
	Node(key string) string
}

// Lister is a shared store that can name every node it knows, so that each
// node's metric series exist, at zero, before its first failure:
// redisstore.Store.
type Lister interface {
	// NodeAddrs names every node the store knows, as Node names them.
	NodeAddrs() []string
}

// Refresher is a shared store that can re-read which node serves each key.
type Refresher interface {
	// RefreshNodes reads the node of every key again.
	RefreshNodes(ctx context.Context) error
}

// Watcher is a shared store that can tell a node that stopped answering
// from a process too busy to read its answers: redisstore.Store watches
// the bytes on its connections to say so.
type Watcher interface {
	// Stalled reports whether node has owed replies for at least d while
	// nothing arrived from it, or could not be connected to for that long.
	// Replies that arrived and wait unread in this process do not count:
	// they are this process's delay, not the node's.
	Stalled(node string, d time.Duration) bool
}

// Config configures a Store. The zero value gives the defaults.
type Config struct {
	// Timeout is how long a call may wait on the shared store before the
	// Store asks whether the call's node is answering. Zero means 5ms: a
	// Redis call takes well under a millisecond. Past it the call waits on,
	// checked again every half Timeout, while its node is merely slow,
	// paused or this process is busy; once the node has owed replies and
	// sent nothing for DownAfter (Watcher.Stalled), it is down: its
	// breaker opens at once and its calls are answered locally. A store
	// that is not a Watcher cannot tell a slow node from a busy process:
	// its calls fail at Timeout, and TripAfter failures in a row open the
	// breaker.
	Timeout time.Duration
	// DownAfter is how long a node that owes replies must stay silent to be
	// judged down. Zero means DefaultDownAfter (75ms) or three times
	// Timeout, whichever is longer: long enough that a pause of tens of
	// milliseconds, which Redis takes in normal running, is waited out and
	// answered by the node; short enough that a node that is really gone
	// is given up within about 100ms. It must not be below Timeout, when
	// a call is first looked at.
	DownAfter time.Duration
	// MaxQueue is how much longer than Timeout a call may wait while its
	// node is answering, before the request is shed (ErrShed). Zero means
	// 1s. A caller's own deadline that passes first ends the wait the
	// same way: shed when the node is answering, a failure of the node
	// when it is not.
	MaxQueue time.Duration
	// TripAfter is how many consecutive failed calls (errors, or timeouts
	// of a store that is not a Watcher) open a shard's breaker. Zero means
	// 5.
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
	// Shard names the shard that holds key's limits. One breaker serves
	// each name. Nil means the remote's Node method when it is a [Nodes],
	// else every key in one shard.
	Shard func(key string) string
	// Refresh, if set, re-reads which node serves each key (for Shard).
	// Nil means the remote's RefreshNodes when it is a [Refresher]. The
	// Store calls it in the background when a breaker opens and every
	// RefreshEvery while any breaker is not closed, so that keys move to a
	// promoted replica, under a closed breaker, as soon as the cluster has
	// failed over.
	Refresh func(ctx context.Context) error
	// RefreshEvery is how often Refresh runs while a breaker is open or
	// half-open. Zero means 500ms.
	RefreshEvery time.Duration
	// Stalled reports whether a node stopped answering (see [Watcher]).
	// Nil means the remote's Stalled method when it is a Watcher, else
	// none: every call past Timeout fails.
	Stalled func(node string, d time.Duration) bool
	// Now returns the current time, for breakers and the local fallback.
	// Nil means time.Now. Deadlines always run on the real clock.
	Now func() time.Time
	// OnTransition, if set, is called after a shard's breaker changes state.
	// It must not block and must not call the Store.
	OnTransition func(shard string, from, to State, cause error)
	// Logger receives breaker transitions. Nil discards.
	Logger *slog.Logger
	// Registerer receives the guard's metrics. Nil registers none.
	Registerer prometheus.Registerer
}

// Defaults of Config's zero fields. DownAfter's also follows Timeout: see
// Config.DownAfter.
const (
	DefaultTimeout   = 5 * time.Millisecond
	DefaultDownAfter = 75 * time.Millisecond
	DefaultMaxQueue  = time.Second
	DefaultTripAfter = 5
	DefaultPause     = 2 * time.Second
	DefaultSlack     = 2
)

// Store is a limit.Granter that guards a shared store with deadlines,
// per-node breakers and a local fallback. It is safe for concurrent use.
// With a refresher (Config.Refresh, or a remote that is a Refresher) it
// owns one goroutine, which Close stops.
type Store struct {
	remote       limit.Store
	granter      limit.Granter // remote, when it can grant up to N; else nil
	local        *memstore.Store
	words        *lastWords // what the remote last said of each recent key
	timeout      time.Duration
	downAfter    time.Duration
	maxQueue     time.Duration
	tripAfter    int
	pause        time.Duration
	slack        float64
	gateways     int
	fleet        func() int
	shardOf      func(string) string
	stalled      func(string, time.Duration) bool
	now          func() time.Time
	onTransition func(string, State, State, error)
	log          *slog.Logger
	metrics      *metrics
	lister       Lister // nil unless the remote names its nodes and cfg.Shard is nil

	refresh      func(context.Context) error
	refreshEvery time.Duration
	kick         chan struct{}      // wakes the refresher; buffered, never blocks
	stop         context.CancelFunc // ends the refresher; nil without one
	done         chan struct{}      // closed when the refresher has ended

	// dogs holds watchdogs (and their timers) of calls that ended before
	// their first look, for reuse.
	dogs sync.Pool

	// shards maps a shard's name to its *shard. It never shrinks: one
	// entry per node ever seen. A sync.Map, so requests to different nodes
	// never wait on each other's lock.
	shards sync.Map
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

var _ limit.Granter = (*Store)(nil)

// New returns a Store guarding remote. It returns an error for a negative or
// otherwise unusable Config field.
func New(remote limit.Store, cfg Config) (*Store, error) {
	switch {
	case remote == nil:
		return nil, errors.New("guard: remote store is nil")
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("guard: timeout %v is negative", cfg.Timeout)
	case cfg.DownAfter < 0:
		return nil, fmt.Errorf("guard: down after %v is negative", cfg.DownAfter)
	case cfg.DownAfter > 0 && cfg.DownAfter < cmp.Or(cfg.Timeout, DefaultTimeout):
		return nil, fmt.Errorf("guard: down after %v is below the timeout %v: a node is judged only once a call has waited the timeout",
			cfg.DownAfter, cmp.Or(cfg.Timeout, DefaultTimeout))
	case cfg.MaxQueue < 0:
		return nil, fmt.Errorf("guard: max queue %v is negative", cfg.MaxQueue)
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
		remote: remote, timeout: cmp.Or(cfg.Timeout, DefaultTimeout), maxQueue: cmp.Or(cfg.MaxQueue, DefaultMaxQueue),
		tripAfter: cmp.Or(cfg.TripAfter, DefaultTripAfter), pause: cmp.Or(cfg.Pause, DefaultPause),
		slack: cmp.Or(cfg.Slack, DefaultSlack), gateways: max(cfg.Gateways, 1), fleet: cfg.Fleet,
		shardOf: cfg.Shard, stalled: cfg.Stalled, now: cfg.Now, onTransition: cfg.OnTransition, log: cfg.Logger,
		refresh: cfg.Refresh, refreshEvery: cmp.Or(cfg.RefreshEvery, 500*time.Millisecond),
	}
	s.downAfter = cmp.Or(cfg.DownAfter, max(DefaultDownAfter, 3*s.timeout))
	s.granter, _ = remote.(limit.Granter)
	if n, ok := remote.(Nodes); ok && s.shardOf == nil {
		s.shardOf = n.Node
	}
	if r, ok := remote.(Refresher); ok && s.refresh == nil {
		s.refresh = r.RefreshNodes
	}
	if w, ok := remote.(Watcher); ok && s.stalled == nil {
		s.stalled = w.Stalled
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.local = memstore.New(memstore.Config{Now: s.now})
	s.words = newLastWords()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.lister, _ = remote.(Lister)
	if cfg.Shard != nil {
		s.lister = nil // names come from cfg.Shard, not the store's nodes
	}
	s.listNodes()
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

// Config returns the settings the Store runs with: the Config it was given,
// with each zero duration, count and factor replaced by its default and the
// remote's methods in place of nil funcs. The Registerer is not kept.
func (s *Store) Config() Config {
	return Config{
		Timeout: s.timeout, DownAfter: s.downAfter, MaxQueue: s.maxQueue, TripAfter: s.tripAfter, Pause: s.pause,
		Slack: s.slack, Gateways: s.gateways, Fleet: s.fleet, Shard: s.shardOf, Refresh: s.refresh,
		RefreshEvery: s.refreshEvery, Stalled: s.stalled, Now: s.now, OnTransition: s.onTransition, Logger: s.log,
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
		if err == nil {
			s.listNodes()
		}
		if err != nil && ctx.Err() == nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "rate limit shard map not refreshed", slog.Any("error", err))
		}
		timer.Reset(s.refreshEvery)
	}
}

// listNodes makes the metric series of every node the remote knows exist.
func (s *Store) listNodes() {
	if s.lister == nil || s.metrics == nil {
		return
	}
	for _, n := range s.lister.NodeAddrs() {
		s.metrics.known(n)
	}
}

// anyOpen reports whether some shard's breaker is open or half-open.
func (s *Store) anyOpen() bool {
	open := false
	s.shards.Range(func(_, v any) bool {
		sh := v.(*shard)
		sh.mu.Lock()
		open = sh.b.state != Closed
		sh.mu.Unlock()
		return !open
	})
	return open
}

// Take implements limit.Store. The Decision's Source says which path
// answered: the remote's own source (limit.FromRedis from redisstore),
// or FromLocalFallback, FromFailClosed or FromShed. It returns an error
// only for an invalid request; when ctx is done before the call or
// cancelled during it; for a FailClosed limit whose shard cannot answer
// (wrapping ErrUnavailable); for a request shed because this process could
// not get the answer in time (wrapping ErrShed); and for an error the
// remote answered about this request's own data (limit.ErrBadReply),
// which says nothing against its node. Any other failure of the shared
// store is answered by the local fallback.
func (s *Store) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	_, d, err := s.TakeUpTo(ctx, req, max(req.EffectiveCost(), 1))
	return d, err
}

// TakeUpTo implements limit.Granter: it takes between req's cost and want
// tokens, as the remote's TakeUpTo does (exactly the cost from a remote
// that is not a Granter). While the key's shard cannot answer, the local
// fallback grants exactly the cost, from the gateway's own share of each
// limit. On a fail-closed refusal the error wraps ErrUnavailable and the
// Decision still names the limit that refused and the wait until the shard
// is probed again. Errors are as Take's.
func (s *Store) TakeUpTo(ctx context.Context, req *limit.Request, want int64) (int64, limit.Decision, error) {
	// The request is validated where it is answered: by the remote, or
	// before a local answer (fallback), not once more here.
	if want < 1 {
		return 0, limit.Decision{}, fmt.Errorf("guard: want %d tokens: must be at least 1", want)
	}
	if err := ctx.Err(); err != nil {
		// Gone before the shard was asked: no verdict on it either way.
		return 0, limit.Decision{}, fmt.Errorf("guard: %w", err)
	}
	sh := s.shard(req.Key)
	sh.mu.Lock()
	from := sh.b.state
	call, probe := sh.b.admit(s.now())
	to := sh.b.state
	sh.mu.Unlock()
	if from != to {
		// An open breaker whose pause is over lets its first call probe.
		s.transitioned(sh, from, to, nil)
	}
	if !call {
		return s.fallback(sh, req, nil)
	}
	if probe {
		// A probe that panics (recovered above, as net/http does) must not
		// leave the breaker half-open with its probe out forever.
		defer func() {
			if r := recover(); r != nil {
				sh.mu.Lock()
				sh.b.abandon(true)
				sh.mu.Unlock()
				panic(r)
			}
		}()
	}
	granted, d, err, v := s.ask(ctx, sh, req, max(want, req.EffectiveCost()))
	switch v {
	case invalid:
		sh.mu.Lock()
		sh.b.abandon(probe)
		sh.mu.Unlock()
		return 0, limit.Decision{}, err
	case down:
		s.trip(sh, err)
		return s.fallback(sh, req, err)
	case gaveUp, shed:
		sh.mu.Lock()
		sh.b.abandon(probe)
		sh.mu.Unlock()
		if v == gaveUp {
			return 0, limit.Decision{}, fmt.Errorf("guard: %w", ctx.Err())
		}
		s.metrics.shed()
		return 0, limit.Decision{RetryAfter: time.Second, Source: limit.FromShed},
			fmt.Errorf("guard: shard %q: %w", sh.name, ErrShed)
	case answered:
		// The node answered, if not with a decision: that is this
		// request's failure, not the node's.
		s.record(sh, probe, nil)
		return 0, limit.Decision{}, fmt.Errorf("guard: shard %q: %w", sh.name, err)
	}
	now, to := s.record(sh, probe, err)
	if err != nil {
		return s.fallback(sh, req, err)
	}
	if to == Closed {
		// An answer that arrives after its breaker opened is not the
		// shared store's word on the outage's start: the local bucket may
		// already be counting from an earlier one.
		s.words.note(now.UnixMilli(), req, &d)
	}
	return granted, d, nil
}

// verdict is what one call to the remote says about its node.
type verdict int

const (
	ok       verdict = iota // the remote decided, or failed: its error says
	down                    // the node has been silent for DownAfter: it is down
	answered                // the node answered, but not usably for this request
	invalid                 // the remote refused the request itself, before any I/O
	shed                    // the node was answering; this process was too slow
	gaveUp                  // the caller cancelled: nothing is known
)

// Why a watchdog ended a call: the deadline of a store that cannot say
// whether its node answers; the node silent for DownAfter, or its breaker
// opened by other calls; the call waiting Timeout and MaxQueue out while
// the node answered others. The first two wrap context.DeadlineExceeded:
// for the remote, whose call they cancel, a deadline passed.
var (
	errDeadline = fmt.Errorf("guard: %w", context.DeadlineExceeded)
	errDown     = fmt.Errorf("%w: the node owes replies and has sent nothing", context.DeadlineExceeded)
	errQueued   = errors.New("waited too long in this process while the node answered")
)

// ask makes one call to the remote, watched: past Timeout the call waits
// while its node answers or is merely slow, up to MaxQueue more, and ends
// when the node is judged down.
func (s *Store) ask(ctx context.Context, sh *shard, req *limit.Request, want int64) (int64, limit.Decision, error, verdict) {
	node := sh.name
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := s.watchdog(sh, cancel)

	var (
		granted int64
		d       limit.Decision
		err     error
	)
	if cost := req.EffectiveCost(); want == cost || s.granter == nil {
		d, err = s.remote.Take(cctx, req)
		if err == nil && d.Allowed {
			granted = cost
		}
	} else {
		granted, d, err = s.granter.TakeUpTo(cctx, req, want)
	}
	w.done.Store(true)
	stopped := w.timer.Load().Stop()
	began := w.start
	if w.waited.Load() {
		s.metrics.queued(time.Since(began))
	}
	if stopped && !w.fired.Load() {
		// The watchdog never looked, and never will: the next call may
		// have it. (A watchdog that is reused and then fires reads the
		// fields set for its new call: watchdog sets them before
		// storing done, which fire loads first.)
		w.sh, w.cancel = nil, nil
		s.dogs.Put(w)
	}
	w = nil
	if err == nil {
		return granted, d, nil, ok
	}
	switch cause := context.Cause(cctx); {
	case errors.Is(err, limit.ErrInvalid):
		// Refused before any I/O: nothing is known about the node, even
		// when the watchdog fired before this goroutine ran again.
		return 0, d, err, invalid
	case errors.Is(err, limit.ErrBadReply):
		return 0, d, err, answered
	case errors.Is(cause, errDeadline):
		return 0, d, fmt.Errorf("no answer in %v: %w (%w)", s.timeout, errDeadline, err), ok
	case errors.Is(cause, errDown):
		return 0, d, fmt.Errorf("guard: node %q down after %v: %w", node, time.Since(began).Round(time.Millisecond), errDown), down
	case errors.Is(cause, errQueued):
		return 0, d, err, shed
	case errors.Is(ctx.Err(), context.Canceled):
		// The caller cancelled (its client went away): that says nothing
		// about the shard.
		return 0, d, err, gaveUp
	case ctx.Err() != nil:
		// The caller's own deadline passed first. A node that is not
		// answering kept it waiting: that counts against the node, or a
		// caller deadline shorter than Timeout would keep a hung node's
		// breaker closed forever. One that is answering did not.
		if s.stalled != nil && !s.stalled(node, min(s.downAfter, time.Since(began))) {
			return 0, d, err, shed
		}
		return 0, d, err, ok
	}
	return 0, d, err, ok
}

// watchdog ends one remote call that runs past the Store's Timeout when
// its node is down, or when it has waited MaxQueue more while its node
// answered others.
type watchdog struct {
	s      *Store
	sh     *shard
	start  time.Time
	cancel context.CancelCauseFunc
	timer  atomic.Pointer[time.Timer] // set before the timer is armed
	due    atomic.Int64               // when the timer should fire, as time.Since(start)
	done   atomic.Bool                // the call has returned
	waited atomic.Bool                // the call ran past Timeout with its node answering
	fired  atomic.Bool                // fire has run for this call
}

// watchdog returns a watchdog for a call to sh that cancel ends, armed for
// Timeout. A call that ends before Timeout, as almost every call does,
// returns it to the Store's pool with its timer, so a healthy node's calls
// allocate neither.
func (s *Store) watchdog(sh *shard, cancel context.CancelCauseFunc) *watchdog {
	w, _ := s.dogs.Get().(*watchdog)
	if w == nil {
		w = &watchdog{s: s}
		w.timer.Store(time.AfterFunc(time.Duration(math.MaxInt64), w.fire))
	}
	w.sh, w.start, w.cancel = sh, time.Now(), cancel
	w.done.Store(false)
	w.waited.Store(false)
	w.arm(s.timeout)
	return w
}

// arm sets the timer to fire after d.
func (w *watchdog) arm(d time.Duration) {
	w.due.Store(int64(time.Since(w.start) + d))
	w.timer.Load().Reset(d)
}

// fire runs when the call has waited Timeout, and again every half
// Timeout while it waits.
func (w *watchdog) fire() {
	w.fired.Store(true)
	if w.done.Load() {
		return
	}
	s := w.s
	if s.stalled == nil {
		w.cancel(errDeadline)
		return
	}
	step := max(s.timeout/2, time.Microsecond)
	left := s.timeout + s.maxQueue - time.Since(w.start)
	if late := time.Since(w.start) - time.Duration(w.due.Load()); late > step && left > 0 {
		// This process did not run for a while (the machine or its
		// scheduler held it): the node's silence over that time may be
		// ours too. Look again once running on time.
		w.arm(min(step, left))
		return
	}
	if s.stalled(w.sh.name, s.downAfter) {
		w.cancel(errDown)
		return
	}
	w.sh.mu.Lock()
	open := w.sh.b.state == Open
	w.sh.mu.Unlock()
	if open {
		// Other calls found the node down meanwhile. (A half-open
		// breaker's probe is this call or another one: it decides.)
		w.cancel(errDown)
		return
	}
	if !s.stalled(w.sh.name, step) {
		// The node is answering: this call waits in this process.
		w.waited.Store(true)
	}
	if left <= 0 {
		w.cancel(errQueued)
		return
	}
	w.arm(min(step, left))
}

// trip opens sh's breaker at once: its node has been silent for DownAfter
// while owing replies, which no number of further calls needs to confirm.
// Calls that were waiting when another tripped it leave it as it is.
func (s *Store) trip(sh *shard, err error) {
	now := s.now()
	sh.mu.Lock()
	from := sh.b.state
	if from != Open {
		sh.b.open(now, err)
		sh.b.probing = false
	}
	sh.mu.Unlock()
	s.metrics.failure(sh.name, true)
	if from != Open {
		s.transitioned(sh, from, Open, err)
	}
}

// record feeds a call's outcome to the shard's breaker, reports a change,
// and returns when it was recorded and the breaker's state after it.
func (s *Store) record(sh *shard, probe bool, err error) (time.Time, State) {
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
	if from != to {
		s.transitioned(sh, from, to, err)
	}
	return now, to
}

// transitioned reports a change of sh's breaker: metrics, the refresher,
// the log and OnTransition.
func (s *Store) transitioned(sh *shard, from, to State, err error) {
	s.metrics.transition(sh.name, to)
	if to == Open && s.kick != nil {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	switch to {
	case Open:
		s.log.LogAttrs(context.Background(), slog.LevelWarn, "rate limit shard unavailable; limiting its keys locally",
			slog.String("shard", sh.name), slog.String("from", from.String()), slog.Duration("pause", s.pause), slog.Any("error", err))
	case HalfOpen:
		s.log.LogAttrs(context.Background(), slog.LevelDebug, "rate limit shard probed", slog.String("shard", sh.name))
	default:
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
func (s *Store) fallback(sh *shard, req *limit.Request, cause error) (int64, limit.Decision, error) {
	now := s.now()
	if i := req.FailClosed(); i >= 0 {
		l := &req.Limits[i]
		sh.mu.Lock()
		wait := sh.b.retryIn(now)
		if cause == nil {
			cause = sh.b.cause
		}
		sh.mu.Unlock()
		s.metrics.fallback(limit.FromFailClosed, false)
		d := limit.Decision{Index: i, RetryAfter: wait, Source: limit.FromFailClosed}
		if cause == nil {
			return 0, d, fmt.Errorf("guard: limit %q fails closed and shard %q cannot answer: %w", l.Name, sh.name, ErrUnavailable)
		}
		return 0, d, fmt.Errorf("guard: limit %q fails closed and shard %q cannot answer: %w: %w", l.Name, sh.name, ErrUnavailable, cause)
	}
	if err := req.Validate(); err != nil {
		// The remote validates what it is asked; a local answer must too.
		return 0, limit.Decision{}, err
	}
	sh.mu.Lock()
	if sh.fleet == 0 {
		sh.fleet = s.fleetSize()
	}
	part := share(s.slack, sh.fleet)
	sh.mu.Unlock()
	local := *req
	local.Limits = make([]limit.Limit, len(req.Limits))
	for i := range req.Limits {
		local.Limits[i] = scale(req.Limits[i], part)
	}
	ms := now.UnixMilli()
	if lw, ok := s.words.take(req.Key, ms); ok {
		s.seed(lw, req, &local, part)
	}
	// Exactly the cost: batches are for tokens from the shared store, and
	// a local answer must read as one wherever it is spent.
	granted, d := s.local.TakeUpToAt(ms, &local, req.EffectiveCost())
	d.Source = limit.FromLocalFallback
	s.metrics.fallback(limit.FromLocalFallback, d.Allowed)
	return granted, d, nil
}

// seed makes the local bucket of the limit lw speaks of hold what the
// shared store last said it had left, at the local share part: it spends
// the difference from a full bucket at the time of the word, and the
// bucket refills from then on. It spends what it can: a bucket already
// counting (from an earlier outage, not yet full again) gives up the
// difference on top, which errs toward refusing, and a request of the
// same key answered at the same moment by another goroutine, which found
// the word already taken, may have spent a token of the full bucket
// first: the key's first moment of an outage can admit one request more
// per request then in flight.
func (s *Store) seed(lw lastWord, req, local *limit.Request, part limit.Fraction) {
	for i := range req.Limits {
		cost := seedCost(lw, &req.Limits[i], &local.Limits[i], part)
		if cost == 0 {
			continue
		}
		one := limit.Request{Key: req.Key, Limits: local.Limits[i : i+1]}
		s.local.TakeUpToAt(lw.at, &one, cost)
		return
	}
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
	if v, ok := s.shards.Load(name); ok {
		return v.(*shard)
	}
	v, loaded := s.shards.LoadOrStore(name, &shard{name: name, b: breaker{tripAfter: s.tripAfter, pause: s.pause}})
	if !loaded {
		s.metrics.known(name)
	}
	return v.(*shard)
}

// Breaker reports the state of a shard's breaker, as of now: an open
// breaker whose pause is over reads HalfOpen. A shard never called reads
// Closed.
func (s *Store) Breaker(shardName string) State {
	v, ok := s.shards.Load(shardName)
	if !ok {
		return Closed
	}
	sh := v.(*shard)
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
