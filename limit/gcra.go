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
// The units depend on Count, which the bucket's identity does not hold: two
// rules may name the same limit at different rates, and a rule change may
// change the rate. So the state keeps the Count its TAT was counted at and
// the debt the take that wrote it left (from which the time of that take
// follows), and gcraDebt converts a debt counted at another rate as the
// token bucket would.
func gcra(l *Limit, s *State, now, cost int64) Outcome {
	perMs, perToken := gcraUnits(l)
	burst := l.EffectiveBurst()
	capacity := burst * perToken
	at := now * perMs
	debt := gcraDebt(l, s, now, perMs, perToken)
	reset := ceilDiv(debt, perMs)
	// A burst lowered since the last take can leave more debt than the new
	// capacity: nothing is left, and the debt drains at the usual rate.
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
		Next: State{Exists: true, A: at + debt, B: l.Count, C: debt}, TTL: max(reset, 1)}
}

// gcraDebt returns what the bucket of l in state s lacks at now, in l's
// units of 1/perMs ms. A state counted at l's Count (or one that does not
// say, B = 0, as Redis values written before the rate was stored) is read
// as it is. A state counted at another rate holds a debt in other units: it
// is converted to credits (tokens × period, which do not depend on Count),
// as of the take that wrote it, clamped to l's capacity, refilled since then
// at l's rate, and rounded up to l's units. Those are the token bucket's
// steps after the same change, so GCRA never admits more than the token
// bucket would; rounding up can cost the key less than one token
// (gcd(Count, period) credits) per change, until the bucket is full again.
func gcraDebt(l *Limit, s *State, now, perMs, perToken int64) int64 {
	if !s.Exists {
		return 0 // a key never seen, or dropped, is a full bucket
	}
	if s.B <= 0 || s.B == l.Count {
		return max(s.A-now*perMs, 0)
	}
	p := l.PeriodMillis()
	g := p / perToken // gcd(Count, period): credits per unit
	full := l.EffectiveBurst() * p
	oldG := gcd(s.B, p)
	owed := s.C                          // the debt the last take left, in its units
	last := floorDiv(s.A-owed, s.B/oldG) // when it was taken: TAT = time·units + debt
	// Compare before multiplying, so that the credits stay below 2^53.
	lacking := full
	if owed < ceilDiv(full, oldG) {
		lacking = owed * oldG
	}
	if elapsed := now - last; elapsed > 0 {
		if elapsed >= ceilDiv(lacking, l.Count) {
			lacking = 0
		} else {
			lacking -= elapsed * l.Count
		}
	}
	return ceilDiv(lacking, g)
}
