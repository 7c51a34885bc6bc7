package limit

import (
	"strconv"
	"time"
)

// Budget is what a caller is told of its budget under the limit that
// decided its request, as data: the fields of the IETF httpapi
// ratelimit-headers draft (RateLimit-Policy, RateLimit), the common
// X-RateLimit-* fields and Retry-After. Package gateway writes them as HTTP
// header fields, package rls as Envoy's response_headers_to_add, both from
// [Budget.AppendValues]. A Budget is a value: copy it freely.
type Budget struct {
	// Policy is the limit's name, which names its policy.
	Policy string
	// Quota and Window are the policy: Quota tokens per Window seconds. A
	// bucket's quota is its burst and its window the time an empty bucket
	// takes to fill (so Remaining never exceeds Quota, and the long-run
	// rate is Quota/Window); a window algorithm's are its count and its
	// period. Window is at least 1.
	Quota, Window int64
	// Remaining is how many tokens the limit has left, at least 0.
	Remaining int64
	// Reset is how long until the limit is full again, or for window
	// algorithms until its window ends.
	Reset time.Duration
	// RetryAfter is how long a refused request should wait, at least a
	// millisecond: the decision's wait, or for a request that can never
	// pass, the limit's period, so that a client retrying blindly still
	// backs off. Zero when the request was allowed.
	RetryAfter time.Duration
}

// BudgetOf returns the budget d tells of under l, the limit that decided it
// (l is the request's Limits[d.Index]).
func BudgetOf(l *Limit, d *Decision) Budget {
	b := Budget{Policy: l.Name, Remaining: max(d.Remaining, 0), Reset: d.ResetAfter}
	p := l.PeriodMillis()
	if l.Alg().windowed() {
		b.Quota, b.Window = l.Count, max(ceilDiv(p, 1000), 1)
	} else {
		b.Quota = l.EffectiveBurst()
		b.Window = max(ceilDiv(b.Quota*p, l.Count*1000), 1)
	}
	if !d.Allowed {
		b.RetryAfter = d.RetryAfter
		if d.RetryAfter < 0 {
			b.RetryAfter = l.Period
		}
		b.RetryAfter = max(b.RetryAfter, time.Millisecond)
	}
	return b
}

// AppendValues appends the values of b's header fields to dst and
// returns the result, in this order, the order of [FieldName]:
// RateLimit-Policy (`"name";q=Quota;w=Window`), RateLimit
// (`"name";r=Remaining;t=Reset`), X-RateLimit-Limit,
// X-RateLimit-Remaining, X-RateLimit-Reset, and Retry-After when
// RetryAfter is set. Durations are in whole seconds, rounded up
// (Retry-After at least 1). The values share one string: they cost one
// allocation, and none more when dst has room for six.
func (b *Budget) AppendValues(dst []string) []string {
	var arr [128]byte
	buf := arr[:0]
	var ends [6]int
	t := ceilSeconds(b.Reset)
	buf = appendSFString(buf, b.Policy)
	buf = append(buf, ";q="...)
	buf = strconv.AppendInt(buf, b.Quota, 10)
	buf = append(buf, ";w="...)
	buf = strconv.AppendInt(buf, b.Window, 10)
	ends[0] = len(buf)
	buf = appendSFString(buf, b.Policy)
	buf = append(buf, ";r="...)
	buf = strconv.AppendInt(buf, b.Remaining, 10)
	buf = append(buf, ";t="...)
	buf = strconv.AppendInt(buf, t, 10)
	ends[1] = len(buf)
	for i, v := range [...]int64{b.Quota, b.Remaining, t} {
		buf = strconv.AppendInt(buf, v, 10)
		ends[2+i] = len(buf)
	}
	n := 5
	if b.RetryAfter > 0 {
		buf = strconv.AppendInt(buf, RetryAfterSeconds(b.RetryAfter), 10)
		ends[5] = len(buf)
		n = 6
	}
	all := string(buf)
	start := 0
	for _, end := range ends[:n] {
		dst = append(dst, all[start:end])
		start = end
	}
	return dst
}

// FieldName returns the name of the i-th value AppendValues appends, as
// the draft spells it ("RateLimit-Policy" for 0, "Retry-After" for 5).
func FieldName(i int) string { return fieldNames[i] }

// fieldNames are the names of AppendValues' fields, in its order.
var fieldNames = [...]string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"}

// RetryAfterSeconds is the value of a Retry-After field for a wait of d:
// whole seconds, rounded up, at least 1.
func RetryAfterSeconds(d time.Duration) int64 {
	return max(ceilSeconds(d), 1)
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return ceilDiv(int64(d), int64(time.Second))
}

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
