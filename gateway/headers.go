package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/limit"
)

// Quota describes a limit the way the RateLimit-Policy field does: q units
// per window of w seconds. A bucket's quota is its burst, and its window
// the time an empty bucket takes to fill, so the remaining count never
// exceeds the quota and the long-run rate is q/w. A window algorithm's
// quota is its count per period.
func Quota(l *limit.Limit) (q, w int64) {
	p := l.PeriodMillis()
	switch l.Alg() {
	case limit.TokenBucket, limit.GCRA:
		q = l.EffectiveBurst()
		return q, max(ceilDiv(q*p, l.Count*1000), 1)
	}
	return l.Count, max(ceilDiv(p, 1000), 1)
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return ceilDiv(int64(d), int64(time.Second))
}

// retryAfter is how long a refused request should wait: the decision's
// wait, or for a request that can never pass, the limit's period, so a
// client that retries blindly still backs off.
func retryAfter(l *limit.Limit, d *limit.Decision) time.Duration {
	if d.RetryAfter == limit.Never || d.RetryAfter < 0 {
		return l.Period
	}
	return d.RetryAfter
}

// SetRateHeaders writes the caller's budget under limit l, the limit that
// decided d, into h: the
// draft's RateLimit-Policy and RateLimit structured fields and the common
// X-RateLimit-* fields, and Retry-After when the request was refused. The
// values share one string and one slice, so a response's headers cost two
// allocations.
func SetRateHeaders(h http.Header, l *limit.Limit, d *limit.Decision) {
	q, w := Quota(l)
	r := max(d.Remaining, 0)
	t := ceilSeconds(d.ResetAfter)

	var arr [128]byte
	buf := arr[:0]
	var ends [6]int
	buf = appendSFString(buf, l.Name)
	buf = append(buf, ";q="...)
	buf = strconv.AppendInt(buf, q, 10)
	buf = append(buf, ";w="...)
	buf = strconv.AppendInt(buf, w, 10)
	ends[0] = len(buf)
	buf = appendSFString(buf, l.Name)
	buf = append(buf, ";r="...)
	buf = strconv.AppendInt(buf, r, 10)
	buf = append(buf, ";t="...)
	buf = strconv.AppendInt(buf, t, 10)
	ends[1] = len(buf)
	buf = strconv.AppendInt(buf, q, 10)
	ends[2] = len(buf)
	buf = strconv.AppendInt(buf, r, 10)
	ends[3] = len(buf)
	buf = strconv.AppendInt(buf, t, 10)
	ends[4] = len(buf)
	n := 5
	if !d.Allowed {
		buf = strconv.AppendInt(buf, max(ceilSeconds(retryAfter(l, d)), 1), 10)
		ends[5] = len(buf)
		n = 6
	}
	all := string(buf)
	vals := make([]string, n)
	start := 0
	for i := range n {
		vals[i] = all[start:ends[i]]
		start = ends[i]
	}
	h["Ratelimit-Policy"] = vals[0:1:1]
	h["Ratelimit"] = vals[1:2:2]
	h["X-Ratelimit-Limit"] = vals[2:3:3]
	h["X-Ratelimit-Remaining"] = vals[3:4:4]
	h["X-Ratelimit-Reset"] = vals[4:5:5]
	if n == 6 {
		h["Retry-After"] = vals[5:6:6]
	}
}

// rateHeaders are the fields SetRateHeaders writes, which the proxy drops
// from upstream responses so a client sees only the gateway's account of
// its budget.
var rateHeaders = [...]string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}

// appendSFString appends s quoted as a structured-field String (RFC
// 9651): limit names are printable ASCII, so only quote and backslash need
// escaping.
func appendSFString(out []byte, s string) []byte {
	out = append(out, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return append(out, '"')
}
