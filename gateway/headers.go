package gateway

import (
	"net/http"

	"github.com/sluice-rl/sluice/limit"
)

// SetRateHeaders writes the caller's budget b into h: the draft's
// RateLimit-Policy and RateLimit structured fields and the common
// X-RateLimit-* fields, and Retry-After when the request was refused
// (limit.Budget.AppendFields). The values share one string and one slice,
// so a response's headers cost two allocations.
func SetRateHeaders(h http.Header, b *limit.Budget) {
	var arr [6]limit.Field
	fields := b.AppendFields(arr[:0])
	vals := make([]string, len(fields))
	for i, f := range fields {
		vals[i] = f.Value
		key := f.Name // Retry-After, already canonical
		if i < len(rateHeaders) {
			key = rateHeaders[i]
		}
		h[key] = vals[i : i+1 : i+1]
	}
}

// rateHeaders are the canonical names of the budget fields SetRateHeaders
// writes, in limit.Budget.AppendFields' order, which the proxy drops from
// upstream responses so a client sees only the gateway's account of its
// budget.
var rateHeaders = [...]string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}
