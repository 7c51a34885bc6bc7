package rls

import (
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluice-rl/sluice/limit"
)

// The headers below are the ones sluice's gateway sends (gateway/headers.go),
// built for Envoy's response_headers_to_add: Envoy adds them to the
// client's response, allowed or refused.

// quota describes l as RateLimit-Policy does: q units per window of w
// seconds. A bucket's quota is its burst and its window the time an empty
// bucket takes to fill; a window algorithm's, its count per period.
func quota(l *limit.Limit) (q, w int64) {
	p := l.PeriodMillis()
	if l.Alg() == limit.TokenBucket || l.Alg() == limit.GCRA {
		q = l.EffectiveBurst()
		return q, max((q*p+l.Count*1000-1)/(l.Count*1000), 1)
	}
	return l.Count, max((p+999)/1000, 1)
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// rateHeaders describes the caller's budget under l, the limit that
// decided d: RateLimit-Policy and RateLimit (structured fields, the limit
// name quoted), X-RateLimit-Limit, -Remaining and -Reset, and Retry-After
// when refused (a request that can never pass waits one period).
func rateHeaders(l *limit.Limit, d *limit.Decision) []*corev3.HeaderValue {
	q, w := quota(l)
	r := strconv.FormatInt(max(d.Remaining, 0), 10)
	t := strconv.FormatInt(ceilSeconds(d.ResetAfter), 10)
	name := strconv.Quote(l.Name) // names are printable ASCII: only " and \ are escaped
	hs := []*corev3.HeaderValue{
		{Key: "RateLimit-Policy", Value: name + ";q=" + strconv.FormatInt(q, 10) + ";w=" + strconv.FormatInt(w, 10)},
		{Key: "RateLimit", Value: name + ";r=" + r + ";t=" + t},
		{Key: "X-RateLimit-Limit", Value: strconv.FormatInt(q, 10)},
		{Key: "X-RateLimit-Remaining", Value: r},
		{Key: "X-RateLimit-Reset", Value: t},
	}
	if !d.Allowed {
		wait := d.RetryAfter
		if wait < 0 {
			wait = l.Period
		}
		hs = append(hs, &corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(max(ceilSeconds(wait), 1), 10)})
	}
	return hs
}
