// Package inflight enforces concurrency limits: at most N requests of a
// key in flight at once, across the fleet. A slot is taken when a request
// is admitted and given back when its response ends, however it ends.
//
// The shared record is a set of slots per key, each with its start time
// (redisstore.Store: a sorted set on Redis's clock); a slot older than
// the request timeout is dropped by the next acquisition, so the slots of
// a gateway that died mid-request free themselves within the timeout.
// While the shared store cannot answer, each gateway counts its own
// requests in flight against its share, ceil(N / gateways), and a
// fail-closed limit refuses.
//
// Leases do not apply: a slot is not a token that can be spent ahead, it
// is held for a request's whole life, and every acquisition and release is
// one call to the shared store.
package inflight

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"

	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// Backend is the shared record of slots: redisstore.Store.
type Backend interface {
	Acquire(ctx context.Context, key, id string, most int64, life time.Duration) (taken bool, inFlight int64, wait time.Duration, err error)
	Release(ctx context.Context, key, id string) error
}

// Config configures Slots. The zero value gives the defaults.
type Config struct {
	// Timeout is the longest a request may be in flight: the gateway's
	// request timeout. A slot older than this is dropped, released or not.
	// Zero means 60s. A request that outlives it no longer holds a slot.
	Timeout time.Duration
	// CallTimeout bounds each call to the backend. Zero means 1s.
	CallTimeout time.Duration
	// Fleet is how many gateways share the limits: in an outage each
	// admits ceil(N / gateways). The zero value is a fleet of one.
	Fleet limit.Fleet
	// Logger receives failed releases. Nil discards.
	Logger *slog.Logger
}

// Slots takes and releases concurrency slots. It is safe for concurrent
// use. A nil Backend means in process: counted in this process alone.
type Slots struct {
	backend Backend
	cfg     Config

	mu    sync.Mutex
	local map[string]int64 // guarded by mu: slots held here without the backend
}

// New returns Slots over backend (nil: in process).
func New(backend Backend, cfg Config) (*Slots, error) {
	if cfg.Timeout < 0 || cfg.CallTimeout < 0 {
		return nil, fmt.Errorf("inflight: timeout %v and call timeout %v must not be negative", cfg.Timeout, cfg.CallTimeout)
	}
	if err := cfg.Fleet.Validate(); err != nil {
		return nil, fmt.Errorf("inflight: %w", err)
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, time.Minute)
	cfg.CallTimeout = cmp.Or(cfg.CallTimeout, time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Slots{backend: backend, cfg: cfg, local: map[string]int64{}}, nil
}

// Decision is the answer to an acquisition.
type Decision struct {
	// Allowed reports whether a slot was taken.
	Allowed bool
	// Limit is the most slots in flight, and InFlight how many are after
	// the call (this gateway's own count when Source is local).
	Limit, InFlight int64
	// RetryAfter is, when refused by the shared record, how long until the
	// oldest slot's life ends at the latest; zero when unknown.
	RetryAfter time.Duration
	// Source is limit.FromRedis (the shared record), limit.FromMemory (in
	// process), limit.FromLocalFallback (this gateway's share, the backend
	// down) or limit.FromFailClosed.
	Source limit.Source
}

// Slot is a taken slot. Release gives it back; the zero Slot holds none.
type Slot struct {
	s     *Slots
	key   string
	id    string
	local bool
	once  *sync.Once
}

// Acquire takes a slot of key, of which at most most may be in flight.
// failClosed refuses while the backend cannot answer instead of counting
// this gateway's share.
func (s *Slots) Acquire(ctx context.Context, key string, most int64, failClosed bool) (Slot, Decision) {
	if s.backend == nil {
		return s.acquireLocal(key, most, most, limit.FromMemory)
	}
	id := newID()
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	taken, n, wait, err := s.backend.Acquire(cctx, key, id, most, s.cfg.Timeout)
	cancel()
	if err == nil {
		d := Decision{Allowed: taken, Limit: most, InFlight: n, RetryAfter: wait, Source: limit.FromRedis}
		if !taken {
			return Slot{}, d
		}
		return Slot{s: s, key: key, id: id, once: new(sync.Once)}, d
	}
	if failClosed {
		return Slot{}, Decision{Limit: most, Source: limit.FromFailClosed}
	}
	g := int64(s.cfg.Fleet.Size())
	return s.acquireLocal(key, most, (most+g-1)/g, limit.FromLocalFallback)
}

// acquireLocal takes one of share slots of key counted here.
func (s *Slots) acquireLocal(key string, most, share int64, src limit.Source) (Slot, Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.local[key]
	if n >= share {
		return Slot{}, Decision{Limit: most, InFlight: n, Source: src}
	}
	s.local[key] = n + 1
	return Slot{s: s, key: key, local: true, once: new(sync.Once)}, Decision{Allowed: true, Limit: most, InFlight: n + 1, Source: src}
}

// Release gives the slot back, once: later calls do nothing. A failed
// release is logged; the slot then frees itself after Config.Timeout.
func (sl Slot) Release() {
	if sl.s == nil {
		return
	}
	sl.once.Do(func() {
		s := sl.s
		if sl.local {
			s.mu.Lock()
			if s.local[sl.key]--; s.local[sl.key] <= 0 {
				delete(s.local, sl.key)
			}
			s.mu.Unlock()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CallTimeout)
		defer cancel()
		if err := s.backend.Release(ctx, sl.key, sl.id); err != nil {
			s.cfg.Logger.Warn("concurrency slot not released; it frees itself after the request timeout",
				"key_slot", sl.id, "timeout", s.cfg.Timeout, "err", err)
		}
	})
}

// newID returns a random slot ID: 16 hex digits, unique enough that two
// gateways' slots of one key never collide.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b[:])
}
