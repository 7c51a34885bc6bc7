package lease

import (
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// book is what one gateway knows about one key's limit set: the tokens it
// holds, the refusal it remembers and how busy the key is here. It is a
// state machine fed with the time (Unix ms) and the shared store's answers;
// it does no I/O and is not safe for concurrent use (entry locks it).
type book struct {
	tokens  int64 // leased tokens not yet spent
	expires int64 // when the leased tokens are dropped

	deniedUntil int64 // refuse from memory until then...
	deniedCost  int64 // ...requests costing at least this much
	denied      limit.Decision

	fetching    bool           // a batch is on its way: at most one per key
	asking      chan struct{}  // a call for a refused key is out; closed when it is back
	lastRefused bool           // the shared store's last answer was a refusal
	last        limit.Decision // the shared store's last grant, for headers
	lastAt      int64

	// Requests seen in the current and the previous demand window: a key
	// is only as busy as its traffic here, whatever its limit allows.
	window    int64
	cur, prev int64
	lastUsed  int64
	dropped   int64 // tokens dropped at expiry, not yet counted by metrics

	// owed is the cost of the requests refused from memory whose refusals
	// count (limit.Limit.CountRefusals), charged with the key's next call
	// to the shared store (limit.Request.Refused), unless the last of them
	// (owedAt) is older than the time to fill the limits: their debt would
	// have been paid by then.
	owed, owedAt int64
}

// land ends a call to the shared store: it clears b.fetching (with fetch)
// and closes asking, waking its waiters.
func (b *book) land(fetch bool, asking chan struct{}) {
	if fetch {
		b.fetching = false
	}
	if asking != nil {
		close(asking)
		b.asking = nil
	}
}

// maxOwed bounds book.owed: stores charge at most two bursts of it, and
// the bound keeps the sum from overflowing.
const maxOwed = 1 << 40

// owe adds cost to the refusals the key owes, the last of them refused at
// at (Unix ms).
func (b *book) owe(cost, at int64) {
	b.owed, b.owedAt = min(b.owed+cost, maxOwed), at
}

// putBack returns owed refusals a call was to charge and did not: they
// wait for the key's next call, as old as they were.
func (b *book) putBack(owed int64) {
	b.owed = min(b.owed+owed, maxOwed)
}

// seen counts a request of weight (1 a request; a relay's caller, the
// tokens it asks for) at now and returns the key's demand here: the weight
// in the busier of the current and the previous window of size ms.
func (b *book) seen(now, size, weight int64) int64 {
	w := now - now%size
	switch {
	case w == b.window:
	case w == b.window+size:
		b.prev, b.cur = b.cur, 0
	default:
		b.prev, b.cur = 0, 0
	}
	b.window = w
	b.cur += weight
	b.lastUsed = now
	return max(b.cur, b.prev)
}

// holds reports whether b holds at now anything a call straight to the
// shared store would miss: leased tokens (or tokens dropped and not yet
// counted), a remembered refusal, or the shared store's last answer a
// refusal, refusals owed younger than fill ms (entry.fill), a call out.
func (b *book) holds(now, fill int64) bool {
	return b.tokens > 0 || b.dropped > 0 || now < b.deniedUntil || b.lastRefused ||
		b.owed > 0 && now-b.owedAt < fill || b.fetching || b.asking != nil
}

// expire drops leased tokens whose time is up. Expired tokens are never
// revived: a lowered limit must bite within a lease's lifetime.
func (b *book) expire(now int64) {
	if b.tokens > 0 && now >= b.expires {
		b.dropped += b.tokens
		b.tokens = 0
	}
}

// takeDropped returns the tokens dropped at expiry since the last call.
func (b *book) takeDropped() int64 {
	n := b.dropped
	b.dropped = 0
	return n
}

// spendUpTo takes at least cost and at most upTo leased tokens, as many as
// are held, and returns how many it took: 0 when fewer than cost are held.
func (b *book) spendUpTo(now, cost, upTo int64) int64 {
	b.expire(now)
	if b.tokens < cost {
		return 0
	}
	n := min(b.tokens, max(upTo, cost))
	b.tokens -= n
	return n
}

// add puts granted tokens in the lease, renewing all it holds until the
// given time (an earlier one only drops tokens sooner, which errs under).
func (b *book) add(now, granted, until int64, d limit.Decision) {
	b.lastRefused = false
	b.expire(now)
	b.tokens += granted
	b.expires = until
	b.last, b.lastAt = d, now
}

// refused reports whether a request of cost is refused from memory at now.
func (b *book) refused(now, cost int64) bool {
	return now < b.deniedUntil && cost >= b.deniedCost
}

// deny remembers the shared store's refusal of a request of cost: until its
// retry time, and hold ms more, nothing that costs as much can pass, so
// there is no need to ask (holding longer only refuses more). A request
// that can never pass is remembered for ttl.
func (b *book) deny(now, cost, ttl int64, d limit.Decision, hold int64) {
	b.lastRefused = true
	wait := d.RetryAfter.Milliseconds()
	if d.RetryAfter == limit.Never {
		wait = ttl
	} else if wait > 0 {
		wait = min(wait+max(hold, 0), max(wait, ttl))
	}
	if wait <= 0 {
		return
	}
	b.deniedUntil, b.deniedCost, b.denied = now+wait, cost, d
}

// deniedAt is the remembered refusal as it reads at now.
func (b *book) deniedAt(now int64) limit.Decision {
	d := b.denied
	d.Remaining = 0
	if d.RetryAfter != limit.Never {
		d.RetryAfter = time.Duration(b.deniedUntil-now) * time.Millisecond
	}
	return d
}

// leased is the answer for a request served from the lease at now: the
// shared store's last answer, with this gateway's tokens added to what it
// said remains (the best this gateway knows without asking).
func (b *book) leased(now int64) limit.Decision {
	d := b.last
	d.Allowed = true
	d.RetryAfter = 0
	d.Remaining += b.tokens
	d.ResetAfter = max(d.ResetAfter-time.Duration(now-b.lastAt)*time.Millisecond, 0)
	return d
}
