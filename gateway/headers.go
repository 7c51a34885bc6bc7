package gateway

import (
	"net/http"

	"github.com/sluice-rl/sluice/limit"
)

// SetRateHeaders writes the caller's budget b into h: the draft's
// RateLimit-Policy and RateLimit structured fields and the common
// X-RateLimit-* fields, and Retry-After when the request was refused
// (limit.Budget.AppendValues, in its order, under the names' canonical
// form). The values share one string and one slice, so a response's
// headers cost two allocations.
func SetRateHeaders(h http.Header, b *limit.Budget) {
	n := len(rateHeaders)
	if b.RetryAfter > 0 {
		n++ // and Retry-After
	}
	vals := b.AppendValues(make([]string, 0, n))
	h["Ratelimit-Policy"] = vals[0:1:1]
	h["Ratelimit"] = vals[1:2:2]
	h["X-Ratelimit-Limit"] = vals[2:3:3]
	h["X-Ratelimit-Remaining"] = vals[3:4:4]
	h["X-Ratelimit-Reset"] = vals[4:5:5]
	if len(vals) > 5 {
		h["Retry-After"] = vals[5:6:6]
	}
}

// rateHeaders are the budget fields SetRateHeaders writes, Retry-After
// aside, which the proxy drops from upstream responses so a client sees
// only the gateway's account of its budget.
var rateHeaders = [...]string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}
