package gateway

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/limit"
	"github.com/sluice-rl/sluice/quota"
	"github.com/sluice-rl/sluice/rules"
)

// quotaSource is a store that counts daily and monthly quotas in batches
// beside its rate limits: pipeline.Pipeline.
type quotaSource interface{ Quotas() *quota.Batcher }

// takeQuotas counts an admitted request of an API key against its quotas
// (res.Quotas), after its rate limits passed, so that a request the rate
// limits refuse is not counted. It writes the Quota-* headers of the
// quota with the least left, and refuses with 429 when one is used up. A
// store without quotas, or a failed read of an unknown counter, lets the
// request pass: quotas fail open, the count catching up at the next flush.
func (l *Limiter) takeQuotas(w http.ResponseWriter, cl call, res *rules.Resolution) error {
	if len(res.Quotas) == 0 || cl.caller.apiKey == "" {
		return nil
	}
	src, ok := storeAs[quotaSource](l.store)
	if !ok || src.Quotas() == nil {
		return nil
	}
	d, err := src.Quotas().Take(cl.r.Context(), cl.caller.key, res.Quotas, res.Cost)
	if err != nil {
		return nil
	}
	if d.ShadowRefused {
		q := &res.Quotas[d.ShadowIndex]
		l.shadowRefused(cl, limit.Limit{Name: q.Name, Count: q.Count, Shadow: true}, ruleAt(res.QuotaRules, d.ShadowIndex),
			limit.FromStore, "quota", res.Cost)
	}
	if d.Index < 0 {
		return nil // shadow quotas only
	}
	q := &res.Quotas[d.Index]
	h := w.Header()
	h["X-Quota-Limit"] = []string{strconv.FormatInt(q.Count, 10)}
	h["X-Quota-Remaining"] = []string{strconv.FormatInt(d.Remaining, 10)}
	h["X-Quota-Reset"] = []string{strconv.FormatInt(int64((d.ResetAfter+time.Second-1)/time.Second), 10)}
	if d.Allowed {
		return nil
	}
	wait := max(d.ResetAfter, time.Millisecond)
	h["Retry-After"] = []string{strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10)}
	return &Error{Problem: Problem{
		Type: QuotaExceeded, Title: "Too Many Requests: quota exceeded", Status: http.StatusTooManyRequests,
		Detail: fmt.Sprintf("%s quota %q (%d a %s) is used up; it renews in %d s", q.Period, q.Name, q.Count, q.Period,
			int64((wait+time.Second-1)/time.Second)),
		Limit: q.Name, ViolatedPolicies: []string{q.Name}, RetryAfterMillis: wait.Milliseconds(),
	}}
}
