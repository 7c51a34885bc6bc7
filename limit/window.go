package limit

import "sort"

// windowStart returns the start of the calendar window holding now: windows
// are aligned to multiples of the period since the Unix epoch, so every
// gateway and the Redis script agree on them without sharing anything.
func windowStart(now, period int64) int64 { return floorDiv(now, period) * period }

// fixedWindow counts the tokens taken in the current calendar window. It is
// the cheapest algorithm and the least exact: a client can spend Count at
// the end of one window and Count again at the start of the next.
func fixedWindow(l *Limit, s *State, now, cost int64) Outcome {
	p := l.PeriodMillis()
	caller := now
	if s.Exists && s.A > now {
		now = s.A
	}
	ws := windowStart(now, p)
	used := int64(0)
	if s.Exists && s.A == ws {
		used = s.B
	}
	reset := ws + p - now
	remaining := max(l.Count-used, 0)
	switch {
	case cost > l.Count:
		return Outcome{Remaining: remaining, RetryAfter: -1, ResetAfter: reset, Next: *s, TTL: 1}
	case used+cost > l.Count:
		// The next window starts empty and cost fits in it.
		return Outcome{Remaining: remaining, RetryAfter: reset, ResetAfter: reset, Next: *s, TTL: 1}
	}
	// The TTL counts from the caller's time, which may be before the window
	// a stepped-back clock stands still in: the state matters until that
	// window ends.
	return Outcome{Allowed: true, Remaining: remaining - cost, ResetAfter: reset,
		Next: State{Exists: true, A: ws, B: used + cost}, TTL: ws + p - caller}
}

// slidingWindow estimates the tokens taken in the last period as the current
// window's count plus the previous window's count weighted by the share of
// it the rolling window still overlaps, rounded up: the estimate is never
// below what an even spread of the previous window would give.
func slidingWindow(l *Limit, s *State, now, cost int64) Outcome {
	p, c := l.PeriodMillis(), l.Count
	caller := now
	if s.Exists && s.A > now {
		now = s.A
	}
	ws := windowStart(now, p)
	var cur, prev int64
	if s.Exists {
		switch s.A {
		case ws:
			cur, prev = s.B, s.C
		case ws - p:
			prev = s.B
		}
	}
	e := now - ws
	used := cur + ceilDiv(prev*(p-e), p)
	reset := ws + p - now
	remaining := max(c-used, 0)
	if cost > c {
		return Outcome{Remaining: remaining, RetryAfter: -1, ResetAfter: reset, Next: *s, TTL: 1}
	}
	if used+cost > c {
		var retry int64
		if cur+cost > c {
			// The current window alone is too full: wait for the next one,
			// where this window becomes the weighted previous one, until
			// cur·(p-e')/p ≤ c-cost. cur > 0 here because cost ≤ c.
			retry = reset + p - floorDiv((c-cost)*p, cur)
		} else {
			// Only the previous window's share is in the way (so prev > 0):
			// wait until prev·(p-e')/p ≤ c-cur-cost within this window.
			retry = p - floorDiv((c-cur-cost)*p, prev) - e
		}
		return Outcome{Remaining: remaining, RetryAfter: retry, ResetAfter: reset, Next: *s, TTL: 1}
	}
	// The current count weighs on the next window too, so it is kept until
	// that one ends, counted from the caller's time (see fixedWindow).
	return Outcome{Allowed: true, Remaining: remaining - cost, ResetAfter: reset,
		Next: State{Exists: true, A: ws, B: cur + cost, C: prev}, TTL: ws + 2*p - caller}
}

// slidingLog keeps one entry per admitted token and counts those younger
// than one period: exact, at the price of Count entries per key. Refused
// requests add nothing, so a key far over its limit still holds at most
// Count entries.
func slidingLog(l *Limit, s *State, now, cost int64) Outcome {
	p, c := l.PeriodMillis(), l.Count
	var log []int64
	if s.Exists {
		log = s.Log
	}
	caller := now
	if n := len(log); n > 0 && log[n-1] > now {
		now = log[n-1]
	}
	// An entry counts while it is younger than one period.
	live := log[sort.Search(len(log), func(i int) bool { return log[i] > now-p }):]
	n := int64(len(live))
	reset := int64(0)
	if n > 0 {
		reset = live[0] + p - now
	}
	remaining := max(c-n, 0)
	if cost > c {
		return Outcome{Remaining: remaining, RetryAfter: -1, ResetAfter: reset, Next: *s, TTL: 1}
	}
	if n+cost > c {
		// cost ≤ c, so the entry whose departure makes room is a live one.
		leave := live[n+cost-c-1]
		return Outcome{Remaining: remaining, RetryAfter: leave + p - now, ResetAfter: reset, Next: *s, TTL: 1}
	}
	// A fresh slice, so that s.Log is never written and two outcomes of the
	// same state never share an array.
	next := make([]int64, n, n+cost)
	copy(next, live)
	for range cost {
		next = append(next, now)
	}
	// The newest entries, stamped now, live until now+p; the TTL counts from
	// the caller's time, which a stepped-back clock puts before now.
	return Outcome{Allowed: true, Remaining: remaining - cost, ResetAfter: next[0] + p - now,
		Next: State{Exists: true, Log: next}, TTL: now + p - caller}
}
