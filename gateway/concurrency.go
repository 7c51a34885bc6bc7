package gateway

import (
	"cmp"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sluice-rl/sluice/inflight"
	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/rules"
)

// ConcurrencyExceeded is the problem type of a request refused because its
// caller has as many requests in flight as its concurrency limit allows.
const ConcurrencyExceeded = "https://sluice.dev/problems/concurrency-limit"

// slotSource is a store that keeps concurrency slots beside its rate
// limits: pipeline.Pipeline.
type slotSource interface{ Slots() *inflight.Slots }

// held is the concurrency slots one request holds, one per limit of its
// rules.Resolution.Concurrency (at most four: the key's, the org's and
// the shadow ones of each).
type held [4]inflight.Slot

// release gives back every slot held.
func (h *held) release() {
	for i := range h {
		h[i].Release()
	}
}

// shadowSlotPrefix starts the store key of a shadow limit's slots, which
// no caller's or org's store key starts with, so a shadow rule's slots
// never count against the enforced ones.
const shadowSlotPrefix = "shadow:"

// hold takes the concurrency slots of the limits check resolved for the
// request (p.conc), once check has passed it: the caller must release
// them when the response ends, however it ends. The key's limit counts
// its own requests, an org rule's every key of the org; the request needs
// a slot of both, and a refused request holds none. It writes
// X-Concurrency-Limit and X-Concurrency-In-Flight of the enforced limit
// with the fewest slots left, and refuses with 429 (or 503, a fail-closed
// rule while the shared store cannot answer) when one has none. A shadow
// limit's slots are its own; what it would refuse passes, reported.
func (l *Limiter) hold(w http.ResponseWriter, p *pending) (held, error) {
	var h held
	if len(p.conc) == 0 {
		return h, nil
	}
	src, ok := storeAs[slotSource](l.store)
	if !ok || src.Slots() == nil {
		return h, nil
	}
	cl, r := p.cl, p.cl.r
	// Until hold returns its slots for the caller to release, it releases
	// them itself on the way out, a panic in a decision callback
	// (shadowRefused runs the embedder's OnDecision) included.
	kept := false
	defer func() {
		if !kept {
			h.release()
		}
	}()
	room := int64(-1) // the fewest slots left of an enforced limit
	for i := range min(len(p.conc), len(h)) {
		cc := &p.conc[i]
		key := cmp.Or(cc.Key, cl.caller.key)
		if cc.Shadow {
			key = shadowSlotPrefix + key
		}
		slot, d := src.Slots().Acquire(r.Context(), key, cc.Most, !cc.Shadow && cc.Rule.FailMode == rules.FailClosed)
		h[i] = slot
		if cc.Shadow {
			if !d.Allowed {
				l.shadowRefused(cl, limit.Limit{Name: "concurrency", Count: cc.Most, Shadow: true}, cc.Rule, d.Source, "concurrency", 1)
			}
			continue
		}
		if left := d.Limit - d.InFlight; room < 0 || left < room || !d.Allowed {
			room = left
			hd := w.Header()
			hd["X-Concurrency-Limit"] = []string{strconv.FormatInt(d.Limit, 10)}
			hd["X-Concurrency-In-Flight"] = []string{strconv.FormatInt(d.InFlight, 10)}
		}
		if !d.Allowed {
			return held{}, l.concurrencyRefusal(w, cl, cc, &d)
		}
	}
	kept = true
	return h, nil
}

// concurrencyRefusal is the answer to a request limit cc refused (d).
func (l *Limiter) concurrencyRefusal(w http.ResponseWriter, cl call, cc *rules.ConcurrencyLimit, d *inflight.Decision) error {
	whose := "this caller"
	if cc.Key != "" {
		whose = "this caller's organization"
	}
	rule := problemRule(cc.Rule, cl.version)
	if d.Source == limit.FromFailClosed {
		return &Error{Problem: Problem{Type: "about:blank", Title: http.StatusText(http.StatusServiceUnavailable),
			Status: http.StatusServiceUnavailable, Limit: "concurrency", Rule: &rule,
			Detail: "the concurrency limit of " + whose + " cannot be checked while the shared store is unreachable, and its rule fails closed"}}
	}
	// A slot ends when a request does, usually well before the oldest
	// slot's timeout (d.RetryAfter): ask for a retry in a second.
	const wait = 1000
	w.Header()["Retry-After"] = []string{"1"}
	return &Error{Problem: Problem{
		Type: ConcurrencyExceeded, Title: "Too Many Requests: concurrency limit", Status: http.StatusTooManyRequests,
		Detail: fmt.Sprintf("concurrency limit: at most %d requests of %s in flight at once, and %d are; retry when one ends; set by %s",
			d.Limit, whose, d.InFlight, describeRule(rule)),
		Limit: "concurrency", ViolatedPolicies: []string{"concurrency"}, RetryAfterMillis: wait, Rule: &rule,
	}}
}

// storeAs finds in the store, or a store it wraps (an Unwrap method, as
// tracing.Store has), the first that is a T: a pipeline's quotas and slots
// sit beside limit.Store, and a wrapper must not hide them.
func storeAs[T any](s limit.Store) (T, bool) {
	for range 8 {
		if t, ok := s.(T); ok {
			return t, true
		}
		u, ok := s.(interface{ Unwrap() limit.Store })
		if !ok {
			break
		}
		s = u.Unwrap()
	}
	var zero T
	return zero, false
}
