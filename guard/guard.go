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
// starts from the tokens the shared store last said its key had left
// (remembered in a bounded table), so a key that had spent its tokens does
// not get a fresh burst on every gateway when the node goes down. A limit
// marked FailClosed (logins, password resets, SMS) refuses instead, with
// an error wrapping [ErrUnavailable].
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
	// Store asks whether the call's node is answering (Watcher.Stalled),
	// and asks again every half Timeout (at most every 1ms) until the node
	// answers or is judged down (DownAfter). Zero means 5ms: a Redis call
	// takes well under a millisecond. A store that is not a Watcher cannot
	// tell a slow node from a busy process: its calls fail at Timeout.
	Timeout time.Duration
	// DownAfter is how long a node that owes replies must stay silent to be
	// judged down: its breaker then opens at once. Zero means
	// DefaultDownAfter (75ms, see the package doc for why) or three times
	// Timeout, whichever is longer. It must not be below Timeout, when a
	// call is first looked at.
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
	// Fleet is how many gateways share the limits: while a node is down
	// each enforces slack / size of every limit, the size read at the
	// shard's first local answer and kept until a call to the shard
	// succeeds again. The zero value is a fleet of one.
	Fleet limit.Fleet
	// Shard names the shard that holds key's limits. One breaker serves
	// each name. Nil means the remote's Node method when it is a [Nodes],
	// else every key in one shard.
	Shard func(key string) string
	// Refresh, if set, re-reads which node serves each key (for Shard).
	// Nil means the remote's RefreshNodes when it is a [Refresher]. It runs
	// in the background when a breaker opens and every RefreshEvery while
	// any is not closed, so that keys move to a promoted replica as soon
	// as the cluster has failed over.
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
// It owns the watcher of calls in flight (running while there are calls)
// and the refresher (with Config.Refresh); Close stops both.
type Store struct {
	remote  limit.Store
	granter limit.Granter // remote, when it can grant up to N; else nil
	local   *memstore.Store
	words   *lastWords // what the remote last said of each recent key
	cfg     Config     // defaults filled in; no Registerer
	metrics *metrics
	lister  Lister        // nil unless the remote names its nodes and cfg.Shard is nil
	kick    chan struct{} // wakes the refresher; buffered, never blocks

	// Close cancels bg and waits for the watcher (watch.go) and refresher.
	bg       context.Context
	stop     context.CancelFunc
	running  sync.WaitGroup
	calls    sync.Pool   // *call, for reuse
	watchMu  sync.Mutex  // guards closed, and starting the watcher
	closed   bool        // Close has run; guarded by watchMu
	watching atomic.Bool // a watcher runs; set under watchMu

	// shards maps a shard's name to its *shard, one per node ever seen. A
	// sync.Map, so requests to different nodes never wait on one lock.
	shards sync.Map
}

// shard is one shard's breaker and the lock that guards it.
type shard struct {
	name       string
	mu         sync.Mutex
	b          breaker // guarded by mu
	m          shardMetrics
	head, tail *call // the calls in flight to the shard, oldest first; guarded by mu
	// fleet is the fleet size the local fallback divides limits by, fixed
	// at the shard's first local answer until a call succeeds again; 0
	// before. Guarded by mu. A scaled limit's period depends on the share
	// (see scale), and the local store keeps a bucket per period, so a
	// fleet count that changed during an outage would give every key a
	// fresh full local bucket.
	fleet int
}

var _ limit.Granter = (*Store)(nil)

// New returns a Store guarding remote, or an error for an unusable Config
// field.
func New(remote limit.Store, cfg Config) (*Store, error) {
	if err := cfg.Fleet.Validate(); err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
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
	case cfg.RefreshEvery < 0:
		return nil, fmt.Errorf("guard: refresh every %v: must not be negative", cfg.RefreshEvery)
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.DownAfter = cmp.Or(cfg.DownAfter, max(DefaultDownAfter, 3*cfg.Timeout))
	cfg.MaxQueue, cfg.TripAfter = cmp.Or(cfg.MaxQueue, DefaultMaxQueue), cmp.Or(cfg.TripAfter, DefaultTripAfter)
	cfg.Pause, cfg.Slack = cmp.Or(cfg.Pause, DefaultPause), cmp.Or(cfg.Slack, DefaultSlack)
	cfg.RefreshEvery = cmp.Or(cfg.RefreshEvery, 500*time.Millisecond)
	s := &Store{remote: remote}
	s.granter, _ = remote.(limit.Granter)
	if cfg.Shard == nil {
		// Names come from the store's nodes.
		s.lister, _ = remote.(Lister)
		if n, ok := remote.(Nodes); ok {
			cfg.Shard = n.Node
		}
	}
	if r, ok := remote.(Refresher); ok && cfg.Refresh == nil {
		cfg.Refresh = r.RefreshNodes
	}
	if w, ok := remote.(Watcher); ok && cfg.Stalled == nil {
		cfg.Stalled = w.Stalled
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	s.local = memstore.New(memstore.Config{Now: cfg.Now})
	s.words = newLastWords()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	cfg.Registerer = nil
	s.cfg, s.metrics = cfg, m
	s.listNodes()
	s.bg, s.stop = context.WithCancel(context.Background())
	if cfg.Refresh != nil {
		s.kick = make(chan struct{}, 1)
		s.running.Add(1)
		go s.refresher()
	}
	return s, nil
}

// Close stops the watcher, once the calls already made have ended, and the
// refresher, and waits for them. The Store still answers afterwards: a
// call then waits for the remote's answer or its caller's deadline,
// unwatched. Close is idempotent.
func (s *Store) Close() {
	s.watchMu.Lock()
	s.closed = true
	s.watching.Store(false)
	s.watchMu.Unlock()
	s.stop()
	s.running.Wait()
}

// Config returns the settings the Store runs with: the Config it was given,
// with each zero duration, count and factor replaced by its default and the
// remote's methods in place of nil funcs. The Registerer is not kept.
func (s *Store) Config() Config { return s.cfg }

// refresher calls Refresh when a breaker opens, then every RefreshEvery
// while any breaker is not closed, until Close.
func (s *Store) refresher() {
	defer s.running.Done()
	timer := time.NewTimer(0)
	<-timer.C
	for {
		select {
		case <-s.bg.Done():
			timer.Stop()
			return
		case <-s.kick:
		case <-timer.C:
			if !s.anyOpen() {
				continue
			}
		}
		rctx, cancel := context.WithTimeout(s.bg, max(s.cfg.RefreshEvery, time.Second))
		err := s.cfg.Refresh(rctx)
		cancel()
		if err == nil {
			s.listNodes()
		} else if s.bg.Err() == nil {
			s.cfg.Logger.LogAttrs(s.bg, slog.LevelWarn, "rate limit shard map not refreshed", slog.Any("error", err))
		}
		timer.Reset(s.cfg.RefreshEvery)
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

// Take implements limit.Store. The Decision's Source is the remote's own
// (limit.FromRedis from redisstore), or FromLocalFallback, FromFailClosed
// or FromShed.
//
// req must be valid (limit.Request.Validate): the guard does not check it
// again (pipeline.Pipeline validates it once); a remote that refuses it
// anyway (limit.ErrInvalid) fails only that request.
//
// It returns an error when ctx is done before or during the call; for a
// FailClosed limit whose shard cannot answer (wrapping ErrUnavailable);
// for a request shed (wrapping ErrShed); and for an error about this
// request's own data (limit.ErrBadReply), which says nothing against its
// node. Any other failure is answered by the local fallback.
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
	if want < 1 {
		return 0, limit.Decision{}, fmt.Errorf("guard: want %d tokens: must be at least 1", want)
	}
	if err := ctx.Err(); err != nil {
		// Gone before the shard was asked: no verdict on it either way.
		return 0, limit.Decision{}, fmt.Errorf("guard: %w", err)
	}
	sh := s.shard(req.Key)
	c := s.newCall(ctx, sh)
	sh.mu.Lock()
	from := sh.b.state
	var now time.Time
	if from != Closed {
		now = s.cfg.Now() // a closed breaker admits without the time
	}
	admitted, probe := sh.b.admit(now)
	to := sh.b.state
	if admitted {
		c.list() // in the same critical section: one lock fewer a call
	}
	sh.mu.Unlock()
	if from != to {
		// An open breaker whose pause is over lets its first call probe.
		s.transitioned(sh, from, to, nil)
	}
	if !admitted {
		c.parent, c.sh = nil, nil
		s.calls.Put(c)
		return s.fallback(sh, req, nil)
	}
	c = s.watched(c)
	granted, d, err, v := s.ask(ctx, c, sh, req, max(want, req.EffectiveCost()), probe)
	switch v {
	case invalid:
		s.abandon(sh, probe)
		return 0, limit.Decision{}, err
	case down:
		s.trip(sh, err)
		return s.fallback(sh, req, err)
	case gaveUp, shed:
		s.abandon(sh, probe)
		if v == gaveUp {
			return 0, limit.Decision{}, fmt.Errorf("guard: %w", ctx.Err())
		}
		s.metrics.shed()
		return 0, limit.Decision{RetryAfter: time.Second, Source: limit.FromShed},
			fmt.Errorf("guard: shard %q: %w", sh.name, ErrShed)
	case answered:
		// The node answered, if not with a decision: that is this
		// request's failure, not the node's.
		s.record(sh, nil, probe, nil)
		return 0, limit.Decision{}, fmt.Errorf("guard: shard %q: %w", sh.name, err)
	}
	if err != nil {
		s.record(sh, nil, probe, err)
		return s.fallback(sh, req, err)
	}
	if s.record(sh, c, probe, nil) == Closed {
		// An answer that arrives after its breaker opened is not the
		// shared store's word on the outage's start: the local bucket may
		// already be counting from an earlier one.
		// Dated now, when the answer is in: a call can take up to the
		// timeout and the queue's wait, and a word dated at its start
		// would let the local bucket count refill the store never gave.
		s.words.note(s.cfg.Now().UnixMilli(), req, &d)
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

// ask makes one call to the remote, watched under c (nil: unwatched,
// under ctx alone), and says what it tells of the node. A call that
// failed has ended its watch; one that succeeded is still listed, for
// the caller's record to end it in the same section of the shard's lock
// as it records the success.
func (s *Store) ask(ctx context.Context, c *call, sh *shard, req *limit.Request, want int64, probe bool) (granted int64, d limit.Decision, err error, v verdict) {
	var cctx context.Context = c
	if c == nil {
		cctx = ctx
	}
	defer func() {
		// A remote that panics (recovered above, as net/http does) must
		// not leave its call listed, watched forever, nor the breaker
		// half-open with its probe out.
		if r := recover(); r != nil {
			if c != nil {
				s.finish(c)
			}
			s.abandon(sh, probe)
			panic(r)
		}
	}()
	if cost := req.EffectiveCost(); want == cost || s.granter == nil {
		d, err = s.remote.Take(cctx, req)
		if err == nil && d.Allowed {
			granted = cost
		}
	} else {
		granted, d, err = s.granter.TakeUpTo(cctx, req, want)
	}
	if err == nil {
		return granted, d, nil, ok
	}
	why, began := running, time.Time{} // began: zero for an unwatched call
	if c != nil {
		began = c.start
		var waited bool
		if why, waited = s.finish(c); waited {
			s.metrics.queued(time.Since(began))
		}
	}
	switch {
	case errors.Is(err, limit.ErrInvalid):
		// Refused before any I/O: nothing is known about the node, even
		// when the watcher ended the call before this goroutine ran again.
		return 0, d, err, invalid
	case errors.Is(err, limit.ErrBadReply):
		return 0, d, err, answered
	case why == endTimeout:
		return 0, d, fmt.Errorf("guard: no answer in %v: %w (%w)", s.cfg.Timeout, context.DeadlineExceeded, err), ok
	case why == endDown:
		return 0, d, fmt.Errorf("guard: node %q down after %v: %w: the node owes replies and has sent nothing",
			sh.name, time.Since(began).Round(time.Millisecond), context.DeadlineExceeded), down
	case why == endQueued:
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
		if s.cfg.Stalled != nil && !s.cfg.Stalled(sh.name, min(s.cfg.DownAfter, time.Since(began))) {
			return 0, d, err, shed
		}
		return 0, d, err, ok
	}
	return 0, d, err, ok
}

// abandon ends an admitted call that gave no verdict on sh's node.
func (s *Store) abandon(sh *shard, probe bool) {
	sh.mu.Lock()
	sh.b.abandon(probe)
	sh.mu.Unlock()
}

// trip opens sh's breaker at once: its node has been silent for DownAfter
// while owing replies, which no number of further calls needs to confirm.
// Calls that were waiting when another tripped it leave it as it is.
func (s *Store) trip(sh *shard, err error) {
	now := s.cfg.Now()
	sh.mu.Lock()
	from := sh.b.state
	if from != Open {
		sh.b.open(now, err)
		sh.b.probing = false
	}
	sh.mu.Unlock()
	sh.m.failure(true)
	if from != Open {
		s.transitioned(sh, from, Open, err)
	}
}

// record feeds a call's outcome to the shard's breaker, reports a change,
// and returns the breaker's state after it. c, when not nil, is the call
// still listed (ask leaves a success's listed): its watch ends in the same
// section of the shard's lock. The breaker needs the time of a failure
// only.
func (s *Store) record(sh *shard, c *call, probe bool, err error) State {
	var now time.Time
	if err != nil {
		now = s.cfg.Now()
	}
	why, waited := running, false
	sh.mu.Lock()
	if c != nil {
		why, waited = c.unlist()
	}
	from, to := sh.b.record(now, probe, err)
	if to == Closed && err == nil {
		sh.fleet = 0
	}
	sh.mu.Unlock()
	if c != nil {
		if waited {
			s.metrics.queued(time.Since(c.start))
		}
		s.release(c, why)
	}
	if err != nil {
		sh.m.failure(isTimeout(err))
	}
	if from != to {
		s.transitioned(sh, from, to, err)
	}
	return to
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
		s.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "rate limit shard unavailable; limiting its keys locally",
			slog.String("shard", sh.name), slog.String("from", from.String()), slog.Int64("pause_ms", s.cfg.Pause.Milliseconds()), slog.Any("error", err))
	case HalfOpen:
		s.cfg.Logger.LogAttrs(context.Background(), slog.LevelDebug, "rate limit shard probed", slog.String("shard", sh.name))
	default:
		s.cfg.Logger.LogAttrs(context.Background(), slog.LevelInfo, "rate limit shard answering again",
			slog.String("shard", sh.name), slog.String("from", from.String()))
	}
	if s.cfg.OnTransition != nil {
		s.cfg.OnTransition(sh.name, from, to, err)
	}
}

// fallback answers req without the shared store: refused if a limit fails
// closed, else by the gateway's own share of each limit. cause is the
// failure of this request's own call, nil when the breaker kept it from
// calling.
func (s *Store) fallback(sh *shard, req *limit.Request, cause error) (int64, limit.Decision, error) {
	now := s.cfg.Now()
	if i := req.FailClosed(); i >= 0 {
		l := &req.Limits[i]
		sh.mu.Lock()
		wait := sh.b.retryIn(now)
		if cause == nil {
			cause = sh.b.cause
		}
		sh.mu.Unlock()
		s.metrics.fallback(true, false)
		d := limit.Decision{Index: i, RetryAfter: wait, Source: limit.FromFailClosed}
		if cause == nil {
			return 0, d, fmt.Errorf("guard: limit %q fails closed and shard %q cannot answer: %w", l.Name, sh.name, ErrUnavailable)
		}
		return 0, d, fmt.Errorf("guard: limit %q fails closed and shard %q cannot answer: %w: %w", l.Name, sh.name, ErrUnavailable, cause)
	}
	sh.mu.Lock()
	if sh.fleet == 0 {
		sh.fleet = s.cfg.Fleet.Size()
	}
	part := share(s.cfg.Slack, sh.fleet)
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
	s.metrics.fallback(false, d.Allowed)
	return granted, d, nil
}

// seed makes the local bucket of the limit lw speaks of hold what the
// shared store last said it had left, at the local share part: it spends
// the difference from a full bucket at the time of the word, and the
// bucket refills from then on. A bucket already counting (an earlier
// outage's) gives up the difference on top, which errs toward refusing;
// a request of the same key answered meanwhile, which found the word
// taken, may have spent from the full bucket first: one request more per
// request in flight at the outage's first moment.
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

func (s *Store) shard(key string) *shard {
	name := ""
	if s.cfg.Shard != nil {
		name = s.cfg.Shard(key)
	}
	if v, ok := s.shards.Load(name); ok {
		return v.(*shard)
	}
	v, _ := s.shards.LoadOrStore(name, &shard{name: name, b: breaker{tripAfter: s.cfg.TripAfter, pause: s.cfg.Pause}, m: s.metrics.known(name)})
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
	if sh.b.state == Open && !s.cfg.Now().Before(sh.b.until) {
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
