package limit

// horizon is the latest time, in Unix milliseconds, at which every
// algorithm's integers are guaranteed to stay below 2^53: 2^42 ms is in May
// 2109. Only GCRA multiplies the time itself, so only it is checked against
// the horizon.
const horizon = 1 << 42

// gcd returns the greatest common divisor of a, b > 0.
func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// gcraUnits returns GCRA's time scale for l: a millisecond is perMs units
// and one token is perToken units. The rate Count per period is reduced by
// its gcd so that the timestamps, which grow with perMs, stay small.
func gcraUnits(l *Limit) (perMs, perToken int64) {
	p := l.PeriodMillis()
	g := gcd(l.Count, p)
	return l.Count / g, p / g
}

// gcra is the token bucket kept as one timestamp, the theoretical arrival
// time (TAT): the instant the bucket would be full again. The debt TAT-now
// is what the bucket lacks, so credits = capacity - debt, and every answer
// equals tokenBucket's for the same rate and burst (the token bucket's
// credits are always multiples of the gcd, so reducing by it loses nothing).
// Times are in units of 1/perMs ms, so every step is an integer.
//
// The state is the TAT alone, as in redis-cell. Its units depend on the
// rate, so [Limit.BucketID] holds perMs: a state is only ever read in the
// units it was written in. A rule change that keeps perMs (any rate whose
// Count divides the period in ms has perMs = 1) keeps the TAT as a time: the
// key's debt carries over in time, and the new rate and burst read it. A
// debt is never negative, so that never admits more than a fresh bucket of
// the new rate would.
func gcra(l *Limit, s *State, now, cost int64) Outcome {
	perMs, perToken := gcraUnits(l)
	burst := l.EffectiveBurst()
	capacity := burst * perToken
	at := now * perMs
	debt := int64(0) // a key never seen, or dropped, is a full bucket
	if s.Exists && s.A > at {
		debt = s.A - at
	}
	reset := ceilDiv(debt, perMs)
	// A burst lowered (or, in the same units, a rate raised) since the last
	// take can leave more debt than the new capacity: nothing is left, and
	// the debt drains at the usual rate.
	remaining := max(capacity-debt, 0) / perToken
	if cost > burst {
		return Outcome{Remaining: remaining, RetryAfter: -1, ResetAfter: reset, Next: *s, TTL: 1}
	}
	need := cost * perToken
	// debt > capacity-need rather than debt+need > capacity: with a lowered
	// burst the sum could pass 2^53, where the Redis script's doubles round.
	if debt > capacity-need {
		return Outcome{Remaining: remaining, RetryAfter: ceilDiv(debt-(capacity-need), perMs),
			ResetAfter: reset, Next: *s, TTL: 1}
	}
	debt += need
	reset = ceilDiv(debt, perMs)
	return Outcome{Allowed: true, Remaining: (capacity - debt) / perToken, ResetAfter: reset,
		Next: State{Exists: true, A: at + debt}, TTL: max(reset, 1)}
}
