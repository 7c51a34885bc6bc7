package limit

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
	"unsafe"
)

// Algorithm names how a limit counts. The zero value means [TokenBucket].
type Algorithm string

// The algorithms a limit may use.
const (
	// TokenBucket refills continuously at Count per Period up to Burst tokens.
	TokenBucket Algorithm = "token_bucket"
	// GCRA is the generic cell rate algorithm: a token bucket kept as one
	// timestamp (the theoretical arrival time).
	GCRA Algorithm = "gcra"
	// SlidingWindow estimates the rolling window from two fixed-window
	// counters, weighting the previous one by how much of it still overlaps.
	SlidingWindow Algorithm = "sliding_window"
	// FixedWindow counts per calendar window of length Period.
	FixedWindow Algorithm = "fixed_window"
	// SlidingLog keeps the time of every admitted token in the rolling window:
	// exact, and capped at Count entries.
	SlidingLog Algorithm = "sliding_log"
)

// Algorithms lists every algorithm in the order the documentation shows them.
var Algorithms = []Algorithm{TokenBucket, GCRA, SlidingWindow, FixedWindow, SlidingLog}

// Never is the RetryAfter of a request that can never pass, because its cost
// is larger than a limit's burst.
const Never time.Duration = -1

// maxExact is 2^53: a float64 (and so a Redis Lua number) holds every
// integer up to it exactly. Validate keeps every product an algorithm
// stores, subtracts or divides below it: burst × period and rate × period
// (the capacities in credits), and GCRA's timestamps until 2109. Sums of two
// such values can pass it, so the algorithms only compare those with a
// value below 2^53, which rounding cannot flip, and the Redis script
// rounds quotients up without forming a + b - 1. Then the in-process store
// and the Redis script compute identical answers.
const maxExact = 1 << 53

// MaxWait is the longest RetryAfter or ResetAfter a valid limit can answer
// with: 732 days, two leap years, which is what a sliding window over the
// longest period the rules accept (366 days) may ask a client to wait.
// Validate refuses limits that could ask for more (a bucket that takes
// longer than this to refill), so a wait always fits a time.Duration and
// means something to a client.
const MaxWait = 2 * 366 * 24 * time.Hour

// Limit is one rate limit of a key, for example "100 a second, bursts of
// 200". A Limit is a value: copy it freely. The zero value is invalid; see
// [Limit.Validate].
//
// A key's state for a limit is found by [Limit.BucketID], which holds the
// name, algorithm and period but not the rate or the burst, so a rule change
// of either keeps the key's state and reads it under the new values. GCRA is
// the exception: its state is one timestamp counted in units that depend on
// the rate ([Limit.Unit]), and its BucketID holds that unit too. A rate
// change that keeps the unit (any rate whose Count divides the period in
// milliseconds: 10 a second, 5000 a minute) keeps the timestamp as a time,
// so the key's debt carries over in time, as in redis-cell, which never
// admits more than a fresh bucket of the new rate would; a change of unit
// starts a fresh bucket, as a change of period does for every algorithm.
//
// Stores keep a state only as long as the limit that wrote it needs it:
// until the bucket would be full again, or the window is over. So raising a
// token bucket's burst (or lowering its rate) can give a key its new full
// burst up to one old refill time early: a drained key whose state expires
// starts full under the new limit, where a moment before it had refilled
// only what the old limit gave back. GCRA's timestamp is the time the
// bucket is full under any limit that shares its bucket, so it expires
// exactly then.
type Limit struct {
	// Name identifies the limit among a key's limits ("s", "m", "login").
	// Two rules that name the same limit share its bucket (GCRA limits:
	// when their rates count in the same unit; see [Limit.BucketID]).
	Name string
	// Count is how many tokens the limit grants per Period.
	Count int64
	// Period is the length of the rate's time unit: a whole number of
	// milliseconds, at least one.
	Period time.Duration
	// Burst is the most tokens one key may hold at once. Zero means Count.
	// Window algorithms ignore it: their window holds Count.
	Burst int64
	// Algorithm chooses how the limit counts. Empty means TokenBucket.
	Algorithm Algorithm
	// FailClosed says that when the shared store cannot answer, requests
	// under this limit are refused rather than limited approximately. It is
	// for security limits: logins, password resets, SMS. A shadow limit
	// never fails closed: it never refuses.
	FailClosed bool
	// Shadow marks a limit tried out before it is enforced (a rule's mode:
	// shadow). It is checked in the same store call as the request's
	// enforced limits, under the same key, on a bucket of its own
	// (BucketID ends in ":shadow"), and it never refuses: Decision.Allowed
	// and Index speak of the enforced limits alone, and Decision.Shadow
	// says what the shadow limits would have done.
	//
	// The shadow limits of a request are one group, as a request of their
	// own would be: they take the cost when every one of them allows it,
	// and nothing otherwise, whatever the enforced limits answered. So a
	// shadow bucket counts the traffic that reaches the limiter, as the
	// limit would if it replaced the enforced ones, including requests the
	// enforced limits refuse. A take of more than the cost (TakeUpTo)
	// takes the cost from the shadow limits, once.
	Shadow bool
	// CountRefusals says that a request this limit's request refuses still
	// spends its cost from this limit (a rule's refusals: count), for
	// clients that ignore 429: the store takes it in the same atomic call
	// that refused, whatever the limit holds, leaving debt of at most one
	// burst, and the refusal's RetryAfter says when the request fits after
	// that debt. A client that waits it passes; one that retries sooner is
	// refused and charged again, so it stays out until it stops. Only
	// token buckets and GCRA count refusals: window algorithms ignore it,
	// and so do shadow limits, which never refuse.
	CountRefusals bool
}

// ChargesRefusals reports whether a refusal charges l (CountRefusals on an
// enforced token bucket or GCRA limit).
func (l *Limit) ChargesRefusals() bool {
	return l.CountRefusals && !l.Shadow && (l.Alg() == TokenBucket || l.Alg() == GCRA)
}

// EffectiveBurst reports the most tokens the limit holds at once, and so
// the largest cost it can ever allow: for the token bucket and GCRA, Burst,
// or Count when Burst is zero; for the window algorithms, which ignore
// Burst, Count.
func (l *Limit) EffectiveBurst() int64 {
	if l.Burst > 0 && !l.Alg().windowed() {
		return l.Burst
	}
	return l.Count
}

// windowed reports whether a counts tokens per window of Period, with Count
// as its capacity, rather than refilling a bucket.
func (a Algorithm) windowed() bool {
	return a == SlidingWindow || a == FixedWindow || a == SlidingLog
}

// MaxLogCount is the largest Count a sliding_log limit may have: the log
// keeps one entry per token, and the Redis script reads them all on every
// request, so a larger log would cost more than it is worth.
const MaxLogCount = 10000

// Alg reports the algorithm, resolving the empty default to TokenBucket.
func (l *Limit) Alg() Algorithm {
	return cmp.Or(l.Algorithm, TokenBucket)
}

// PeriodMillis reports Period in whole milliseconds.
func (l *Limit) PeriodMillis() int64 { return l.Period.Milliseconds() }

// Validate reports whether the limit can be enforced, with an error that
// names the field at fault.
func (l *Limit) Validate() error {
	switch {
	case l.Name == "":
		return errors.New("limit: name is empty")
	case len(l.Name) > 64:
		return fmt.Errorf("limit %q: name is %d bytes, longer than 64", l.Name[:16]+"...", len(l.Name))
	case l.Count <= 0:
		return fmt.Errorf("limit %q: rate %d must be positive", l.Name, l.Count)
	case l.Period < time.Millisecond:
		return fmt.Errorf("limit %q: period %v is shorter than 1ms", l.Name, l.Period)
	case l.Period%time.Millisecond != 0:
		return fmt.Errorf("limit %q: period %v is not a whole number of milliseconds", l.Name, l.Period)
	case l.Burst < 0:
		return fmt.Errorf("limit %q: burst %d must not be negative", l.Name, l.Burst)
	}
	for i := 0; i < len(l.Name); i++ {
		if c := l.Name[i]; c <= ' ' || c >= 0x7f || c == '{' || c == '}' || c == ':' {
			return fmt.Errorf("limit %q: name may hold only printable ASCII without spaces, braces or colons", l.Name)
		}
	}
	if !l.Alg().Known() {
		return fmt.Errorf("limit %q: unknown algorithm %q (want one of %v)", l.Name, l.Algorithm, Algorithms)
	}
	p := l.PeriodMillis()
	if b := l.EffectiveBurst(); b > math.MaxInt64/p || b*p >= maxExact {
		return fmt.Errorf("limit %q: burst %d times period %dms is too large to count exactly (it must be below 2^53)", l.Name, b, p)
	}
	if l.Count > math.MaxInt64/p || l.Count*p >= maxExact {
		return fmt.Errorf("limit %q: rate %d times period %dms is too large to count exactly (it must be below 2^53)", l.Name, l.Count, p)
	}
	// The longest wait: a window algorithm's ends within two periods (the
	// sliding window may wait out this window and the next one's overlap);
	// a bucket's is the time to refill it from empty.
	maxWait := MaxWait.Milliseconds()
	if l.Alg().windowed() {
		if p > maxWait/2 {
			return fmt.Errorf("limit %q: %s over %v can ask a client to wait two periods, longer than %v", l.Name, l.Alg(), l.Period, MaxWait)
		}
	} else if w := ceilDiv(l.EffectiveBurst()*p, l.Count); w > maxWait {
		return fmt.Errorf("limit %q: burst %d at %d per %v takes %v to refill, longer than %v",
			l.Name, l.EffectiveBurst(), l.Count, l.Period, time.Duration(w)*time.Millisecond, MaxWait)
	}
	switch l.Alg() {
	case GCRA:
		// GCRA's timestamp is the time in units of 1/perMs ms plus at most
		// the burst's worth of units; it must stay exact until the horizon.
		perMs, perToken := gcraUnits(l)
		if perMs > (maxExact-l.EffectiveBurst()*perToken)/horizon {
			return fmt.Errorf("limit %q: gcra at %d per %dms counts time in 1/%d ms, too fine to stay exact until 2109 "+
				"(use token_bucket, or a rate that divides the period more evenly)", l.Name, l.Count, l.PeriodMillis(), perMs)
		}
	case SlidingLog:
		if l.Count > MaxLogCount {
			return fmt.Errorf("limit %q: sliding_log keeps one entry per token, and rate %d is more than %d entries "+
				"(use sliding_window)", l.Name, l.Count, MaxLogCount)
		}
	}
	return nil
}

// Known reports whether a names an algorithm sluice implements (Evaluate
// knows every one of Algorithms).
func (a Algorithm) Known() bool { return slices.Contains(Algorithms, a) }

// Request asks to take Cost tokens from every limit of one key at once.
type Request struct {
	// Key identifies whose limits these are: an API key or a client address,
	// already prefixed by its kind so that the two cannot collide. Stores
	// must treat it as opaque bytes.
	Key string
	// Cost is how many tokens the request takes from each limit. Zero
	// means 1.
	Cost int64
	// Limits are checked together: the request passes only if every one
	// allows it, and a refused request takes from none. Shadow limits
	// (Limit.Shadow) are checked in the same call and never refuse; a name
	// may appear twice, once enforced and once shadow.
	Limits []Limit
	// At is when the request is decided, for a caller that has already
	// read the clock. The zero Time means the store reads its own.
	// Stores that count by another clock (Redis's) ignore it.
	At time.Time
	// Refused is the cost of earlier requests of this key that a layer
	// refused from memory without asking the store (the lease layer's
	// refusal cache), to be charged to the limits that count refusals
	// (Limit.CountRefusals) in this call, before it is decided: so a
	// client that ignores 429 pays for every refusal without a store call
	// per refusal. Zero for a caller that refused nothing itself.
	Refused int64
}

// ChargesRefusals reports whether a refusal of r charges any of its limits
// (Limit.ChargesRefusals).
func (r *Request) ChargesRefusals() bool {
	for i := range r.Limits {
		if r.Limits[i].ChargesRefusals() {
			return true
		}
	}
	return false
}

// EffectiveCost reports Cost, or 1 when Cost is zero.
func (r *Request) EffectiveCost() int64 { return max(r.Cost, 1) }

// FailClosed returns the index of the first of the request's enforced
// limits that fails closed (Limit.FailClosed), or -1 when none does: the
// one rule, for every layer, of whether a request may be answered without
// the shared store. A shadow limit never refuses, so never fails closed.
func (r *Request) FailClosed() int {
	for i := range r.Limits {
		if r.Limits[i].FailClosed && !r.Limits[i].Shadow {
			return i
		}
	}
	return -1
}

// HasShadow reports whether any of the request's limits is a shadow limit
// (Limit.Shadow).
func (r *Request) HasShadow() bool { return hasShadow(r.Limits) }

func hasShadow(ls []Limit) bool {
	for i := range ls {
		if ls[i].Shadow {
			return true
		}
	}
	return false
}

// Validate checks the request before a store touches any state. Its
// errors match ErrInvalid (errors.Is), so that layers above a store can
// tell a request no store could take from a store that failed.
func (r *Request) Validate() error {
	if err := r.validate(); err != nil {
		return invalidError{err}
	}
	return nil
}

// ErrInvalid is matched by the errors of Request.Validate: the request
// itself is wrong, whatever store it goes to.
var ErrInvalid = errors.New("invalid rate limit request")

// invalidError is a validation error that matches ErrInvalid and reads as
// the error it wraps.
type invalidError struct{ error }

func (e invalidError) Is(target error) bool { return target == ErrInvalid }
func (e invalidError) Unwrap() error        { return e.error }

func (r *Request) validate() error {
	if len(r.Limits) == 0 {
		return errors.New("limit: request has no limits")
	}
	if r.Cost < 0 {
		return fmt.Errorf("limit: cost %d is negative", r.Cost)
	}
	if r.Refused < 0 {
		return fmt.Errorf("limit: refused cost %d is negative", r.Refused)
	}
	for i := range r.Limits {
		if err := r.Limits[i].Validate(); err != nil {
			return err
		}
		for j := 0; j < i; j++ {
			if r.Limits[j].Name == r.Limits[i].Name && r.Limits[j].Shadow == r.Limits[i].Shadow {
				return fmt.Errorf("limit %q: named twice in one request", r.Limits[i].Name)
			}
		}
	}
	return nil
}

// Decision is a store's answer to a Request.
type Decision struct {
	// Allowed reports whether the request passed every limit.
	Allowed bool
	// Index is the position in Request.Limits of the limit the headers
	// describe: the one that refused (the longest wait when several did), or
	// when allowed the one with the fewest tokens left. Only enforced
	// limits are described; a request with shadow limits alone has -1.
	Index int
	// Remaining is how many tokens that limit has left after this request.
	Remaining int64
	// RetryAfter is how long until the same request could pass; zero when
	// allowed, Never when the cost exceeds a limit's burst.
	RetryAfter time.Duration
	// ResetAfter is how long until that limit is full again, or for window
	// algorithms until its current window ends.
	ResetAfter time.Duration
	// Source says where the answer came from: whether every gateway saw
	// it, or this one answered alone. A store sets its own (memstore
	// FromMemory, redisstore FromRedis); a layer over a store sets only
	// the sources it answers from itself. Empty means a store that does
	// not say, which callers report as FromStore.
	Source Source
	// Shadow is what the request's shadow limits would have done. Its
	// zero value (not Checked) means the request had none, or the answer
	// checked no limit (a fail-closed refusal, a shed request).
	Shadow ShadowVerdict
	// Results holds every limit's own answer, in the order of
	// Request.Limits, when a store checked several limits or a shadow one
	// (memstore and redisstore fill it). It is empty for a request of one
	// enforced limit, whose answer is the Decision itself, and for an
	// answer that checked no limit or did not say; [Decision.Result]
	// reads it either way.
	Results Results
}

// Result is one limit's own answer within a Decision.
type Result struct {
	// Allowed reports whether this limit had room for the cost. A limit
	// can have room in a request another limit refused.
	Allowed bool
	// Remaining is how many tokens the limit holds after the request:
	// after the take when its group (the enforced limits, or the shadow
	// ones) took it, and as it is, nothing taken, when its group was
	// refused.
	Remaining int64
	// RetryAfter is how long until this limit has room for the cost: zero
	// when it had, Never when it never will.
	RetryAfter time.Duration
	// ResetAfter is how long until the limit is full again (window
	// algorithms: until its window ends), counted as if the cost had been
	// taken when the limit had room for it.
	ResetAfter time.Duration
}

// resultSize is the packed length of one Result in Results: a byte for
// Allowed and three little-endian int64s.
const resultSize = 25

// Results is a list of Result, one per limit of a request. It is a value,
// comparable with ==, so that two Decisions with the same answers are
// equal; its zero value holds none. Building one costs one allocation.
type Results struct{ packed string }

// NewResults returns the Results holding rs, in order.
func NewResults(rs []Result) Results {
	if len(rs) == 0 {
		return Results{}
	}
	b := make([]byte, 0, len(rs)*resultSize)
	for i := range rs {
		b = appendResult(b, &rs[i])
	}
	return packed(b)
}

// packed returns b as Results without copying it; b is not used again.
func packed(b []byte) Results { return Results{unsafe.String(unsafe.SliceData(b), len(b))} }

// appendResult appends r's packed form to b.
func appendResult(b []byte, r *Result) []byte {
	a := byte(0)
	if r.Allowed {
		a = 1
	}
	b = append(b, a)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.Remaining))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.RetryAfter))
	return binary.LittleEndian.AppendUint64(b, uint64(r.ResetAfter))
}

// Len reports how many Results r holds.
func (r Results) Len() int { return len(r.packed) / resultSize }

// At returns the i-th Result; it panics when i is out of range, as a
// slice index does.
func (r Results) At(i int) Result {
	p := r.packed[i*resultSize : (i+1)*resultSize]
	return Result{
		Allowed:    p[0] == 1,
		Remaining:  int64(binary.LittleEndian.Uint64([]byte(p[1:9]))),
		RetryAfter: time.Duration(binary.LittleEndian.Uint64([]byte(p[9:17]))),
		ResetAfter: time.Duration(binary.LittleEndian.Uint64([]byte(p[17:25]))),
	}
}

// Result reports the answer of limit i of the request d answers: from
// Results when the store filled it, else from d itself when i is the limit
// d describes (Index). ok is false when d does not say: a layer's answer
// for another limit of a request of several.
func (d *Decision) Result(i int) (r Result, ok bool) {
	if n := d.Results.Len(); n > 0 {
		if i < 0 || i >= n {
			return r, false
		}
		return d.Results.At(i), true
	}
	if i != d.Index || i < 0 {
		return r, false
	}
	return Result{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter}, true
}

// ResultOf is the Result of limit outcome o in a take of cost, whose group
// (enforced or shadow) took it when taken: a limit with room in a refused
// group has the cost back in Remaining, since nothing was taken.
func ResultOf(o *Outcome, cost int64, taken bool) Result {
	r := Result{Allowed: o.Allowed, Remaining: o.Remaining, ResetAfter: millis(o.ResetAfter)}
	switch {
	case o.Allowed && !taken:
		r.Remaining += cost
	case o.RetryAfter < 0:
		r.RetryAfter = Never
	case !o.Allowed:
		r.RetryAfter = millis(o.RetryAfter)
	}
	return r
}

// DecideEach is DecideRequest with Results filled, for a store that
// evaluated every limit of a request of cost: outs[i] is limits[i]'s
// outcome, at the cost for a group that was refused. A request of one
// enforced limit gets no Results: the Decision is its answer.
func DecideEach(outs []Outcome, limits []Limit, cost int64) Decision {
	d := DecideRequest(outs, limits)
	if len(outs) < 2 && !d.Shadow.Checked {
		return d
	}
	b := make([]byte, 0, len(outs)*resultSize)
	for i := range outs {
		taken := d.Allowed
		if limits[i].Shadow {
			taken = d.Shadow.Allowed
		}
		r := ResultOf(&outs[i], cost, taken)
		b = appendResult(b, &r)
	}
	d.Results = packed(b)
	return d
}

// ShadowVerdict is what a request's shadow limits (Limit.Shadow) would
// have done, had they been enforced.
type ShadowVerdict struct {
	// Checked reports whether the store checked the shadow limits.
	Checked bool
	// Allowed reports whether every shadow limit would have allowed the
	// request.
	Allowed bool
	// Index is the position in Request.Limits of the shadow limit the
	// verdict describes: the one that would have refused (the longest
	// wait), or when all allowed the one with the fewest tokens left.
	Index int
	// Remaining is how many tokens that limit has left.
	Remaining int64
	// RetryAfter is how long until that limit would allow the request:
	// zero when allowed, Never when it never would.
	RetryAfter time.Duration
}

// Source says which path answered a request. It is the source label of
// the gateway's decision metric and a field of its decision log.
type Source string

// The paths a decision can come from.
const (
	// FromMemory is the in-process store ([memstore]): exact for one
	// process, which is the only one counting.
	FromMemory Source = "memory"
	// FromRedis is the shared store's own decision.
	FromRedis Source = "redis"
	// FromLease is a token this process leased from the shared store
	// earlier and spent from memory.
	FromLease Source = "lease"
	// FromRefusalCache is a refusal the shared store made earlier,
	// repeated from memory until its retry time.
	FromRefusalCache Source = "refusal-cache"
	// FromLocalFallback is this process's own share of the limit, enforced
	// in memory while the key's shared store node cannot answer.
	FromLocalFallback Source = "local-fallback"
	// FromFailClosed is a refusal because a FailClosed limit could not be
	// checked in the shared store.
	FromFailClosed Source = "fail-closed"
	// FromShed is a request the process dropped because it was itself too
	// busy to get the shared store's answer in time, while the store was
	// answering.
	FromShed Source = "shed"
	// FromRegionShare is a refusal because this region's share of a
	// global limit rounds to nothing (package share): the balancer has
	// given the key's traffic to other regions.
	FromRegionShare Source = "region-share"
	// FromStore is the source reported for a store that did not say one:
	// an embedder's Store that leaves Decision.Source empty.
	FromStore Source = "store"
	// Unlimited is the source of a request no limit applied to: it passed
	// without asking a store.
	Unlimited Source = "unlimited"
)

// ErrBadReply is wrapped by a store's error when the shared store answered,
// but not with a usable decision: a key holding a value of another type, a
// script error, a reply of the wrong shape. The store itself is up, so
// layers that judge its health (guard) do not count it as an outage; the
// request alone fails, under its limits' fail mode.
var ErrBadReply = errors.New("the store answered with an unusable reply")

// Store takes tokens from the limits of one key atomically: memstore,
// redisstore and the layers over them (lease, guard, share);
// limittest.Run is the conformance suite. Its contract, for
// implementations and layers alike:
//
//   - Requests arrive valid ([Request.Validate]): the top of the stack
//     checks them once (pipeline.Pipeline.Take; the gateway's and rls's
//     limits when their rules are compiled), and nothing below checks
//     again. A store refuses, matching ErrInvalid, only what would make it
//     fail or corrupt what it keeps (memstore.Store.Take says what;
//     redisstore's script refuses, once per distinct limit, a rate, period
//     or burst below 1, a value too large to count exactly or a sliding
//     log over MaxLogCount); other invalid requests (a limit named twice,
//     a name with a colon) are answered, perhaps wrongly. An embedder that calls a store directly
//     calls Request.Validate on each request it builds (or once on limits
//     it reuses).
//   - Take must not modify req or anything it points to, and must not keep
//     req, its Limits or any part of them after it returns. A request's
//     Limits are usually the rules' resolution itself, shared by every
//     request of the same plan and endpoint: a store that writes to them
//     changes everyone's limits. A layer that needs other limits (share's
//     scaled ones, guard's local ones) builds a request of its own.
//   - It is safe for concurrent use: the gateway calls it from every
//     request's goroutine at once, on the request path, once per request
//     (lease: once per batch), and it honours ctx's deadline.
//   - The Decision's Source says which path answered: a store sets its
//     own, and a layer sets only the sources it answers from itself and
//     passes the rest through.
//   - An error means the store could not say: nothing is known about the
//     limits, and the caller decides whether to fail open or closed. An
//     error matching ErrInvalid is about the request itself, whatever the
//     store; one matching ErrBadReply comes from a store that answered,
//     unusably, and so is up; ctx's error means the caller gave up; any
//     other means the store could not be reached or did not answer in
//     time, which guard counts against the store's node.
type Store interface {
	// Take checks every limit of req and, only if all allow it, takes
	// req.Cost tokens from each. Shadow limits (Limit.Shadow) are checked
	// in the same call, as a group of their own that never refuses, and
	// answered in Decision.Shadow.
	Take(ctx context.Context, req *Request) (Decision, error)
}

// Granter is a Store that can also take more than a request's cost in one
// call: the batches token leases are drawn with. memstore and redisstore
// implement it; limittest.RunGranter is its conformance suite.
type Granter interface {
	Store
	// TakeUpTo takes as many tokens as every limit of req can spare, at
	// least req's cost and at most want (a want below the cost means the
	// cost; below 1 is an error), atomically, and reports how many it
	// took. When granted is positive, d describes the limits after the
	// take; when it is zero, d is the refusal Take would have given req.
	// The Store contract holds for it too.
	TakeUpTo(ctx context.Context, req *Request, want int64) (granted int64, d Decision, err error)
}

// BucketID names the stored state of l within one key. It holds the name,
// the algorithm and the period, and for GCRA the unit its timestamp counts
// in ([Limit.Unit]): "s:token_bucket:1000", "s:gcra:1000:3"; a shadow
// limit's ends in ":shadow" ("s:token_bucket:1000:shadow"), so that it
// never shares an enforced limit's state (an enforced ID ends in a number). A rule change
// that keeps those keeps the key's state, and rules that name the same limit
// share it; one that changes how the state counts (the period, or GCRA's
// unit) starts afresh.
func (l *Limit) BucketID() string {
	id := fmt.Sprintf("%s:%s:%d", l.Name, l.Alg(), l.PeriodMillis())
	if u := l.Unit(); u > 0 {
		id += ":" + strconv.FormatInt(u, 10)
	}
	if l.Shadow {
		id += ":shadow"
	}
	return id
}

// Unit reports how many units a millisecond is in the timestamp a GCRA limit
// stores: Count / gcd(Count, period in ms), so 1 for any rate whose Count
// divides the period in milliseconds (10 a second, 5000 a minute) and 3 for
// 3 a second. The state means nothing in other units, so the unit is part of
// BucketID. It is 0 for the other algorithms, whose state does not depend
// on the rate, and for a limit whose Count or Period Validate refuses.
func (l *Limit) Unit() int64 {
	if l.Alg() != GCRA || l.Count <= 0 || l.PeriodMillis() <= 0 {
		return 0
	}
	perMs, _ := gcraUnits(l)
	return perMs
}
