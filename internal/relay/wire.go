// Package relay is sluice's lease relay: a small stateless service per
// data centre that a group of gateways lease tokens from instead of Redis,
// and the gateway's client for it. docs/relay.md specifies the protocol.
//
// At 100 times the traffic a fleet has tens of thousands of gateways, and
// a gateway's share of 100 ms of a busy key's limit rounds to one token:
// every request calls Redis. A relay leases for its whole group instead,
// its share of 100 ms of the limit (the limit over the number of relays),
// and cuts sub-leases for its gateways from memory. Quiet keys pass
// through to Redis in one call, as they would from the gateway.
//
// The Server is a lease.Store (over the guard and the Redis store) behind
// an HTTP handler: every grant it makes left Redis before it was made, and
// its TTL is what is left of the relay's lease on the key, so a sub-lease
// never outlives the lease it was cut from. The Client is the gateway's
// side, a lease.Leaser: it batches concurrent calls into one request per
// relay, fails over between relays, and leases from Redis directly (the
// store it is given as Direct, the guard) while no relay answers.
package relay

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limit"
)

// LeasePath is the relay's one endpoint: POST a LeaseRequest, get a
// LeaseResponse.
const LeasePath = "/v1/lease"

// The protocol's bounds. A request beyond them is refused whole with 400
// (413 for the body), naming the bound; nothing is taken.
const (
	// MaxTakes is the most takes one request carries.
	MaxTakes = 256
	// MaxLimits is the most limits one take carries.
	MaxLimits = 16
	// MaxKeyBytes is the longest key.
	MaxKeyBytes = 1024
	// MaxBodyBytes is the largest request body.
	MaxBodyBytes = 1 << 20
	// MaxWant is the most tokens one take asks for.
	MaxWant = 1 << 40
)

// LeaseRequest is the body of a POST to LeasePath: takes the relay answers
// independently, in order.
type LeaseRequest struct {
	Takes []Take `json:"takes"`
}

// Take asks for at least Cost and at most Want tokens of every limit of
// Key: a limit.Request and the want of limit.Granter.TakeUpTo.
type Take struct {
	Key    string  `json:"key"`
	Cost   int64   `json:"cost,omitempty"`
	Want   int64   `json:"want,omitempty"`
	Limits []Limit `json:"limits"`
	// Refused is limit.Request.Refused: refusals the gateway answered from
	// memory, charged to the limits that count refusals.
	Refused int64 `json:"refused,omitempty"`
}

// Limit is a limit.Limit on the wire; periods in milliseconds.
type Limit struct {
	Name       string `json:"name"`
	Count      int64  `json:"count"`
	PeriodMS   int64  `json:"period_ms"`
	Burst      int64  `json:"burst,omitempty"`
	Algorithm  string `json:"algorithm,omitempty"`
	FailClosed bool   `json:"fail_closed,omitempty"`
	Shadow     bool   `json:"shadow,omitempty"`
	// CountRefusals is limit.Limit.CountRefusals.
	CountRefusals bool `json:"count_refusals,omitempty"`
}

// LeaseResponse answers a LeaseRequest: one Grant per Take, in order.
type LeaseResponse struct {
	Grants []Grant `json:"grants"`
}

// Grant is the relay's answer to one Take: a lease.Grant, or an error.
type Grant struct {
	Granted      int64    `json:"granted"`
	TTLMS        int64    `json:"ttl_ms"`
	Allowed      bool     `json:"allowed"`
	Index        int      `json:"index"`
	Remaining    int64    `json:"remaining"`
	RetryAfterMS int64    `json:"retry_after_ms"` // -1: never
	ResetAfterMS int64    `json:"reset_after_ms"`
	Source       string   `json:"source,omitempty"`
	Shadow       *Verdict `json:"shadow,omitempty"`
	// Error, when set, says why the relay could not answer the take; the
	// fields above are then zero. Invalid says the take itself was wrong
	// (limit.ErrInvalid).
	Error   string `json:"error,omitempty"`
	Invalid bool   `json:"invalid,omitempty"`
}

// Verdict is a limit.ShadowVerdict on the wire.
type Verdict struct {
	Allowed      bool  `json:"allowed"`
	Index        int   `json:"index"`
	Remaining    int64 `json:"remaining"`
	RetryAfterMS int64 `json:"retry_after_ms"`
}

// takeOf writes req and want as a Take.
func takeOf(req *limit.Request, want int64) Take {
	t := Take{Key: req.Key, Cost: req.Cost, Want: want, Limits: make([]Limit, len(req.Limits)), Refused: req.Refused}
	for i := range req.Limits {
		l := &req.Limits[i]
		t.Limits[i] = Limit{Name: l.Name, Count: l.Count, PeriodMS: l.PeriodMillis(), Burst: l.Burst,
			Algorithm: string(l.Algorithm), FailClosed: l.FailClosed, Shadow: l.Shadow, CountRefusals: l.CountRefusals}
	}
	return t
}

// request reads t as a valid limit.Request, or says what is wrong with it.
func (t *Take) request() (*limit.Request, error) {
	switch {
	case len(t.Key) > MaxKeyBytes:
		return nil, fmt.Errorf("key is %d bytes, more than %d", len(t.Key), MaxKeyBytes)
	case len(t.Limits) > MaxLimits:
		return nil, fmt.Errorf("%d limits, more than %d", len(t.Limits), MaxLimits)
	case t.Want < 0 || t.Want > MaxWant:
		return nil, fmt.Errorf("want %d: must be between 0 and %d", t.Want, int64(MaxWant))
	}
	req := &limit.Request{Key: t.Key, Cost: t.Cost, Limits: make([]limit.Limit, len(t.Limits)), Refused: min(max(t.Refused, 0), MaxWant)}
	for i, l := range t.Limits {
		if l.PeriodMS <= 0 || l.PeriodMS > int64(limit.MaxWait/time.Millisecond) {
			return nil, fmt.Errorf("limit %q: period %dms out of range", l.Name, l.PeriodMS)
		}
		req.Limits[i] = limit.Limit{Name: l.Name, Count: l.Count, Period: time.Duration(l.PeriodMS) * time.Millisecond,
			Burst: l.Burst, Algorithm: limit.Algorithm(l.Algorithm), FailClosed: l.FailClosed, Shadow: l.Shadow, CountRefusals: l.CountRefusals}
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}

// grantOf writes a lease.Grant, or err, for the wire.
func grantOf(g lease.Grant, err error) Grant {
	if err != nil {
		return Grant{Error: err.Error(), Invalid: errors.Is(err, limit.ErrInvalid)}
	}
	d := &g.Decision
	w := Grant{Granted: g.Granted, TTLMS: g.TTL.Milliseconds(), Allowed: d.Allowed, Index: d.Index, Remaining: d.Remaining,
		RetryAfterMS: millis(d.RetryAfter), ResetAfterMS: d.ResetAfter.Milliseconds(), Source: string(d.Source)}
	if d.Shadow.Checked {
		w.Shadow = &Verdict{Allowed: d.Shadow.Allowed, Index: d.Shadow.Index, Remaining: d.Shadow.Remaining, RetryAfterMS: millis(d.Shadow.RetryAfter)}
	}
	return w
}

// lease reads w as a lease.Grant, or the relay's error for the take.
func (w *Grant) lease() (lease.Grant, error) {
	if w.Error != "" {
		if w.Invalid {
			return lease.Grant{}, fmt.Errorf("relay: %w: %s", limit.ErrInvalid, w.Error)
		}
		return lease.Grant{}, fmt.Errorf("relay: %s", w.Error)
	}
	if w.Granted < 0 || (w.Granted > 0) != w.Allowed {
		return lease.Grant{}, fmt.Errorf("relay: %w: granted %d with allowed %v", limit.ErrBadReply, w.Granted, w.Allowed)
	}
	d := limit.Decision{Allowed: w.Allowed, Index: w.Index, Remaining: w.Remaining, RetryAfter: duration(w.RetryAfterMS),
		ResetAfter: time.Duration(w.ResetAfterMS) * time.Millisecond, Source: limit.Source(w.Source)}
	if v := w.Shadow; v != nil {
		d.Shadow = limit.ShadowVerdict{Checked: true, Allowed: v.Allowed, Index: v.Index, Remaining: v.Remaining, RetryAfter: duration(v.RetryAfterMS)}
	}
	return lease.Grant{Granted: w.Granted, TTL: time.Duration(w.TTLMS) * time.Millisecond, Decision: d}, nil
}

func millis(d time.Duration) int64 {
	if d == limit.Never {
		return -1
	}
	return d.Milliseconds()
}

func duration(ms int64) time.Duration {
	if ms < 0 {
		return limit.Never
	}
	return time.Duration(ms) * time.Millisecond
}
