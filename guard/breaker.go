package guard

import (
	"fmt"
	"time"
)

// State is a shard's circuit breaker state.
type State int

// The breaker states.
const (
	// Closed sends every call to the shard.
	Closed State = iota
	// HalfOpen lets one probe call through to see whether the shard is back;
	// every other call is answered locally meanwhile.
	HalfOpen
	// Open answers every call locally, without waiting on the shard, until
	// the pause is over.
	Open
)

// String names the state as logs and metrics show it.
func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int(s))
}

var stateNames = [...]string{Closed: "closed", HalfOpen: "half-open", Open: "open"}

// breaker is one shard's circuit breaker: a state machine fed with the
// time and the outcome of each call, doing no I/O of its own. It is not
// safe for concurrent use; Store holds its shard's lock around it.
type breaker struct {
	tripAfter int           // consecutive failures that open it
	pause     time.Duration // how long it stays open before a probe

	state    State
	failures int       // consecutive failures while closed
	until    time.Time // while open: when a probe may go
	probing  bool      // while half-open: the probe is out
	cause    error     // the failure that last opened it
}

// admit reports whether a call may go to the shard at now, and whether that
// call is the probe that decides a half-open breaker. A caller that is
// admitted must report the call's end with record or abandon.
func (b *breaker) admit(now time.Time) (call, probe bool) {
	switch b.state {
	case Closed:
		return true, false
	case Open:
		if now.Before(b.until) {
			return false, false
		}
		b.state = HalfOpen
		b.probing = false
	}
	if b.probing {
		return false, false
	}
	b.probing = true
	return true, true
}

// record feeds the outcome of an admitted call (err nil for success) and
// returns the state before and after it.
func (b *breaker) record(now time.Time, probe bool, err error) (from, to State) {
	from = b.state
	switch {
	case probe:
		b.probing = false
		if err == nil {
			b.state, b.failures, b.cause = Closed, 0, nil
		} else {
			b.open(now, err)
		}
	case b.state != Closed:
		// A call admitted before the breaker opened: its answer is stale
		// news, and the probe alone decides.
	case err == nil:
		b.failures = 0
	default:
		b.failures++
		if b.failures >= b.tripAfter {
			b.open(now, err)
		}
	}
	return from, b.state
}

// abandon ends an admitted call that gave no verdict on the shard, because
// its caller gave up first. An abandoned probe lets the next call probe.
func (b *breaker) abandon(probe bool) {
	if probe {
		b.probing = false
	}
}

func (b *breaker) open(now time.Time, err error) {
	b.state, b.failures, b.cause = Open, 0, err
	b.until = now.Add(b.pause)
}

// retryIn is how long until the breaker lets a probe through, at least a
// millisecond: the wait a refused fail-closed request is told.
func (b *breaker) retryIn(now time.Time) time.Duration {
	if b.state == Open {
		if d := b.until.Sub(now); d > time.Millisecond {
			return d.Round(time.Millisecond)
		}
	}
	return time.Millisecond
}
