// Package limittest is the conformance suite every limit.Store must pass,
// with the fake clock it drives them by, and what the layers' benchmarks
// share: a store that grants everything doing nothing, and the CPU time
// per op.
//
// A store under test takes its clock from the suite, so refill and windows
// are tested without sleeping; the Redis store does this by passing the
// suite's time to its script instead of reading Redis's TIME.
package limittest

import (
	"sync"
	"time"
)

// Clock is a settable clock, safe for concurrent use. The zero value reads
// as the Unix epoch; use NewClock.
type Clock struct {
	mu  sync.Mutex
	now time.Time // guarded by mu
}

// NewClock returns a clock standing at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
