package guard

import (
	"context"
	"sync/atomic"
	"time"
)

// The watcher. Every call to the remote runs under a call, a context of
// the guard's own listed on its shard, and one goroutine per Store looks
// at every listed call each poll: it ends a call whose caller's context is
// done, and judges the node of each call that has waited Timeout. So a
// call on a healthy node costs a list insert and removal under the
// shard's lock, and no timer, context or closure of its own.
//
// The watcher runs while calls are in flight and for idleAfter after the
// last; the first call after that starts it again. Close stops it, and
// calls after Close run under their caller's context alone.

// idleAfter is how long the watcher runs on with no call in flight.
const idleAfter = time.Second

// Why the guard ended a call.
const (
	running    int32 = iota
	endParent        // the caller's context is done
	endTimeout       // a store that is not a Watcher ran past Timeout
	endDown          // the node has been silent for DownAfter, or its breaker opened
	endQueued        // the call waited Timeout and MaxQueue while its node answered
)

// call is one call to the remote in flight, and the context it runs under:
// the caller's values and deadline, and a Done channel that the caller's
// cancellation and the watcher close. Calls are pooled: one that ends
// without being cancelled is reused, channel and all.
type call struct {
	parent context.Context
	done   chan struct{} // closed when the guard ends the call; never reused then
	sh     *shard
	start  time.Time
	why    atomic.Int32 // running, or why the call was ended; set before done closes

	// Guarded by sh.mu.
	waited     bool  // it ran past Timeout while its node answered
	prev, next *call // in sh's list of calls in flight
}

var _ context.Context = (*call)(nil)

// Deadline is the caller's.
func (c *call) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Done is closed when the caller's context is done (noticed within a
// poll) or the guard ends the call.
func (c *call) Done() <-chan struct{} { return c.done }

// Err is nil while the call runs; after, the caller's error, or
// context.DeadlineExceeded when the guard gave up on the node (for the
// remote a deadline passed), or context.Canceled when the call was shed.
func (c *call) Err() error {
	switch c.why.Load() {
	case running:
		return nil
	case endParent:
		return c.parent.Err()
	case endQueued:
		return context.Canceled
	}
	return context.DeadlineExceeded
}

// Value is the caller's.
func (c *call) Value(key any) any { return c.parent.Value(key) }

// newCall returns a call to sh under ctx, not yet listed.
func (s *Store) newCall(ctx context.Context, sh *shard) *call {
	c, _ := s.calls.Get().(*call)
	if c == nil {
		c = &call{done: make(chan struct{})}
	}
	c.parent, c.sh, c.waited = ctx, sh, false
	return c
}

// list puts c last on its shard's list of calls in flight, started now.
// sh.mu is held.
func (c *call) list() {
	sh := c.sh
	c.start = time.Now()
	c.prev = sh.tail
	if sh.tail == nil {
		sh.head = c
	} else {
		sh.tail.next = c
	}
	sh.tail = c
}

// watched returns c, listed, once a watcher runs, or nil when none can (the
// Store is closed): then the call runs under its caller's context alone.
func (s *Store) watched(c *call) *call {
	if !s.watching.Load() && !s.startWatcher() {
		s.finish(c)
		return nil
	}
	return c
}

// finish takes c off its shard's list and returns why it ended and
// whether it waited while its node answered. c is not used afterwards.
func (s *Store) finish(c *call) (why int32, waited bool) {
	sh := c.sh
	sh.mu.Lock()
	why, waited = c.unlist()
	sh.mu.Unlock()
	s.release(c, why)
	return why, waited
}

// unlist takes c off its shard's list and returns why it ended and
// whether it waited while its node answered. sh.mu is held.
func (c *call) unlist() (why int32, waited bool) {
	sh := c.sh
	if c.prev == nil {
		sh.head = c.next
	} else {
		c.prev.next = c.next
	}
	if c.next == nil {
		sh.tail = c.prev
	} else {
		c.next.prev = c.prev
	}
	return c.why.Load(), c.waited
}

// release forgets c, unlisted, and pools it for the next call unless it
// was ended (its channel closed). c is not used afterwards.
func (s *Store) release(c *call, why int32) {
	c.parent, c.sh, c.prev, c.next = nil, nil, nil, nil
	if why == running {
		// Its channel is still open: the next call may have it.
		s.calls.Put(c)
	}
}

// end ends c for why, unless it has ended already. sh.mu is held.
func (c *call) end(why int32) {
	if c.why.Load() == running {
		c.why.Store(why)
		close(c.done)
	}
}

// startWatcher starts the watcher unless it runs already, and reports
// whether one runs: not after Close.
func (s *Store) startWatcher() bool {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if s.closed {
		return false
	}
	if !s.watching.Load() {
		s.watching.Store(true)
		s.running.Add(1)
		go s.watch()
	}
	return true
}

// watch looks at every call in flight each poll until none has been for
// idleAfter, or none is after Close.
func (s *Store) watch() {
	defer s.running.Done()
	poll := min(s.step(), time.Millisecond)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	last, busy := time.Now(), time.Now()
	quit := s.bg.Done()
	for {
		select {
		case <-quit:
			quit = nil // the calls listed before Close are still watched
		case now := <-tick.C:
			// A poll late by more than a step means this process did not
			// run for a while (the machine or its scheduler held it): the
			// node's silence over that time may be ours too, so nodes are
			// judged again once it runs on time.
			onTime := now.Sub(last) <= poll+s.step()
			last = now
			if s.look(now, onTime) {
				busy = now
				continue
			}
			if quit == nil {
				return
			}
			if now.Sub(busy) < idleAfter {
				continue
			}
			// Idle: stop, unless a call came meanwhile. A call listed after
			// this look sees watching false and starts a new watcher.
			s.watching.Store(false)
			if !s.look(now, false) {
				return
			}
			s.watchMu.Lock()
			stay := !s.closed && !s.watching.Load()
			if stay {
				s.watching.Store(true)
			}
			s.watchMu.Unlock()
			if !stay {
				return
			}
		}
	}
}

// step is how often a call waiting on its node is looked at again.
func (s *Store) step() time.Duration { return max(s.cfg.Timeout/2, time.Microsecond) }

// look ends the calls whose caller has gone and, when judge is set, judges
// the node of every call that has waited Timeout. It reports whether any
// call was in flight.
func (s *Store) look(now time.Time, judge bool) (busy bool) {
	s.shards.Range(func(_, v any) bool {
		sh := v.(*shard)
		sh.mu.Lock()
		listed := sh.head != nil
		var oldest time.Time
		if listed {
			oldest = sh.head.start // under the lock: a call may be reused once off the list
		}
		sh.mu.Unlock()
		if !listed {
			return true
		}
		busy = true
		// The node's state, read once per shard and outside its lock, only
		// when some call has waited Timeout.
		var down, answering bool
		if judge && s.cfg.Stalled != nil && now.Sub(oldest) >= s.cfg.Timeout {
			down = s.cfg.Stalled(sh.name, s.cfg.DownAfter)
			answering = !s.cfg.Stalled(sh.name, s.step())
		}
		sh.mu.Lock()
		defer sh.mu.Unlock()
		for c := sh.head; c != nil; c = c.next {
			if c.why.Load() != running {
				continue
			}
			if c.parent.Err() != nil {
				c.end(endParent)
				continue
			}
			waited := now.Sub(c.start)
			if waited < s.cfg.Timeout {
				continue
			}
			switch {
			case s.cfg.Stalled == nil:
				c.end(endTimeout)
			case !judge:
				// Looked at again once this process runs on time.
			case down || sh.b.state == Open:
				// Silent for DownAfter, or other calls found the node down
				// meanwhile. (A half-open breaker's probe is this call or
				// another one: it decides.)
				c.end(endDown)
			default:
				c.waited = c.waited || answering
				if waited >= s.cfg.Timeout+s.cfg.MaxQueue {
					c.end(endQueued)
				}
			}
		}
		return true
	})
	return busy
}
