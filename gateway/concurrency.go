package gateway

import (
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

// hold takes the request's concurrency slot, once Check has passed it: the
// caller must Release the slot when the response ends, however it ends.
// A rule set without concurrency limits costs one flag read. It writes
// X-Concurrency-Limit and X-Concurrency-In-Flight, and refuses with 429
// (or 503, a fail-closed rule while the shared store cannot answer) when
// every slot is taken.
func (l *Limiter) hold(w http.ResponseWriter, r *http.Request) (inflight.Slot, error) {
	set := l.rules.Current()
	if set == nil || !set.HasConcurrency() {
		return inflight.Slot{}, nil
	}
	src, ok := storeAs[slotSource](l.store)
	if !ok || src.Slots() == nil {
		return inflight.Slot{}, nil
	}
	c, err := l.identify(r, set)
	if err != nil {
		return inflight.Slot{}, nil // Check answered it already
	}
	ep, _, err := set.MatchEndpoint(r.Method, r.URL.Path)
	if err != nil {
		return inflight.Slot{}, nil
	}
	res := set.Resolve(l.now(), rules.Query{APIKey: c.apiKey, Endpoint: ep.Name, LookedUp: true, Info: c.info, Known: c.known})
	if res.Concurrency == 0 {
		return inflight.Slot{}, nil
	}
	slot, d := src.Slots().Acquire(r.Context(), c.key, res.Concurrency, res.ConcurrencyRule.FailMode == rules.FailClosed)
	h := w.Header()
	h["X-Concurrency-Limit"] = []string{strconv.FormatInt(d.Limit, 10)}
	h["X-Concurrency-In-Flight"] = []string{strconv.FormatInt(d.InFlight, 10)}
	if d.Allowed {
		return slot, nil
	}
	if d.Source == limit.FromFailClosed {
		return inflight.Slot{}, &Error{Problem: Problem{Type: "about:blank", Title: http.StatusText(http.StatusServiceUnavailable),
			Status: http.StatusServiceUnavailable, Limit: "concurrency",
			Detail: "the concurrency limit cannot be checked while the shared store is unreachable, and its rule fails closed"}}
	}
	// A slot ends when a request does, usually well before the oldest
	// slot's timeout (d.RetryAfter): ask for a retry in a second.
	const wait = 1000
	h["Retry-After"] = []string{"1"}
	return inflight.Slot{}, &Error{Problem: Problem{
		Type: ConcurrencyExceeded, Title: "Too Many Requests: concurrency limit", Status: http.StatusTooManyRequests,
		Detail: fmt.Sprintf("concurrency limit: at most %d requests of this caller in flight at once, and %d are; retry when one ends",
			d.Limit, d.InFlight),
		Limit: "concurrency", ViolatedPolicies: []string{"concurrency"}, RetryAfterMillis: wait,
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
