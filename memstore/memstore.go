// Package memstore is the in-process limit.Store: exact for one gateway, and
// the store sluice uses when no Redis is configured. It also serves as the
// local fallback while a Redis shard is unreachable.
package memstore

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/internal/striped"
	"github.com/sluice-rl/sluice/limit"
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Now returns the current time. Nil means the process's monotonic
	// clock, counted from the wall time at New, which is cheaper to read
	// than time.Now and never steps back. Tests pass a fake clock here.
	// A request's own time (limit.Request.At) comes first.
	Now func() time.Time
	// Shards is how many independently locked maps hold the keys, rounded
	// up to a power of two. Zero means 64.
	Shards int
}

// Store keeps every key's limit states in memory. It is safe for concurrent
// use; all limits of one key are checked and taken under one lock, so a
// request is all or nothing. Memory is bounded by the keys active within
// their limits' refill time: a state that would be full again is dropped.
type Store struct {
	now    func() time.Time // nil: base plus the monotonic time since
	base   time.Time
	baseMs int64 // base in Unix ms
	keys   *striped.Map[string, *entry]
}

// entry is one key's states, one slot per limit it has been asked about.
// A key with many limits (the rls service keeps a whole domain's
// descriptors under one key) gets its expired slots dropped as it grows and
// its slots indexed by name, so a take stays cheap however many it holds.
type entry struct {
	slots     []slot
	expires   int64          // Unix ms after which every slot is as good as empty
	byName    map[string]int // the latest slot of each name, once there are many; nil before
	compactAt int            // drop expired slots once there are this many
}

// manySlots is how many slots a key holds before it is compacted and
// indexed by name.
const manySlots = 16

// slot is one limit's state. A limit is the same one while its name,
// algorithm, period, unit and shadow mark stay: the fields of
// limit.BucketID, which says why. A shadow limit's state is apart from an
// enforced one's.
type slot struct {
	// lim is the valid limit that last wrote the state, alg and unit its
	// algorithm and GCRA unit, and p, burst and capacity its period in ms,
	// its burst and a full token bucket's credits: a request with this
	// very limit is taken without validating or compiling it again.
	lim                limit.Limit
	alg                limit.Algorithm
	unit               int64
	p, burst, capacity int64
	state              limit.State
	expires            int64
}

var _ limit.Store = (*Store)(nil)

// New returns an empty Store.
func New(cfg Config) *Store {
	s := &Store{now: cfg.Now, base: time.Now(), keys: striped.New[string, *entry](cmp.Or(max(cfg.Shards, 0), 64))}
	s.baseMs = s.base.UnixMilli()
	return s
}

// clock returns the time to take req at, in Unix ms.
func (s *Store) clock(req *limit.Request) int64 {
	switch {
	case !req.At.IsZero():
		return req.At.UnixMilli()
	case s.now != nil:
		return s.now().UnixMilli()
	}
	return s.baseMs + int64(time.Since(s.base)/time.Millisecond)
}

// Take implements limit.Store. req must be valid (limit.Request.Validate):
// the store refuses only what would break it (no limits, a negative cost,
// a zero rate or period, a sliding log over limit.MaxLogCount), with an
// error matching limit.ErrInvalid, so it never returns an error for a
// valid request. It neither keeps nor modifies req.
func (s *Store) Take(_ context.Context, req *limit.Request) (limit.Decision, error) {
	now := s.clock(req)
	if d, ok := s.takeKnown(now, req); ok {
		return d, nil
	}
	if err := usable(req); err != nil {
		return limit.Decision{}, err
	}
	return s.TakeAt(now, req), nil
}

// usable refuses what would make the store fail or answer nothing: no
// limits, a negative cost, a zero rate or period (an algorithm divides by
// it), or a sliding log longer than limit.MaxLogCount (it would allocate
// it). A key's known limit (takeKnown) passed it once.
func usable(req *limit.Request) error {
	if len(req.Limits) == 0 || req.Cost < 0 {
		return fmt.Errorf("memstore: request of cost %d and %d limits cannot be taken (limit.Request.Validate): %w", req.Cost, len(req.Limits), limit.ErrInvalid)
	}
	for i := range req.Limits {
		if l := &req.Limits[i]; l.Count < 1 || l.PeriodMillis() < 1 || l.Alg() == limit.SlidingLog && l.Count > limit.MaxLogCount {
			return fmt.Errorf("memstore: limit %q: rate %d per %v cannot be counted (limit.Limit.Validate): %w", l.Name, l.Count, l.Period, limit.ErrInvalid)
		}
	}
	return nil
}

// takeKnown is Take's fast path: one enforced token bucket, already
// validated and compiled by an earlier take of the same limit on the same
// key, taken in place. ok is false, with nothing read or written, for any
// other request; Take then validates it and takes it the general way.
func (s *Store) takeKnown(now int64, req *limit.Request) (d limit.Decision, ok bool) {
	if len(req.Limits) != 1 || req.Cost < 0 || req.Refused != 0 || req.Limits[0].CountRefusals {
		return d, false
	}
	l := &req.Limits[0]
	sh := s.keys.Of(req.Key)
	sh.Lock()
	defer sh.Unlock()
	e := sh.M[req.Key]
	if e == nil || e.expires <= now || e.byName != nil || len(e.slots) >= max(e.compactAt, manySlots) {
		return d, false
	}
	var sl *slot
	for i := range e.slots {
		if e.slots[i].lim == *l {
			sl = &e.slots[i]
			break
		}
	}
	if sl == nil || sl.alg != limit.TokenBucket || l.Shadow {
		return d, false
	}
	// limit.Evaluate's token bucket and limit.Decide of its one outcome,
	// with the limit's constants computed when it was first taken.
	cost, p, c := req.EffectiveCost(), sl.p, sl.capacity
	credits := c
	if sl.expires > now {
		credits = min(sl.state.A, c)
		if elapsed := now - sl.state.B; elapsed > 0 {
			if elapsed >= ceilDiv(c-credits, l.Count) {
				credits = c
			} else {
				credits += elapsed * l.Count
			}
		}
	}
	d = limit.Decision{Source: limit.FromMemory, Remaining: credits / p}
	switch {
	case cost > sl.burst:
		d.RetryAfter = limit.Never
	case credits < cost*p:
		d.RetryAfter = time.Duration(ceilDiv(cost*p-credits, l.Count)) * time.Millisecond
	default:
		credits -= cost * p
		reset := ceilDiv(c-credits, l.Count)
		d.Allowed, d.Remaining = true, credits/p
		sl.state = limit.State{Exists: true, A: credits, B: now}
		sl.expires = now + max(reset, 1)
		e.expires = max(e.expires, sl.expires)
	}
	d.ResetAfter = time.Duration(ceilDiv(c-credits, l.Count)) * time.Millisecond
	sweepIfDue(sh, now)
	return d, true
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// TakeAt is Take at an explicit time in Unix milliseconds, for callers that
// keep their own clock. req must be valid.
func (s *Store) TakeAt(now int64, req *limit.Request) limit.Decision {
	_, d := s.TakeUpToAt(now, req, req.EffectiveCost())
	return d
}

// results returns the buffer each limit's Result is written to for req:
// none for a request of one enforced limit, whose Decision is its answer
// (limit.DecideEach), else one per limit, in buf when it fits.
func results(buf []limit.Result, req *limit.Request) []limit.Result {
	n := len(req.Limits)
	if n < 2 && !req.HasShadow() {
		return nil
	}
	if cap(buf) < n {
		return make([]limit.Result, n)
	}
	return buf[:n]
}

// takeShadow checks req's shadow limits, if any, at its cost, takes it from
// them if they all allow it, and puts their verdict in d. The caller holds
// sh's lock, the same hold as the enforced limits' take.
func takeShadow(sh *stripe, now int64, req *limit.Request, d *limit.Decision, rs []limit.Result) {
	if !req.HasShadow() {
		return
	}
	v := take(sh, now, req, req.EffectiveCost(), true, rs)
	d.Shadow = limit.ShadowVerdict{Checked: true, Allowed: v.Allowed, Index: v.Index, Remaining: v.Remaining, RetryAfter: v.RetryAfter}
}

// stripe is the part of the store one lock guards.
type stripe = striped.Stripe[string, *entry]

// sweepIfDue drops sh's keys whose every state has expired, after about as
// many takes as the stripe holds keys, so its cost per take is constant.
// The caller holds sh's lock.
func sweepIfDue(sh *stripe, now int64) {
	if sh.Due(now, 0) {
		sh.Sweep(now, func(_ string, e *entry) bool { return e.expires <= now })
	}
}

// take checks req's limits of one group, enforced or shadow, at cost and
// takes it from them if every one allows; the other group's limits are
// neither read nor written. When rs is not nil, rs[i] is set to the
// Result of each limit i of the group. The caller holds sh's lock.
func take(sh *stripe, now int64, req *limit.Request, cost int64, shadow bool, rs []limit.Result) limit.Decision {
	var buf [4]limit.Outcome
	outs := buf[:0]
	e := live(sh, now, req.Key)
	if e != nil && len(e.slots) >= max(e.compactAt, manySlots) {
		e.compact(now)
	}
	var idxBuf [4]int
	idx := idxBuf[:0]
	group := false // the group has a limit
	for i := range req.Limits {
		l := &req.Limits[i]
		if l.Shadow != shadow {
			idx = append(idx, -1)
			outs = append(outs, limit.Outcome{})
			continue
		}
		group = true
		var st limit.State
		at := -1
		if e != nil {
			if at = e.find(l); at >= 0 && e.slots[at].expires > now {
				st = e.slots[at].state
			}
		}
		idx = append(idx, at)
		outs = append(outs, limit.Evaluate(l, &st, now, cost))
	}
	d := limit.DecideGroup(outs, req.Limits, shadow)
	d.Source = limit.FromMemory
	if rs != nil {
		for i := range req.Limits {
			if req.Limits[i].Shadow == shadow {
				rs[i] = limit.ResultOf(&outs[i], cost, d.Allowed)
			}
		}
	}
	if d.Allowed && group {
		if e == nil {
			e = &entry{}
			sh.M[req.Key] = e
		}
		for i := range req.Limits {
			l := &req.Limits[i]
			if l.Shadow != shadow {
				continue
			}
			e.write(l, idx[i], outs[i].Next, now+outs[i].TTL)
		}
	}
	sweepIfDue(sh, now)
	return d
}

// live returns key's entry, emptied when every state in it has expired,
// or nil. The caller holds sh's lock.
func live(sh *stripe, now int64, key string) *entry {
	e := sh.M[key]
	if e != nil && e.expires <= now {
		e.slots, e.byName = e.slots[:0], nil
	}
	return e
}

// write stores state, kept until expires (Unix ms), in l's slot at (-1: a
// new slot), and keeps l's constants there for takeKnown.
func (e *entry) write(l *limit.Limit, at int, state limit.State, expires int64) {
	if at < 0 {
		e.slots = append(e.slots, slot{alg: l.Alg(), unit: l.Unit()})
		at = len(e.slots) - 1
		if e.byName != nil {
			e.byName[l.Name] = at
		}
	}
	sl := &e.slots[at]
	sl.state, sl.expires = state, expires
	if sl.lim != *l {
		sl.lim, sl.p, sl.burst = *l, l.PeriodMillis(), l.EffectiveBurst()
		sl.capacity = sl.burst * sl.p
	}
	e.expires = max(e.expires, expires)
}

// find returns the index of l's slot, or -1.
func (e *entry) find(l *limit.Limit) int {
	alg, unit := l.Alg(), l.Unit()
	if e.byName != nil {
		i, ok := e.byName[l.Name]
		if !ok {
			return -1
		}
		if sl := &e.slots[i]; sl.lim.Shadow == l.Shadow && sl.alg == alg && sl.lim.Period == l.Period && sl.unit == unit {
			return i
		}
		// A slot of the same name that counts differently: look for one
		// that counts the same, as below.
	}
	for i := range e.slots {
		if sl := &e.slots[i]; sl.lim.Name == l.Name && sl.lim.Shadow == l.Shadow && sl.alg == alg && sl.lim.Period == l.Period && sl.unit == unit {
			return i
		}
	}
	return -1
}

// compact drops e's expired slots and, when many remain, indexes them by
// name. The next compaction waits until the slots have doubled, so its cost
// per take is constant.
func (e *entry) compact(now int64) {
	live := e.slots[:0]
	for _, sl := range e.slots {
		if sl.expires > now {
			live = append(live, sl)
		}
	}
	clear(e.slots[len(live):])
	e.slots = live
	e.byName = nil
	if len(live) >= manySlots/2 {
		e.byName = make(map[string]int, len(live))
		for i := range live {
			e.byName[live[i].lim.Name] = i
		}
	}
	e.compactAt = 2 * max(len(live), manySlots/2)
}

// Len reports how many keys the store holds, including expired ones not yet
// swept. It is for tests and metrics.
func (s *Store) Len() int { return s.keys.Len() }
