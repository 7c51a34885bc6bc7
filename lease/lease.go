// Package lease spends busy keys' tokens from memory and remembers
// refusals, so that busy and abusive clients cost the shared store a small
// bounded number of calls.
//
// A [Store] wraps the guarded shared store as a limit.Store. For a busy key
// it takes a batch of tokens in one call, this gateway's share of 100 ms of
// the tightest limit (rate / gateways / 10, at least 1, no more than the
// key's own demand here), spends it from memory, and fetches the next batch
// in the background once half is gone. Tokens leave the shared store before
// they are spent, so counted from a full bucket the fleet never admits more
// than burst + rate × elapsed; tokens a gateway does not spend within the
// lease's lifetime (about a second) are dropped, never revived, and a
// lowered limit bites within a second. Quiet keys, and limits counted in
// windows, get batches of one: exactly the per-request check. A key seen at
// most once a lookahead window (100 ms) with nothing remembered for it goes
// straight to the shared store: it costs a hashed count, not a lease entry
// (keys that hash to the same count are judged together, so a key sharing
// it with one whose entry holds tokens or a refusal takes the longer way).
//
// That bound is cumulative. At one instant the fleet can also spend the
// tokens its gateways still hold, taken before the bucket refilled: fewer
// than 1.5 batches each (the next is fetched once half is gone), so at most
// burst + 1.5 × rate × Lookahead (150 ms of the rate by default) when Fleet
// is the true fleet size, and more if it is told fewer. A client sees this
// as a burst above the limit's burst, by up to 15% of a second's rate.
//
// When the shared store refuses a request and says when to retry, the key
// (with that request's limit set) is refused from memory until then: a
// client far over its limit costs its shard about one call per gateway per
// retry interval. When its limits count refusals (limit.Limit.CountRefusals),
// the cost of the requests refused from memory is charged with the key's
// next call (limit.Request.Refused), so a client that ignores 429 pays for
// every refusal, as it would without leases. Owed refusals are charged at
// least once: a failed call puts them back, even when the store had run it
// (a timeout), so they may be charged twice, within the bound the stores
// put on debt (one burst). A background refill's own refusal is not charged.
package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/striped"
	"github.com/sluice-rl/sluice/limit"
)

// Config configures a Store. The zero value gives the defaults.
type Config struct {
	// Fleet is how many gateways share the limits: each leases its share
	// of a batch. The zero value is a fleet of one.
	Fleet limit.Fleet
	// Lookahead is how much of a limit's time one batch holds: a gateway
	// leases rate × Lookahead / gateways tokens at once. Zero means 100ms.
	Lookahead time.Duration
	// TTL is how long leased tokens may be spent before they are dropped.
	// Zero means 1s.
	TTL time.Duration
	// Idle is how long a key's entry is kept after its last request. Zero
	// means 5s.
	Idle time.Duration
	// WaitForRefill makes a request the lease cannot serve wait for a
	// batch already on its way, under its own context, rather than call the
	// shared store itself. A relay sets it: its gateways' calls for one
	// busy key arrive by the hundred at once while a refill is out. A
	// gateway leaves it off: the guard bounds its refills.
	WaitForRefill bool
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
	// Logger receives background refill failures at debug level. Nil
	// discards.
	Logger *slog.Logger
	// Registerer receives the lease metrics. Nil registers none.
	Registerer prometheus.Registerer
}

// Store is a limit.Store that leases tokens for busy keys and caches
// refusals. It is safe for concurrent use. It owns the goroutines that
// refill leases in the background; Close stops them.
type Store struct {
	inner     limit.Granter
	leaser    Leaser // inner, when its grants carry their own lifetime
	fleet     limit.Fleet
	lookahead time.Duration
	ttl       int64 // ms
	idle      int64 // ms
	window    int64 // ms: the demand window, the lookahead
	waitFill  bool  // Config.WaitForRefill
	now       func() time.Time
	log       *slog.Logger
	metrics   *metrics

	// shards holds the entries by lease ID, striped by key.
	shards *striped.Map[string, *entry]
	demand []slot // requests per key hash, lock-free: who is quiet

	ctx    context.Context // refills run under it; Close cancels it
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool           // guarded by mu
	wg     sync.WaitGroup // refills in flight; Add under mu while !closed
}

// entry is one key's book and the lock that guards it.
type entry struct {
	fill int64 // fillMs of its limits, set when it is made
	mu   sync.Mutex
	b    book // guarded by mu
	// slot is the demand slot its key hashes to, which counts it while
	// held; nil once a sweep has dropped it (a request that found it
	// before may still use it) and in tests' bare entries. Guarded by mu.
	slot *slot
	// held says the book may hold something a call straight to the
	// shared store would miss (book.holds), and is counted in slot's
	// holding while set. Guarded by mu.
	held bool
	// found is when entry last handed it to a request (Unix ms), guarded
	// by its shard's lock: a sweep must not drop an entry a request has
	// just found and not yet used (its book's lastUsed still old), or what
	// that request books in it, refusals owed among them, is lost.
	found int64
}

// mark sets e.held from its book at now and keeps its slot's count of
// held entries in step. A key's requests go straight to the shared store
// only while no entry of its slot is held, so mark follows every change of
// a book that may make it hold something; one that ceases to (tokens
// expired, a refusal lapsed) may stay held until its next change or sweep,
// which only sends its slot's keys the longer way. e.mu is held.
func (e *entry) mark(now int64) {
	if h := e.b.holds(now, e.fill); h != e.held && e.slot != nil {
		e.held = h
		if h {
			e.slot.holding.Add(1)
		} else {
			e.slot.holding.Add(-1)
		}
	}
}

const shardCount = 64

var _ limit.Store = (*Store)(nil)

// New returns a Store drawing from inner.
func New(inner limit.Granter, cfg Config) (*Store, error) {
	if err := cfg.Fleet.Validate(); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	switch {
	case inner == nil:
		return nil, errors.New("lease: inner store is nil")
	case cfg.Lookahead < 0 || cfg.TTL < 0 || cfg.Idle < 0:
		return nil, fmt.Errorf("lease: negative duration (lookahead %v, ttl %v, idle %v)", cfg.Lookahead, cfg.TTL, cfg.Idle)
	case cfg.Lookahead > 0 && cfg.Lookahead < time.Millisecond:
		return nil, fmt.Errorf("lease: lookahead %v is shorter than 1ms", cfg.Lookahead)
	}
	s := &Store{
		inner: inner, fleet: cfg.Fleet,
		lookahead: cmp.Or(cfg.Lookahead, 100*time.Millisecond),
		ttl:       cmp.Or(cfg.TTL, time.Second).Milliseconds(),
		idle:      cmp.Or(cfg.Idle, 5*time.Second).Milliseconds(),
		now:       cfg.Now, log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
		waitFill: cfg.WaitForRefill,
		shards:   striped.New[string, *entry](shardCount),
		demand:   make([]slot, demandSlots),
	}
	s.window = s.lookahead.Milliseconds()
	s.leaser, _ = inner.(Leaser)
	if s.now == nil {
		s.now = time.Now
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Close stops background refills, waiting for those in flight; leased
// tokens are still spent until they expire. Close is idempotent.
func (s *Store) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// Take implements limit.Store. The Decision's Source is limit.FromLease,
// limit.FromRefusalCache, or the inner store's. A request with shadow
// limits (limit.Limit.Shadow) goes to the inner store as it is, so that
// its shadow limits see every request. Errors are the inner store's.
//
// req must be valid (limit.Request.Validate): it is not checked again
// (pipeline.Pipeline validates it once), and may be answered from memory
// without reaching a store that would.
//
// A lease-served answer's Remaining is the shared store's count at its last
// grant plus the tokens this gateway still holds.
func (s *Store) Take(ctx context.Context, req *limit.Request) (limit.Decision, error) {
	d, _, err := s.take(ctx, req, req.EffectiveCost(), s.now().UnixMilli())
	return d, err
}

// took is what a request took: n tokens, spendable until the time until
// (Unix ms); until 0 means for the TTL from the call's start.
type took struct{ n, until int64 }

// take answers req at now (Unix ms), taking at least its cost and at most
// upTo tokens, and reports what it took: Take's path, and Lease's.
func (s *Store) take(ctx context.Context, req *limit.Request, upTo, now int64) (limit.Decision, took, error) {
	h := s.shards.Hash(req.Key)
	sl := &s.demand[h%demandSlots]
	cur, prev := sl.see(uint32(now / s.window))
	if cur <= 1 && prev <= 1 && sl.holding.Load() == 0 {
		return s.takeQuiet(ctx, req, h, sl, upTo)
	}
	if req.HasShadow() {
		// A token spent from memory would say nothing of the shadow
		// limits, which must see every request: checked in the shared
		// store, in the same call as the enforced ones.
		return s.direct(ctx, req, upTo)
	}
	e := s.entry(req, h, sl, now, cur, prev)
	m := miss{cost: req.EffectiveCost(), upTo: upTo, batch: s.batch(req), fill: e.fill, refused: req.Refused}
	for {
		d, wait, served := s.fromMemory(e, now, &m)
		if served {
			s.metrics.served(d.Source, m.dropped)
			if m.refill {
				s.refill(e, req, m.size, m.asking, m.owed)
			}
			return d, took{m.got, m.until}, nil
		}
		if wait == nil {
			d, err := s.ask(ctx, e, req, &m)
			return d, took{m.got, m.until}, err
		}
		// A key the shared store refused last has one call in flight per
		// gateway: later requests wait for its answer and read it from the
		// book (a refusal, or the batch it fetched), so a client retrying
		// as hard as it can costs a bounded number of calls.
		select {
		case <-wait:
		case <-ctx.Done():
			return limit.Decision{}, took{}, fmt.Errorf("lease: %w", ctx.Err())
		}
		now = s.now().UnixMilli()
	}
}

// miss is one request's dealings with its key's book, and its call to the
// shared store when memory cannot answer it.
type miss struct {
	cost, batch int64
	upTo        int64 // the most tokens the caller takes (Lease), at least cost
	got, until  int64 // the tokens it took and their expiry (Unix ms, 0: the TTL)
	size        int64 // the batch this key's demand here earns; 0 until counted
	refill      bool  // a token was spent and the next batch is to be fetched

	reserved, reservedUntil int64 // leased tokens set aside for the call, and their expiry
	need, want              int64 // the call takes need tokens, and up to want
	fetch                   bool  // the call fetches the key's next batch
	asking                  chan struct{}
	dropped                 int64

	fill    int64 // ms to fill the slowest limit whose refusals count; 0: none counts
	refused int64 // the caller's limit.Request.Refused, not yet in the book
	owed    int64 // the key's refused cost the call charges (limit.Request.Refused)
}

// takeOwed moves the refusals b owes into m's call, unless the last of
// them is older than the time to fill the limits (their debt would have
// been paid by now).
func (m *miss) takeOwed(b *book, now int64) {
	if now-b.owedAt < m.fill {
		m.owed = b.owed
	}
	b.owed = 0
}

// fillMs returns the ms the slowest of req's limits that charge refusals
// (limit.Limit.ChargesRefusals) takes to fill from empty, or 0 when none
// does: refusals owed for longer than that would have been paid off.
func fillMs(req *limit.Request) int64 {
	var ms int64
	for i := range req.Limits {
		// A Count of 0 is invalid (limit.Limit.Validate), and the inner
		// store refuses it; the lease layer does not check requests again
		// (Take), so it must not divide by it.
		if l := &req.Limits[i]; l.ChargesRefusals() && l.Count > 0 {
			ms = max(ms, (l.EffectiveBurst()*l.PeriodMillis()+l.Count-1)/l.Count)
		}
	}
	return ms
}

// fromMemory answers from e's book when it can: a leased token (refilled
// in the background once half the batch is gone) or a remembered refusal.
// Otherwise it returns a channel to wait on, when a call for the key is
// already out, or, with neither, sets up m's call to the shared store.
func (s *Store) fromMemory(e *entry, now int64, m *miss) (d limit.Decision, wait <-chan struct{}, served bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	defer e.mark(now)
	b := &e.b
	if m.refused > 0 {
		// Refusals a caller answered from its own memory (a gateway
		// behind a relay): owed like this store's own, whatever answers.
		b.owe(m.refused, now)
		m.refused = 0
	}
	if m.size == 0 {
		// A relay's caller asking for a batch counts as the tokens it
		// asks for: the key is as busy as the sum of its gateways' batches.
		weight := int64(1)
		if m.upTo > m.cost {
			weight = m.upTo
		}
		m.size = min(m.batch, b.seen(now, s.window, weight))
	}
	if m.got = b.spendUpTo(now, m.cost, m.upTo); m.got > 0 {
		m.until = b.expires
		d = b.leased(now)
		m.refill = m.size > 1 && 2*b.tokens < m.size && !b.fetching
		b.fetching = b.fetching || m.refill
		if m.refill {
			m.takeOwed(b, now)
		}
		if m.refill && s.waitFill && b.asking == nil {
			m.asking = make(chan struct{})
			b.asking = m.asking
		}
		m.dropped = b.takeDropped()
		d.Source = limit.FromLease
		return d, nil, true
	}
	// Leased tokens are already paid for, so only a request the lease
	// cannot serve reads the refusal cache.
	if b.refused(now, m.cost) {
		if m.fill > 0 {
			// Refusals count: charged with the key's next call, not one
			// call per refusal.
			b.owe(m.cost, now)
		}
		d = b.deniedAt(now)
		m.dropped = b.takeDropped()
		d.Source = limit.FromRefusalCache
		return d, nil, true
	}
	if b.asking != nil {
		// A batch a request is fetching, or the answer for a refused key,
		// is on its way: wait for it (under the request's own deadline)
		// rather than each miss calling. A background refill, bounded by
		// nothing but the guard, is waited for only with WaitForRefill.
		return d, b.asking, false
	}
	// Ask the shared store, with the few leased tokens left (fewer than the
	// cost) set aside for this request. Only one batch per key is in
	// flight; while a background refill is, other misses take exactly
	// what they need.
	m.reserved, m.reservedUntil = b.tokens, b.expires
	b.tokens = 0
	m.takeOwed(b, now)
	m.need = m.cost - m.reserved
	m.want = max(m.need, m.upTo-m.reserved)
	m.fetch = m.size > 1 && !b.fetching
	if m.fetch {
		m.want = max(m.want, m.size)
		b.fetching = true
	}
	if b.lastRefused || m.fetch {
		m.asking = make(chan struct{})
		b.asking = m.asking
	}
	m.dropped = b.takeDropped()
	return d, nil, false
}

// ask makes m's call to the shared store and writes its answer in e's
// book. Whatever happens to the call, even a panic in the inner store, the
// flags it set are cleared and its waiters woken.
func (s *Store) ask(ctx context.Context, e *entry, req *limit.Request, m *miss) (d limit.Decision, err error) {
	s.metrics.asked(m.fetch, m.dropped)
	var a *answer // nil while the call has not returned
	defer func() { d, err = s.settle(e, req, m, a) }()
	one := limit.Request{Key: req.Key, Cost: m.need, Limits: req.Limits, Refused: m.owed}
	ans := s.grant(ctx, &one, m.want)
	a = &ans
	return ans.d, ans.err
}

// grant takes up to want tokens from the inner store, through Lease when
// it bounds its grants' lifetime, and reports when they expire (Unix ms):
// the TTL from its return, or sooner when the inner lease, counted from
// before the call, ends sooner: a lease never outlives the one it came
// from.
func (s *Store) grant(ctx context.Context, req *limit.Request, want int64) answer {
	var a answer
	if s.leaser == nil {
		a.granted, a.d, a.err = s.inner.TakeUpTo(ctx, req, want)
		a.at = s.now().UnixMilli()
		a.until = a.at + s.ttl
		return a
	}
	start := s.now().UnixMilli()
	g, err := s.leaser.Lease(ctx, req, want)
	a.at = s.now().UnixMilli()
	a.granted, a.d, a.err, a.until = g.Granted, g.Decision, err, min(a.at+s.ttl, start+g.TTL.Milliseconds())
	return a
}

// answer is the shared store's answer to a call.
type answer struct {
	granted int64
	d       limit.Decision
	err     error
	until   int64 // when the granted tokens expire, Unix ms
	// at is when the call returned, Unix ms: the one reading of the clock
	// after it, which the answer is booked at.
	at int64
}

// settle ends m's call (book.land) and, if it returned (a not nil), books
// its answer and returns what the request gets.
func (s *Store) settle(e *entry, req *limit.Request, m *miss, a *answer) (limit.Decision, error) {
	var now int64
	if a != nil {
		now = a.at
	} else {
		now = s.now().UnixMilli()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	defer e.mark(now)
	b := &e.b
	b.land(m.fetch, m.asking)
	if a == nil || a.err != nil {
		// The refusals the call was to charge wait for the next one.
		b.putBack(m.owed)
	}
	if a == nil {
		b.lastRefused = false
		return limit.Decision{}, nil
	}
	if a.err != nil || !a.d.Allowed {
		if m.reserved > 0 && now < m.reservedUntil {
			b.tokens += m.reserved
			b.expires = max(b.expires, m.reservedUntil)
		}
		if a.err == nil && shared(a.d.Source) {
			if m.fill > 0 && m.reserved > 0 {
				// Refusals count: the store charged the call's cost, the
				// request's less the leased tokens set aside for it (back
				// in the book now); the rest is owed.
				b.owe(m.reserved, now)
			}
			b.deny(now, m.cost, s.ttl, a.d, holdFor(req, a.d, m.size, m.cost))
		} else {
			// No shared answer to wait for (an error, a shed request, a
			// local guess): the waiters ask for themselves, at once,
			// rather than one after another each waiting out the guard.
			b.lastRefused = false
		}
		return a.d, a.err
	}
	b.lastRefused = false
	m.got = min(max(m.upTo, m.cost), m.reserved+a.granted)
	m.until = a.until
	if m.reserved > 0 {
		m.until = min(m.until, m.reservedUntil)
	}
	if extra := m.reserved + a.granted - m.got; extra > 0 {
		b.add(now, extra, a.until, a.d)
		a.d.Remaining += extra
	} else {
		b.last, b.lastAt = a.d, now
	}
	return a.d, nil
}

// takeQuiet answers a request for a quiet key with nothing remembered:
// the shared store's own answer, as a batch of one would be, with no entry
// made unless the answer is a refusal to remember.
func (s *Store) takeQuiet(ctx context.Context, req *limit.Request, h uint64, sl *slot, upTo int64) (limit.Decision, took, error) {
	s.metrics.asked(false, 0)
	d, tk, err := s.direct(ctx, req, upTo)
	if err != nil || d.Allowed || !shared(d.Source) {
		return d, tk, err
	}
	now := s.now().UnixMilli()
	e := s.entry(req, h, sl, now, 1, 0)
	e.mu.Lock()
	e.b.deny(now, req.EffectiveCost(), s.ttl, d, 0)
	e.mark(now)
	e.mu.Unlock()
	return d, tk, nil
}

// direct passes req to the inner store, as it is: a Take for the cost,
// or a grant of up to upTo tokens.
func (s *Store) direct(ctx context.Context, req *limit.Request, upTo int64) (limit.Decision, took, error) {
	cost := req.EffectiveCost()
	if upTo <= cost {
		d, err := s.inner.Take(ctx, req)
		if err != nil || !d.Allowed {
			return d, took{}, err
		}
		return d, took{n: cost}, nil
	}
	a := s.grant(ctx, req, upTo)
	return a.d, took{a.granted, a.until}, a.err
}

// holdFor is how much longer than its retry time a refusal of a request of
// cost is remembered when the key's batch is size: until the refusing
// limit has refilled a whole batch, so that the next call can lease a
// batch instead of each call winning one token.
func holdFor(req *limit.Request, d limit.Decision, size, cost int64) int64 {
	if size <= cost || d.RetryAfter <= 0 || d.Index < 0 || d.Index >= len(req.Limits) {
		return 0
	}
	l := &req.Limits[d.Index]
	return (size - cost) * l.PeriodMillis() / l.Count
}

// shared reports whether an answer from src counts tokens every gateway
// sees, so that its grants may be leased and its refusals remembered. A
// local guess made while the shared store could not answer is neither: it
// is one request's answer.
func shared(src limit.Source) bool {
	switch src {
	case limit.FromLocalFallback, limit.FromFailClosed, limit.FromShed:
		return false
	}
	return true
}

// refill fetches the next batch for e in the background, charging owed,
// the refusals the key owes (limit.Request.Refused). e.b.fetching is
// already set; the refill clears it.
//
// No client is refused when a refill is, so its own refusal must not be
// charged (that charged one per leased request while the bucket was
// empty, and kept a client that waits its Retry-After well below the
// limit). With nothing owed, the refill's limits go with CountRefusals
// cleared. With refusals owed they must keep it (a store charges owed
// refusals only to limits that count them), and the refill sends all it
// owes but 1, the cost its own refusal is charged: an allowed refill
// leaves that 1 owed in the book.
func (s *Store) refill(e *entry, req *limit.Request, want int64, asking chan struct{}, owed int64) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		now := s.now().UnixMilli()
		e.mu.Lock()
		e.b.land(true, asking)
		e.b.putBack(owed)
		e.mark(now)
		e.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	s.metrics.refilling()
	// The caller may reuse its request once Take returns.
	r := limit.Request{Key: req.Key, Cost: 1, Limits: slices.Clone(req.Limits)}
	if owed > 0 {
		r.Refused = owed - 1
	} else {
		for i := range r.Limits {
			r.Limits[i].CountRefusals = false
		}
	}
	go func() {
		defer s.wg.Done()
		a := s.grant(s.ctx, &r, want)
		granted, d, until, err := a.granted, a.d, a.until, a.err
		if err != nil {
			// Spend what is left; the blocking path and the guard take over.
			s.log.LogAttrs(s.ctx, slog.LevelDebug, "lease refill failed", slog.Any("error", err))
		}
		now := a.at
		e.mu.Lock()
		defer e.mu.Unlock()
		defer e.mark(now)
		e.b.land(true, asking)
		switch {
		case err != nil, !shared(d.Source):
			// Not charged in the shared store: the owed refusals wait for
			// the next call. A token from the local fallback is one
			// request's answer, not a lease: dropping it errs under the
			// limit, as leases do.
			e.b.putBack(owed)
			return
		case owed > 0 && d.Allowed:
			// Allowed, the refill's own cost was not charged as a refusal:
			// the 1 it held back is still owed.
			e.b.owe(1, max(e.b.owedAt, now))
		}
		switch {
		case granted > 0:
			e.b.add(now, granted, until, d)
		default:
			e.b.deny(now, 1, s.ttl, d, holdFor(&r, d, want, 1))
		}
	}()
}

// batch is how many tokens one gateway leases at once for req: its share of
// Lookahead of the tightest limit's rate, at least 1 and at most the
// smallest burst. Limits counted in windows are not leased: a token taken
// in one window and spent in the next would be counted in the wrong one.
func (s *Store) batch(req *limit.Request) int64 {
	rate := math.Inf(1)
	burst := int64(math.MaxInt64)
	for i := range req.Limits {
		l := &req.Limits[i]
		switch l.Alg() {
		case limit.TokenBucket, limit.GCRA:
		default:
			return 1
		}
		rate = min(rate, float64(l.Count)/l.Period.Seconds())
		burst = min(burst, l.EffectiveBurst())
	}
	n := int64(rate * s.lookahead.Seconds() / float64(s.fleet.Size()))
	return max(1, min(n, burst))
}

// entry returns req's entry, making it if need be; h is its key's hash and
// sl its demand slot, whose counts of this window (cur) and the one before
// (prev), this request included, a new entry's demand starts from. Now
// and then (striped.Stripe.Due) it sweeps out the shard's entries idle for
// longer than Idle, so memory follows the keys in use.
func (s *Store) entry(req *limit.Request, h uint64, sl *slot, now int64, cur, prev uint64) *entry {
	var buf [128]byte
	id := appendID(buf[:0], req)
	sh := s.shards.At(h)
	sh.Lock()
	defer sh.Unlock()
	e := sh.M[string(id)]
	if e == nil {
		e = &entry{slot: sl, fill: fillMs(req)}
		e.b.lastUsed = now
		// The book counts this request itself; before it, this window
		// held cur-1 and the last one prev.
		e.b.window = now - now%s.window
		e.b.cur, e.b.prev = int64(cur)-1, int64(prev)
		sh.M[string(id)] = e
	}
	e.found = now
	if sh.Due(now, s.idle) {
		sh.Sweep(now, func(_ string, old *entry) bool { return old.drop(now, s.idle, e) })
	}
	return e
}

// drop reports whether a sweep at now drops e: last used more than idle
// ms before, not keep, with no batch in flight, and owing no refusals
// younger than its limits' fill time (which its key's next call must
// still charge, however long the key was idle). A dropped entry leaves
// its demand slot's count of held entries; one kept is marked afresh.
// The caller holds e's shard's lock.
func (e *entry) drop(now, idleMs int64, keep *entry) bool {
	if e == keep {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	b := &e.b
	idle := max(b.lastUsed, e.found) < now-idleMs && !b.fetching && b.asking == nil &&
		(b.owed == 0 || now-b.owedAt >= e.fill)
	switch {
	case !idle:
		e.mark(now)
	case e.held:
		e.slot.holding.Add(-1)
		fallthrough
	default:
		// Out of the map and its slot's count for good.
		e.held, e.slot = false, nil
	}
	return idle
}

// appendID appends what identifies req's lease: the key and every limit's
// bucket, rate and burst. Tokens taken for one limit set cannot be spent
// on another, and a changed rate or burst starts a new lease, so a lowered
// limit is never served from tokens leased under the old one. The key is
// length-prefixed so that no key can end where another's limits begin.
func appendID(b []byte, req *limit.Request) []byte {
	b = strconv.AppendInt(b, int64(len(req.Key)), 10)
	b = append(b, ':')
	b = append(b, req.Key...)
	for i := range req.Limits {
		l := &req.Limits[i]
		b = append(b, ' ')
		b = append(b, l.Name...)
		b = append(b, ':')
		b = append(b, l.Alg()...)
		b = append(b, ':')
		b = strconv.AppendInt(b, l.PeriodMillis(), 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, l.Count, 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, l.EffectiveBurst(), 10)
	}
	return b
}

// Len reports how many keys' entries the store holds, for tests and
// metrics.
func (s *Store) Len() int {
	return s.shards.Len()
}
