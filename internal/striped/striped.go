// Package striped provides a map split into stripes, each under its own
// lock, that sweeps out dead entries at a constant cost per use: the
// structure memstore's keys, lease's recent keys, share's usage counters
// and the gateway's decision-log sampler keep per key.
package striped

import (
	"hash/maphash"
	"maps"
	"sync"
)

// Map is a map from K to V split into stripes by the hash of a string
// key. The zero value is not usable; use New. It is safe for concurrent
// use as long as each Stripe's map is used under that stripe's lock.
type Map[K comparable, V any] struct {
	seed    maphash.Seed
	stripes []Stripe[K, V] // a power of two of them
	mask    uint64         // len(stripes) - 1
}

// Stripe is one lock (its Lock and Unlock) and the part of the map it
// guards.
type Stripe[K comparable, V any] struct {
	sync.Mutex
	// M holds the stripe's entries; guarded by the stripe's lock.
	M       map[K]V
	touches int   // uses since the last sweep; guarded by the lock
	swept   int64 // when it was last swept (the caller's clock); guarded by the lock
}

// New returns an empty Map of at least n stripes: n rounded up to a power
// of two, so that picking one is a mask, not a division.
func New[K comparable, V any](n int) *Map[K, V] {
	size := 1
	for size < n {
		size *= 2
	}
	m := &Map[K, V]{seed: maphash.MakeSeed(), stripes: make([]Stripe[K, V], size), mask: uint64(size - 1)}
	for i := range m.stripes {
		m.stripes[i].M = make(map[K]V)
	}
	return m
}

// Hash returns key's hash, from which At picks its stripe. A caller that
// needs the hash for something else too computes it once here.
func (m *Map[K, V]) Hash(key string) uint64 { return maphash.String(m.seed, key) }

// At returns the stripe of a key whose Hash is h.
func (m *Map[K, V]) At(h uint64) *Stripe[K, V] { return &m.stripes[h&m.mask] }

// Of returns the stripe that holds key, or in a map keyed by something
// else, the entries filed under key.
func (m *Map[K, V]) Of(key string) *Stripe[K, V] { return m.At(m.Hash(key)) }

// Stripes returns every stripe, for walks over the whole map.
func (m *Map[K, V]) Stripes() []Stripe[K, V] { return m.stripes }

// Len reports how many entries the map holds, taking each stripe's lock in
// turn.
func (m *Map[K, V]) Len() int {
	n := 0
	for i := range m.stripes {
		s := &m.stripes[i]
		s.Lock()
		n += len(s.M)
		s.Unlock()
	}
	return n
}

// Due counts one use of the stripe and reports whether it is time to
// sweep it: after about as many uses as it holds entries (so a sweep costs
// a constant amount per use), or, when every is positive, once every has
// passed since the last sweep by the caller's clock now. The caller holds
// the lock.
func (s *Stripe[K, V]) Due(now, every int64) bool {
	s.touches++
	return s.touches > len(s.M)+64 || every > 0 && now-s.swept >= every
}

// SweptWithin reports whether the stripe was swept less than every before
// now, by the caller's clock; a clock that went back reads as not. The
// caller holds the lock.
func (s *Stripe[K, V]) SweptWithin(now, every int64) bool {
	d := now - s.swept
	return d >= 0 && d < every
}

// Sweep deletes the entries for which drop returns true, and records now
// as the time of the sweep. The caller holds the lock.
func (s *Stripe[K, V]) Sweep(now int64, drop func(K, V) bool) {
	maps.DeleteFunc(s.M, drop)
	s.touches, s.swept = 0, now
}
