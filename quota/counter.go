package quota

import (
	"sync"
	"time"
)

// Counter is the deterministic core of batched quota counting for one
// gateway: which requests its share of each quota admits, which counts it
// still owes the shared store, and what it last heard of the fleet's
// totals. It does no I/O and reads no clock. The zero value is not usable;
// build one with NewCounter. It is safe for concurrent use.
type Counter struct {
	fleet func() int

	mu      sync.Mutex
	entries map[counterKey]*entry // guarded by mu
}

// counterKey names one key's counter of one quota in one period.
type counterKey struct{ key, counter string }

// entry is this gateway's account of one counter.
type entry struct {
	count     int64     // the quota's Count
	known     bool      // shared has been heard from the shared store
	degraded  bool      // not known, and the read failed: counted at this gateway's share
	shared    int64     // the fleet's total at the last settle, ours included
	pending   int64     // admitted here since the last Pending
	inflight  int64     // handed to a flush not yet settled
	allowance int64     // still admissible here before the next settle
	expire    time.Time // the period's end
}

// NewCounter returns a Counter for a fleet whose size fleet reports (at
// least 1 is used; nil means 1).
func NewCounter(fleet func() int) *Counter {
	if fleet == nil {
		fleet = func() int { return 1 }
	}
	return &Counter{fleet: fleet, entries: map[counterKey]*entry{}}
}

// Decision is a Counter's answer to one request.
type Decision struct {
	// Allowed reports whether every quota admitted the request.
	Allowed bool
	// Unknown reports that a quota's counter has not been heard from the
	// shared store in this process: the caller reads it (Add with a
	// delta of 0, then Settle) and asks again. Allowed is false. After a
	// failed read the counter is counted at this gateway's share of the
	// whole quota instead, until a flush reaches the store.
	Unknown bool
	// Index is the quota the fields below describe: the one that refused,
	// or when allowed the one with the least left.
	Index int
	// Remaining is that quota's estimate of what the fleet has left in
	// this period after the request: the total last heard, less what this
	// gateway admitted since.
	Remaining int64
	// ResetAfter is how long until that quota's period ends.
	ResetAfter time.Duration
	// ShadowRefused reports that a shadow quota (Quota.Shadow) would have
	// refused the request, and ShadowIndex which (the first such). Shadow
	// quotas are asked only when the enforced ones admit the request, and
	// never change Allowed; Index and Remaining speak of the enforced
	// quotas alone (Index is -1 when there are none).
	ShadowRefused bool
	ShadowIndex   int
}

// Add is one counter's addition to the shared store, and what Settle
// needs back.
type Add struct {
	// Key is the request key, and Counter the counter's name
	// (Quota.CounterName).
	Key, Counter string
	// Delta is how much to add; 0 only reads the total.
	Delta int64
	// ExpireAt is when the shared counter may be dropped: the period's end
	// and a day's grace for reports.
	ExpireAt time.Time
}

// Grace is how long a counter outlives its period in the shared store, so
// that GET /admin/v1/usage can show yesterday's count.
const Grace = 24 * time.Hour

// Take decides a request of cost tokens of key against quotas at now, and
// counts it when every enforced quota admits it (all or nothing); then
// each shadow quota that would admit it counts it too, and one that would
// not is reported (Decision.ShadowRefused), so a shadow counter counts
// what the quota would have let through.
func (c *Counter) Take(now time.Time, key string, quotas []Quota, cost int64) Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	var es, ss [4]*entry
	list, shadows := es[:0], ss[:0]
	d := Decision{Allowed: true, Index: -1}
	unknown := false
	for i := range quotas {
		q := &quotas[i]
		id, _, end := q.Window(now)
		k := counterKey{q.keyOf(key), q.CounterName(id)}
		e := c.entries[k]
		if e == nil {
			e = &entry{count: q.Count, expire: end}
			c.entries[k] = e
		}
		e.count = q.Count
		if !e.known && !e.degraded {
			// Every counter of the request is made, so that one read
			// settles them all.
			unknown = true
			continue
		}
		if q.Shadow {
			if e.allowance >= cost {
				shadows = append(shadows, e)
			} else if !d.ShadowRefused {
				d.ShadowRefused, d.ShadowIndex = true, i
			}
			continue
		}
		list = append(list, e)
		rem := Remaining(e.count, e.shared+e.pending+e.inflight+cost)
		if e.allowance < cost {
			if d.Allowed || e.expire.Sub(now) > d.ResetAfter {
				d = Decision{Index: i, Remaining: Remaining(e.count, e.shared+e.pending+e.inflight), ResetAfter: e.expire.Sub(now)}
			}
			continue
		}
		if d.Allowed && (d.Index < 0 || rem < d.Remaining) {
			d.Index, d.Remaining, d.ResetAfter = i, rem, e.expire.Sub(now)
		}
	}
	if unknown {
		return Decision{Unknown: true, Index: -1}
	}
	if !d.Allowed {
		d.ShadowRefused, d.ShadowIndex = false, 0
		return d
	}
	for _, e := range append(list, shadows...) {
		e.pending += cost
		e.allowance -= cost
	}
	return d
}

// Pending hands over every count admitted since the last call, to be added
// to the shared store, and the reads of counters not yet heard of; the
// caller passes the slice back to Settle with the store's answer. Counters
// of periods that ended, with nothing owed, are dropped.
func (c *Counter) Pending(now time.Time) []Add {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Add
	for k, e := range c.entries {
		if e.pending == 0 && e.inflight == 0 && e.known && !now.Before(e.expire) {
			delete(c.entries, k)
			continue
		}
		if e.pending == 0 && e.known {
			continue
		}
		out = append(out, Add{Key: k.key, Counter: k.counter, Delta: e.pending, ExpireAt: e.expire.Add(Grace)})
		e.inflight += e.pending
		e.pending = 0
	}
	return out
}

// Settle takes the shared store's answer to adds (from Pending): totals,
// parallel to adds, or err when the additions may not have been made. On
// success each counter learns the fleet's total and gets its allowance
// until the next settle: its share, ceil(R/N), of the remaining R. On
// error the counts are owed again, and the allowance is what was left of
// the last one: in an outage a gateway admits at most its share.
func (c *Counter) Settle(adds []Add, totals []int64, err error) {
	n := int64(max(c.fleet(), 1))
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, a := range adds {
		e := c.entries[counterKey{a.Key, a.Counter}]
		if e == nil {
			continue
		}
		e.inflight -= a.Delta
		if err != nil || i >= len(totals) {
			e.pending += a.Delta
			if !e.known && !e.degraded {
				// Never heard: admit this gateway's share of the whole
				// quota until a flush reaches the store.
				e.degraded, e.allowance = true, (e.count+n-1)/n-e.pending
			}
			continue
		}
		e.known, e.degraded = true, false
		e.shared = totals[i]
		r := Remaining(e.count, e.shared+e.inflight)
		e.allowance = (r+n-1)/n - e.pending
	}
}
