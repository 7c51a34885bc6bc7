package limit

import (
	"fmt"
	"math"
	"time"
)

// State is what an algorithm keeps for one limit of one key. The in-process
// store holds it in memory; the Redis script keeps the same integers in a
// Redis value, so both stores compute the same answers.
//
// The meaning of the fields depends on the algorithm (times are Unix
// milliseconds, "period" is the limit's Period in milliseconds):
//
//	token_bucket    A = credits (tokens × period), B = time of the last take
//	gcra            A = theoretical arrival time, in units of 1/u ms where
//	                u = Count / gcd(Count, period): the time at which the
//	                bucket would be full again, so A ≤ now·u means full
//	                (u is part of the limit's BucketID)
//	sliding_window  A = start of the current window, B = tokens taken in it,
//	                C = tokens taken in the window before it
//	fixed_window    A = start of the current window, B = tokens taken in it
//	sliding_log     Log = one entry per admitted token, its admission time,
//	                oldest first; at most Count entries
//
// A state never needs a clock to be read: a window's start is stored with
// its counters, so a state kept past its TTL reads the same as a dropped one.
type State struct {
	// Exists is false for a key that was never seen or has been dropped: a
	// missing state is a full bucket or an empty window.
	Exists  bool
	A, B, C int64
	// Log holds the admission times of the sliding log, oldest first.
	// Evaluate never modifies it and never returns an Outcome whose
	// Next.Log shares its memory, so a store may keep it without copying.
	Log []int64
}

// Outcome is one limit's answer at one instant.
type Outcome struct {
	// Allowed reports whether this limit has room for the cost.
	Allowed bool
	// Remaining is how many tokens are left: after the take when allowed,
	// as they are now when refused.
	Remaining int64
	// RetryAfter is how many milliseconds until the cost fits, zero when
	// allowed, and -1 when it never will.
	RetryAfter int64
	// ResetAfter is how many milliseconds until the limit is full again
	// (window algorithms: until the current window ends).
	ResetAfter int64
	// Next is the state to store if the whole request is allowed.
	Next State
	// TTL is how many milliseconds, from the now Evaluate was given, Next
	// must be kept; after that, dropping it changes no answer for the same
	// limit. It is at least 1. A limit changed since (a higher burst, a
	// lower rate) may still find the state useful after its TTL: see
	// [Limit].
	TTL int64
}

// Evaluate checks one limit, in state s, for a request of cost tokens at now
// (Unix milliseconds). It does not modify s or the memory s points to. l must
// be valid and cost positive. Answers are exact integers, equal to the Redis
// script's, for now from 0 to 2^42 (the year 2109). The window algorithms
// and the sliding log read a clock that has stepped back as standing still
// at the newest time their state records.
func Evaluate(l *Limit, s *State, now, cost int64) Outcome {
	switch l.Alg() {
	case TokenBucket:
		return tokenBucket(l, s, now, cost)
	case GCRA:
		return gcra(l, s, now, cost)
	case SlidingWindow:
		return slidingWindow(l, s, now, cost)
	case FixedWindow:
		return fixedWindow(l, s, now, cost)
	case SlidingLog:
		return slidingLog(l, s, now, cost)
	}
	// Validate refuses unknown algorithms, so this is a programming error in
	// the caller; answer with a refusal rather than a panic.
	return Outcome{RetryAfter: -1, Remaining: 0, TTL: 1, Next: *s}
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// floorDiv returns ⌊a/b⌋ for b > 0 and any a: Go's / truncates towards
// zero, Lua's math.floor does not, and window starts must agree for times
// before the epoch too.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// tokenBucket keeps credits instead of fractional tokens: one token is
// period-in-ms credits and the bucket gains Count credits every millisecond.
// Everything is then integer arithmetic, exact in Go and in Lua alike.
func tokenBucket(l *Limit, s *State, now, cost int64) Outcome {
	p := l.PeriodMillis()
	burst := l.EffectiveBurst()
	capacity := burst * p
	credits := capacity
	if s.Exists {
		credits = min(s.A, capacity) // a lowered burst clamps what is stored
		if elapsed := now - s.B; elapsed > 0 {
			if elapsed >= ceilDiv(capacity-credits, l.Count) {
				credits = capacity
			} else {
				credits += elapsed * l.Count
			}
		}
	}
	if cost > burst {
		return Outcome{Remaining: credits / p, RetryAfter: -1,
			ResetAfter: ceilDiv(capacity-credits, l.Count), Next: *s, TTL: 1}
	}
	need := cost * p
	if credits < need {
		return Outcome{Remaining: credits / p, RetryAfter: ceilDiv(need-credits, l.Count),
			ResetAfter: ceilDiv(capacity-credits, l.Count), Next: *s, TTL: 1}
	}
	left := credits - need
	reset := ceilDiv(capacity-left, l.Count)
	return Outcome{Allowed: true, Remaining: left / p, ResetAfter: reset,
		Next: State{Exists: true, A: left, B: now}, TTL: max(reset, 1)}
}

// Decide combines the outcomes of a request's limits, in request order, into
// one Decision: allowed only if every limit allowed.
func Decide(outs []Outcome) Decision {
	d, _ := decide(outs, nil, false)
	return d
}

// DecideRequest combines the outcomes of every limit of a request, outs[i]
// being limits[i]'s, into one Decision: Allowed, Index and the rest from
// the enforced limits as Decide combines them, and Shadow from the shadow
// limits (Limit.Shadow), which never refuse. Without shadow limits it is
// Decide. A request of shadow limits alone is allowed, with Index -1.
func DecideRequest(outs []Outcome, limits []Limit) Decision {
	if !hasShadow(limits) {
		return Decide(outs)
	}
	d, _ := decide(outs, limits, false)
	s, _ := decide(outs, limits, true)
	d.Shadow = ShadowVerdict{Checked: true, Allowed: s.Allowed, Index: s.Index, Remaining: s.Remaining, RetryAfter: s.RetryAfter}
	return d
}

// DecideGroup is Decide over the outcomes of the limits whose Shadow is
// shadow alone, outs[i] being limits[i]'s; the others' outcomes are not
// read. Index is a position in limits, -1 when the group is empty.
func DecideGroup(outs []Outcome, limits []Limit, shadow bool) Decision {
	d, _ := decide(outs, limits, shadow)
	return d
}

// decide combines the outcomes of the limits whose Shadow is shadow (all of
// outs, enforced, when limits is nil). found is false when there were
// none; Index is then 0 for nil limits, as Decide always answered, and -1
// otherwise.
func decide(outs []Outcome, limits []Limit, shadow bool) (Decision, bool) {
	d := Decision{Allowed: true}
	best := -1
	for i := range outs {
		if limits != nil && limits[i].Shadow != shadow {
			continue
		}
		o := &outs[i]
		if !o.Allowed {
			if d.Allowed || waitsLonger(o.RetryAfter, outs[best].RetryAfter) {
				best = i
			}
			d.Allowed = false
			continue
		}
		if d.Allowed && (best < 0 || o.Remaining < outs[best].Remaining ||
			o.Remaining == outs[best].Remaining && o.ResetAfter > outs[best].ResetAfter) {
			best = i
		}
	}
	if best < 0 {
		if limits != nil {
			d.Index = -1
		}
		return d, false
	}
	o := &outs[best]
	d.Index = best
	d.Remaining = o.Remaining
	d.ResetAfter = millis(o.ResetAfter)
	switch {
	case d.Allowed:
	case o.RetryAfter < 0:
		d.RetryAfter = Never
	default:
		d.RetryAfter = millis(o.RetryAfter)
	}
	return d, true
}

// millis converts ms ≥ 0 to a Duration. Validate keeps every wait within
// MaxWait; outcomes of limits it would refuse saturate rather than wrap
// round to a negative Duration that a caller could take for Never.
func millis(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// waitsLonger reports whether retry a (ms, -1 for never) is a longer wait than b.
func waitsLonger(a, b int64) bool {
	if b < 0 {
		return false
	}
	return a < 0 || a > b
}

// String describes the limit the way the rules file writes it. Window
// algorithms have no burst to show.
func (l Limit) String() string {
	if l.Alg().windowed() {
		return fmt.Sprintf("%s: %d per %v, %s", l.Name, l.Count, l.Period, l.Alg())
	}
	return fmt.Sprintf("%s: %d per %v, burst %d, %s", l.Name, l.Count, l.Period, l.EffectiveBurst(), l.Alg())
}
