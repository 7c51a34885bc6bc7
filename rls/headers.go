package rls

import (
	"net/http"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluice-rl/sluice/gateway"
	"github.com/sluice-rl/sluice/limit"
)

// rateHeaders describes the caller's budget under l, the limit that
// decided d, with the headers sluice's gateway sends
// (gateway.SetRateHeaders), for Envoy's response_headers_to_add: Envoy adds
// them to the client's response, allowed or refused.
func rateHeaders(l *limit.Limit, d *limit.Decision) []*corev3.HeaderValue {
	h := make(http.Header, 6)
	gateway.SetRateHeaders(h, l, d)
	hs := make([]*corev3.HeaderValue, 0, len(h))
	for _, k := range [...]string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"} {
		if v := h.Get(k); v != "" {
			hs = append(hs, &corev3.HeaderValue{Key: k, Value: v})
		}
	}
	return hs
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
