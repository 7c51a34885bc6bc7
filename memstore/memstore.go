// Package memstore is the in-process limit.Store: exact for one gateway, and
// the store sluice uses when no Redis is configured. It also serves as the
// local fallback while a Redis shard is unreachable.
package memstore

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Now returns the current time. Nil means time.Now. Tests pass a fake
	// clock here.
	Now func() time.Time
	// Shards is how many independently locked maps hold the keys. Zero
	// means 64.
	Shards int
}

// Store keeps every key's limit states in memory. It is safe for concurrent
// use; all limits of one key are checked and taken under one lock, so a
// request is all or nothing. Memory is bounded by the keys active within
// their limits' refill time: a state that would be full again is dropped.
type Store struct {
	now    func() time.Time
	seed   maphash.Seed
	shards []shard
}

type shard struct {
	mu      sync.Mutex
	keys    map[string]*entry // guarded by mu
	touches int               // takes since the last sweep; guarded by mu
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
// limit.BucketID, which says why.
type slot struct {
	name    string
	shadow  bool // a shadow limit's state, apart from an enforced one's
	alg     limit.Algorithm
	period  time.Duration
	unit    int64
	state   limit.State
	expires int64
}

var _ limit.Store = (*Store)(nil)

// New returns an empty Store.
func New(cfg Config) *Store {
	n := cfg.Shards
	if n <= 0 {
		n = 64
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	s := &Store{now: now, seed: maphash.MakeSeed(), shards: make([]shard, n)}
	for i := range s.shards {
		s.shards[i].keys = make(map[string]*entry)
	}
	return s
}

// Take implements limit.Store. It never returns an error for a valid request.
func (s *Store) Take(_ context.Context, req *limit.Request) (limit.Decision, error) {
	if err := req.Validate(); err != nil {
		return limit.Decision{}, err
	}
	return s.TakeAt(s.now().UnixMilli(), req), nil
}

// TakeAt is Take at an explicit time in Unix milliseconds, for callers that
// keep their own clock. req must be valid.
func (s *Store) TakeAt(now int64, req *limit.Request) limit.Decision {
	sh := s.shard(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	d := sh.take(now, req, req.EffectiveCost(), false)
	sh.takeShadow(now, req, &d)
	return d
}

// takeShadow checks req's shadow limits, if any, at its cost, takes it from
// them if they all allow it, and puts their verdict in d. The caller holds
// sh.mu, the same hold as the enforced limits' take.
func (sh *shard) takeShadow(now int64, req *limit.Request, d *limit.Decision) {
	if !req.HasShadow() {
		return
	}
	v := sh.take(now, req, req.EffectiveCost(), true)
	d.Shadow = limit.ShadowVerdict{Checked: true, Allowed: v.Allowed, Index: v.Index, Remaining: v.Remaining, RetryAfter: v.RetryAfter}
}

// shard returns the shard that holds key.
func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)%uint64(len(s.shards))]
}

// take checks req's limits of one group, enforced or shadow, at cost and
// takes it from them if every one allows; the other group's limits are
// neither read nor written. The caller holds sh.mu.
func (sh *shard) take(now int64, req *limit.Request, cost int64, shadow bool) limit.Decision {
	var buf [4]limit.Outcome
	outs := buf[:0]
	e := sh.keys[req.Key]
	if e != nil && e.expires <= now {
		e.slots, e.byName = e.slots[:0], nil
	}
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
	if d.Allowed && group {
		if e == nil {
			e = &entry{}
			sh.keys[req.Key] = e
		}
		for i := range req.Limits {
			if req.Limits[i].Shadow != shadow {
				continue
			}
			o := &outs[i]
			exp := now + o.TTL
			if idx[i] < 0 {
				l := &req.Limits[i]
				e.slots = append(e.slots, slot{name: l.Name, shadow: l.Shadow, alg: l.Alg(), period: l.Period, unit: l.Unit(), state: o.Next, expires: exp})
				if e.byName != nil {
					e.byName[l.Name] = len(e.slots) - 1
				}
			} else {
				e.slots[idx[i]].state, e.slots[idx[i]].expires = o.Next, exp
			}
			e.expires = max(e.expires, exp)
		}
	}
	sh.touches++
	if sh.touches > len(sh.keys)+64 {
		sh.sweep(now)
	}
	return d
}

// find returns the index of l's slot, or -1.
func (e *entry) find(l *limit.Limit) int {
	alg, unit := l.Alg(), l.Unit()
	if e.byName != nil {
		i, ok := e.byName[l.Name]
		if !ok {
			return -1
		}
		if sl := &e.slots[i]; sl.shadow == l.Shadow && sl.alg == alg && sl.period == l.Period && sl.unit == unit {
			return i
		}
		// A slot of the same name that counts differently: look for one
		// that counts the same, as below.
	}
	for i := range e.slots {
		if sl := &e.slots[i]; sl.name == l.Name && sl.shadow == l.Shadow && sl.alg == alg && sl.period == l.Period && sl.unit == unit {
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
			e.byName[live[i].name] = i
		}
	}
	e.compactAt = 2 * max(len(live), manySlots/2)
}

// sweep drops keys whose every state has expired. It runs after about as
// many takes as the shard holds keys, so its cost per take is constant.
func (sh *shard) sweep(now int64) {
	for k, e := range sh.keys {
		if e.expires <= now {
			delete(sh.keys, k)
		}
	}
	sh.touches = 0
}

// Len reports how many keys the store holds, including expired ones not yet
// swept. It is for tests and metrics.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		s.shards[i].mu.Lock()
		n += len(s.shards[i].keys)
		s.shards[i].mu.Unlock()
	}
	return n
}
